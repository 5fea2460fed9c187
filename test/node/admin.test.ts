import { and, count, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  auditEvents,
  environments,
  githubInstallations,
  graphViews,
  orgMembers,
  orgs,
  serviceTokens,
  sessions,
  users,
} from '../../src/db/schema';
import { NUKED_TABLES } from '../../src/modules/admin/schemas';
import { expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, verifiedUser, type TestUser } from '../support/people';
import { ADMIN_PEOPLE_ROUTES } from '../support/people-matrix/admin';
import type { PeopleWorld } from '../support/people-matrix/route';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';

/**
 * The super-admin control plane (SPEC "Super-admin", "Organization
 * suspension"; DECISIONS §5, §7, §8): who may call it, each route's answer,
 * suspension as the organization's users and tokens see it, and the nuke.
 * The audit list's filters and pagination are test/node/audit.test.ts.
 */

const ROOT = 'root@example.com';
const PENDING = 'pending@example.com';

const ORG_ROW_FIELDS = ['createdAt', 'id', 'memberCount', 'name', 'projectCount', 'slug', 'suspendedAt'];
const MEMBER_FIELDS = ['email', 'joinedAt', 'name', 'role', 'userId'];
const PROJECT_FIELDS = ['createdAt', 'id', 'name', 'slug'];
const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const expectOk = (response: ApiResponse, status = 200) => expect(response.status, JSON.stringify(response.body)).toBe(status);

/** The audit events of one organization with one action, oldest first. */
async function auditOf(api: TestApi, orgId: string, action: string) {
  return api.db
    .select()
    .from(auditEvents)
    .where(and(eq(auditEvents.orgId, orgId), eq(auditEvents.action, action)))
    .orderBy(auditEvents.at);
}

/** A user signed up and added to `tenant`'s organization with `role` (rows: the members routes are another module's). */
async function memberOf(api: TestApi, tenant: Tenant, role: 'admin' | 'member'): Promise<TestUser> {
  const user = await signUp(api);
  await api.db.insert(orgMembers).values({ orgId: tenant.org.id, userId: user.id, role });
  return user;
}

describe('super-admin routes', () => {
  let api: TestApi;
  let receiver: Receiver;
  let root: TestUser;
  let pending: TestUser;
  let owner: TestUser;
  let tenant: Tenant;
  let ownerToken: string;
  let world: PeopleWorld;

  const as = (user: TestUser | string) => (typeof user === 'string' ? user : user.token);
  const get = (path: string, user: TestUser | string = root) => api.call('GET', path, { token: as(user) });
  const post = (path: string, user: TestUser | string = root) => api.call('POST', path, { token: as(user) });
  const nuke = (projectId: string, user: TestUser | string = root) => api.call('DELETE', `/admin/projects/${projectId}/nuke`, { token: as(user) });

  /** A fresh organization and project owned by a fresh user. */
  const freshTenant = async () => {
    const user = await signUp(api);
    return { user, ...(await createUserTenant(api, user)) };
  };

  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
    receiver.route('/flaky', { status: 503 });
    api = await createTestApi({ env: { SUPER_ADMIN_EMAILS: `${ROOT},${PENDING}`, OUTBOUND_ALLOWED_HOSTS: receiver.host } });
    root = await verifiedUser(api, ROOT);
    pending = await signUp(api, { email: PENDING });
    owner = await signUp(api);
    tenant = await createUserTenant(api, owner);
    ownerToken = await mintToken(api, tenant, { role: 'owner', as: owner.token });
    const outsider = await signUp(api);
    await createUserTenant(api, outsider);
    world = {
      ...tenant,
      owner,
      admin: await memberOf(api, tenant, 'admin'),
      member: await memberOf(api, tenant, 'member'),
      outsider,
      superAdmin: root,
      ownerToken,
    };
  });
  afterAll(async () => {
    await api.close();
    await receiver.close();
  });

  describe('who may call them', () => {
    it('the super-admin is verified, the pending address is not', async () => {
      const [rootRow] = await api.db.select({ verified: users.emailVerified }).from(users).where(eq(users.email, ROOT));
      const [pendingRow] = await api.db.select({ verified: users.emailVerified }).from(users).where(eq(users.email, PENDING));
      expect({ root: rootRow!.verified, pending: pendingRow!.verified }).toEqual({ root: true, pending: false });
    });

    describe.each(ADMIN_PEOPLE_ROUTES.map((route) => ({ ...route, name: `${route.method} ${route.path}` })))('$name', (route) => {
      it('answers 401 without a session', async () => {
        expectError(await route.call(api, world, undefined), 401, 'unauthorized');
      });
      it('answers 401 to a service token, even an owner one', async () => {
        expectError(await route.call(api, world, ownerToken), 401, 'unauthorized');
      });
      it('answers 403 to an owner, an admin, a member and an outsider', async () => {
        for (const user of [world.owner, world.admin, world.member, world.outsider]) {
          expectError(await route.call(api, world, user.token), 403, 'forbidden');
        }
      });
      it('answers 403 to a listed address that is not verified', async () => {
        expectError(await route.call(api, world, pending.token), 403, 'forbidden');
      });
      it(`answers ${route.success} to the super-admin`, async () => {
        expectOk(await route.call(api, world, root.token), route.success);
      });
    });

    it('a refused suspend or nuke changes nothing', async () => {
      const fresh = await freshTenant();
      await api.call('POST', `/${fresh.org.slug}/${fresh.project.slug}/entity-types`, {
        token: fresh.user.token,
        body: { kind: 'EntityType', name: 'vm', states: ['up'], initialState: 'up' },
      });
      expectError(await post(`/admin/orgs/${fresh.org.id}/suspend`, fresh.user), 403, 'forbidden');
      expectError(await nuke(fresh.project.id, fresh.user), 403, 'forbidden');
      expect((await get(`/${fresh.org.slug}/${fresh.project.slug}/entity-types`, fresh.user)).body).toHaveLength(1);
      expect(await auditOf(api, fresh.org.id, 'org.suspended')).toHaveLength(0);
      expect(await auditOf(api, fresh.org.id, 'project.nuked')).toHaveLength(0);
    });
  });

  describe('GET /admin/orgs', () => {
    it('lists organizations newest first, with their counts', async () => {
      const older = await freshTenant();
      const newer = await freshTenant();
      const second = await api.call('POST', `/orgs/${newer.org.slug}/projects`, { token: newer.user.token, body: { name: 'Two', slug: 'two' } });
      expectOk(second, 201);
      await memberOf(api, newer, 'member');

      const list = await get('/admin/orgs');
      expectOk(list);
      const slugs = list.body.data.map((row: { slug: string }) => row.slug);
      expect(slugs.indexOf(newer.org.slug)).toBeLessThan(slugs.indexOf(older.org.slug));
      const row = list.body.data.find((org: { id: string }) => org.id === newer.org.id);
      expect(Object.keys(row).sort()).toEqual(ORG_ROW_FIELDS);
      expect(row).toMatchObject({ name: `Org ${newer.org.slug}`, slug: newer.org.slug, suspendedAt: null, memberCount: 2, projectCount: 2 });
      expect(row.createdAt).toMatch(RFC3339_MS);
      const worldRow = list.body.data.find((org: { id: string }) => org.id === tenant.org.id);
      expect(worldRow).toMatchObject({ memberCount: 3, projectCount: 1 });
    });

    it('leaves soft-deleted organizations out, and shows suspended ones', async () => {
      const deleted = await freshTenant();
      const suspended = await freshTenant();
      await api.db.update(orgs).set({ deletedAt: new Date() }).where(eq(orgs.id, deleted.org.id));
      const at = (await post(`/admin/orgs/${suspended.org.id}/suspend`)).body.suspendedAt;
      const list = await get('/admin/orgs');
      const ids = list.body.data.map((row: { id: string }) => row.id);
      expect(ids).not.toContain(deleted.org.id);
      expect(list.body.data.find((row: { id: string }) => row.id === suspended.org.id).suspendedAt).toBe(at);
      const total = await api.db.select({ n: count() }).from(orgs).where(sql`${orgs.deletedAt} is null`);
      expect(list.body.data).toHaveLength(total[0]!.n);
    });
  });

  describe('GET /admin/orgs/{id}', () => {
    it('gives the organization with its members and projects, by id or by slug', async () => {
      const bySlug = await get(`/admin/orgs/${tenant.org.slug}`);
      expectOk(bySlug);
      expect((await get(`/admin/orgs/${tenant.org.id}`)).body).toEqual(bySlug.body);
      const detail = bySlug.body;
      expect(detail).toMatchObject({ id: tenant.org.id, slug: tenant.org.slug, name: `Org ${tenant.org.slug}`, suspendedAt: null, deletedAt: null });
      expect(detail.createdAt).toMatch(RFC3339_MS);
      expect(detail.members.map((m: { userId: string; role: string }) => [m.userId, m.role])).toEqual([
        [owner.id, 'owner'],
        [world.admin.id, 'admin'],
        [world.member.id, 'member'],
      ]);
      for (const member of detail.members) expect(Object.keys(member).sort()).toEqual(MEMBER_FIELDS);
      expect(detail.members[0]).toMatchObject({ email: owner.email, name: owner.name });
      expect(detail.members[0].joinedAt).toMatch(RFC3339_MS);
      expect(detail.projects).toEqual([{ id: tenant.project.id, name: 'Project', slug: tenant.project.slug, createdAt: expect.stringMatching(RFC3339_MS) }]);
      expect(Object.keys(detail.projects[0]).sort()).toEqual(PROJECT_FIELDS);
    });

    it('shows a soft-deleted organization with its deletedAt', async () => {
      const deleted = await freshTenant();
      await api.db.update(orgs).set({ deletedAt: new Date('2026-01-02T03:04:05.678Z') }).where(eq(orgs.id, deleted.org.id));
      const detail = await get(`/admin/orgs/${deleted.org.slug}`);
      expectOk(detail);
      expect(detail.body.deletedAt).toBe('2026-01-02T03:04:05.678Z');
    });

    it('answers 404 for an unknown slug or id', async () => {
      expectError(await get('/admin/orgs/no-such-org'), 404, 'not_found');
      expectError(await get(`/admin/orgs/${crypto.randomUUID()}`), 404, 'not_found');
    });
  });

  describe('suspend and unsuspend', () => {
    it("locks the organization's users and tokens out until unsuspended, audited once per transition", async () => {
      const fresh = await freshTenant();
      const token = await mintToken(api, fresh, { role: 'owner', as: fresh.user.token });
      const envs = `/${fresh.org.slug}/${fresh.project.slug}/envs`;
      expectOk(await get(envs, fresh.user));

      const suspended = await post(`/admin/orgs/${fresh.org.slug}/suspend`);
      expectOk(suspended);
      expect(suspended.body).toEqual({ id: fresh.org.id, suspendedAt: expect.stringMatching(RFC3339_MS) });
      expectError(await get(`/orgs/${fresh.org.slug}`, fresh.user), 403, 'org_suspended');
      expectError(await get(envs, fresh.user), 403, 'org_suspended');
      expectError(await get(envs, token), 403, 'org_suspended');
      expectError(await api.call('POST', envs, { token, body: { name: 'late' } }), 403, 'org_suspended');
      // the super-admin still sees it
      expect((await get(`/admin/orgs/${fresh.org.id}`)).body.suspendedAt).toBe(suspended.body.suspendedAt);

      // idempotent: the first suspendedAt stays, nothing more is recorded
      expect((await post(`/admin/orgs/${fresh.org.id}/suspend`)).body).toEqual(suspended.body);
      const events = await auditOf(api, fresh.org.id, 'org.suspended');
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ actorType: 'super-admin', actorId: root.id, targetType: 'org', targetId: fresh.org.id, data: { slug: fresh.org.slug } });

      const unsuspended = await post(`/admin/orgs/${fresh.org.id}/unsuspend`);
      expectOk(unsuspended);
      expect(unsuspended.body).toEqual({ id: fresh.org.id, suspendedAt: null });
      expectOk(await get(`/orgs/${fresh.org.slug}`, fresh.user));
      expectOk(await get(envs, fresh.user));
      expectOk(await get(envs, token));
      expect((await post(`/admin/orgs/${fresh.org.slug}/unsuspend`)).body).toEqual({ id: fresh.org.id, suspendedAt: null });
      const unsuspendEvents = await auditOf(api, fresh.org.id, 'org.unsuspended');
      expect(unsuspendEvents).toHaveLength(1);
      expect(unsuspendEvents[0]).toMatchObject({ actorType: 'super-admin', actorId: root.id });
      expect((await get(`/admin/orgs/${fresh.org.id}`)).body.suspendedAt).toBeNull();
    });

    it('unsuspending an active organization changes and records nothing', async () => {
      const fresh = await freshTenant();
      expect((await post(`/admin/orgs/${fresh.org.id}/unsuspend`)).body).toEqual({ id: fresh.org.id, suspendedAt: null });
      expect(await auditOf(api, fresh.org.id, 'org.unsuspended')).toHaveLength(0);
    });

    it('of concurrent suspends one takes effect: one suspendedAt, one audit event', async () => {
      // each update of a `race-` organization holds its row lock a while, so on Postgres the
      // calls overlap: without the lock taken before reading, every one would suspend and audit
      await api.db.execute(sql`
        create or replace function slow_race_update() returns trigger language plpgsql as $$
        begin perform pg_sleep(0.3); return new; end $$`);
      await api.db.execute(sql`
        create trigger slow_race_update before update on orgs for each row
        when (new.slug like 'race-%') execute function slow_race_update()`);
      const user = await signUp(api);
      const fresh = await createUserTenant(api, user, { org: `race-${crypto.randomUUID().slice(0, 8)}` });
      const answers = await Promise.all(Array.from({ length: 6 }, () => post(`/admin/orgs/${fresh.org.id}/suspend`)));
      for (const answer of answers) expectOk(answer);
      expect(new Set(answers.map((answer) => answer.body.suspendedAt)).size).toBe(1);
      expect(await auditOf(api, fresh.org.id, 'org.suspended')).toHaveLength(1);
    });

    it('answers 404 for an unknown or soft-deleted organization', async () => {
      const deleted = await freshTenant();
      await api.db.update(orgs).set({ deletedAt: new Date() }).where(eq(orgs.id, deleted.org.id));
      for (const verb of ['suspend', 'unsuspend']) {
        expectError(await post(`/admin/orgs/no-such-org/${verb}`), 404, 'not_found');
        expectError(await post(`/admin/orgs/${crypto.randomUUID()}/${verb}`), 404, 'not_found');
        expectError(await post(`/admin/orgs/${deleted.org.id}/${verb}`), 404, 'not_found');
      }
      const [row] = await api.db.select({ suspendedAt: orgs.suspendedAt }).from(orgs).where(eq(orgs.id, deleted.org.id));
      expect(row!.suspendedAt).toBeNull();
    });
  });

  describe('GET /admin/integrations/github-installations', () => {
    it('lists every installation of every organization, deleted ones too, newest first, with the organization slug', async () => {
      const empty = await get('/admin/integrations/github-installations');
      expectOk(empty);
      expect(empty.body).toEqual({ data: [] });
      // rows as the install callback writes them (its own flow: test/node/github-install.test.ts)
      const first = await freshTenant();
      const second = await freshTenant();
      await api.db.insert(githubInstallations).values([
        { installationId: 7001, orgId: first.org.id, accountLogin: 'first-co', accountType: 'Organization', grantedRepos: ['first-co/infra'], createdAt: new Date('2026-01-01T00:00:00.000Z') },
        {
          installationId: 7002,
          orgId: second.org.id,
          accountLogin: 'someone',
          accountType: 'User',
          status: 'deleted',
          repositorySelection: 'all',
          createdAt: new Date('2026-02-01T00:00:00.000Z'),
          deletedAt: new Date('2026-03-01T00:00:00.000Z'),
        },
      ]);
      const list = await get('/admin/integrations/github-installations');
      expectOk(list);
      expect(list.body.data).toEqual([
        {
          id: expect.any(String),
          installationId: 7002,
          orgId: second.org.id,
          orgSlug: second.org.slug,
          accountLogin: 'someone',
          accountType: 'User',
          status: 'deleted',
          repositorySelection: 'all',
          grantedRepos: [],
          createdAt: '2026-02-01T00:00:00.000Z',
          updatedAt: expect.any(String),
          deletedAt: '2026-03-01T00:00:00.000Z',
        },
        {
          id: expect.any(String),
          installationId: 7001,
          orgId: first.org.id,
          orgSlug: first.org.slug,
          accountLogin: 'first-co',
          accountType: 'Organization',
          status: 'active',
          repositorySelection: 'selected',
          grantedRepos: ['first-co/infra'],
          createdAt: '2026-01-01T00:00:00.000Z',
          updatedAt: expect.any(String),
          deletedAt: null,
        },
      ]);
    });
  });

  describe('DELETE /admin/projects/{projectId}/nuke', () => {
    /** A project with a row in every table the nuke empties, made through the API as its owner. */
    async function populated() {
      const fresh = await freshTenant();
      const token = fresh.user.token;
      const proj = `/${fresh.org.slug}/${fresh.project.slug}`;
      const call = async (method: string, path: string, body?: unknown, status = 201) => {
        const response = await api.call(method, `${proj}${path}`, { token, body });
        expect(response.status, `${method} ${path}: ${JSON.stringify(response.body)}`).toBe(status);
        return response;
      };
      await call('POST', '/envs', { name: 'staging' });
      await call('POST', '/envs', { name: 'empty' });
      await call('POST', '/entity-types', {
        kind: 'EntityType',
        name: 'vm',
        states: ['provisioning', 'running', 'failed'],
        initialState: 'provisioning',
        properties: [{ name: 'ip', type: 'string' }],
        metrics: [{ name: 'load' }],
        constraints: [{ kind: 'unique', properties: ['ip'] }],
      });
      await call('POST', '/relationship-types', { kind: 'RelationshipType', name: 'hosts', from: 'vm', to: 'vm', states: ['active'] });
      await call('POST', '/cells', { kind: 'Cell', name: 'pool', entityType: 'vm' });
      await call('POST', '/actions', webhookAction('deploy', `${receiver.url}/nuke/{{ entity.name }}`, { retry: { maxAttempts: 1 } }, { parameters: [] }));
      // its receiver answers 503 and the retry is an hour away: the job stays owed
      await call('POST', '/actions', webhookAction('flaky', `${receiver.url}/flaky/{{ entity.name }}`, { retry: { maxAttempts: 3, backoff: 'fixed', initialDelayMs: 3_600_000 } }, { parameters: [] }));
      for (const [env, name, ip] of [['default', 'vm-a', '10.0.0.1'], ['default', 'vm-b', '10.0.0.2'], ['staging', 'vm-c', '10.0.0.3']]) {
        await call('POST', `/envs/${env}/entities`, { kind: 'Entity', entityType: 'vm', name, properties: { ip } });
      }
      await call('POST', '/envs/default/relationships', { relationshipType: 'hosts', from: 'vm-a', to: 'vm-b' });
      await call('PUT', '/envs/default/entities/vm-a/metrics/load', { value: 0.5 }, 200);
      await call('POST', '/cells/pool/members', { entityName: 'vm-a', entityTypeName: 'vm' });
      // one run delivered (an attempt, no job left), one attempted and owed a retry (an attempt and a job)
      await call('POST', '/envs/default/entities/vm-a/actions/deploy', {}, 202);
      await call('POST', '/envs/default/entities/vm-b/actions/flaky', {}, 202);
      await api.jobs.drain();
      // kept: a secret, a graph view, a token
      await call('PUT', '/envs/default/secrets/api-key', { value: 'nuke-survivor-secret-value' });
      await api.db.insert(graphViews).values({ orgId: fresh.org.id, projectId: fresh.project.id, scope: 'project', name: 'overview', config: {} });
      const projectToken = await mintToken(api, fresh, { role: 'admin', as: token });
      return { ...fresh, proj, projectToken };
    }

    /** The rows of the project in each table the nuke empties, counted directly. */
    async function rowCounts(projectId: string): Promise<Record<string, number>> {
      const result = await api.db.execute(sql`
        with envs as (select id from environments where project_id = ${projectId}),
             runs as (select id from action_runs where project_id = ${projectId}),
             ents as (select id from entities where project_id = ${projectId})
        select
          (select count(*) from run_attempts where run_id in (select id from runs)) as run_attempts,
          (select count(*) from delivery_jobs where run_id in (select id from runs)) as delivery_jobs,
          (select count(*) from action_runs where project_id = ${projectId}) as action_runs,
          (select count(*) from entity_changes where env_id in (select id from envs)) as entity_changes,
          (select count(*) from cell_members where env_id in (select id from envs)) as cell_members,
          (select count(*) from relationships where project_id = ${projectId}) as relationships,
          (select count(*) from entity_metrics where entity_id in (select id from ents)) as entity_metrics,
          (select count(*) from entity_unique_keys where env_id in (select id from envs)) as entity_unique_keys,
          (select count(*) from entities where project_id = ${projectId}) as entities,
          (select count(*) from actions where project_id = ${projectId}) as actions,
          (select count(*) from cells where project_id = ${projectId}) as cells,
          (select count(*) from relationship_types where project_id = ${projectId}) as relationship_types,
          (select count(*) from entity_types where project_id = ${projectId}) as entity_types`);
      const [row] = (result as unknown as { rows: Record<string, string | number>[] }).rows;
      return Object.fromEntries(Object.entries(row!).map(([table, n]) => [table, Number(n)]));
    }

    const changeSeqs = async (projectId: string) =>
      Object.fromEntries(
        (await api.db.select({ name: environments.name, seq: environments.changeSeq }).from(environments).where(eq(environments.projectId, projectId))).map(
          (env) => [env.name, env.seq],
        ),
      );

    const zeros = Object.fromEntries(NUKED_TABLES.map((table) => [table, 0]));

    it('wipes every catalog and runtime row of the project, keeps the rest, and is idempotent', async () => {
      const target = await populated();
      const sibling = await api.call('POST', `/orgs/${target.org.slug}/projects`, { token: target.user.token, body: { name: 'Sibling', slug: 'sibling' } });
      expectOk(sibling, 201);
      await api.call('POST', `/${target.org.slug}/sibling/entity-types`, {
        token: target.user.token,
        body: { kind: 'EntityType', name: 'vm', states: ['up'], initialState: 'up' },
      });
      const bystander = await populated();
      const before = await rowCounts(target.project.id);
      expect(before).toMatchObject({
        run_attempts: 2, delivery_jobs: 1, action_runs: 2, cell_members: 1, relationships: 1, entity_metrics: 1,
        entity_unique_keys: 3, entities: 3, actions: 2, cells: 1, relationship_types: 1, entity_types: 1,
      });
      expect(before.entity_changes).toBeGreaterThanOrEqual(3);
      const bystanderBefore = await rowCounts(bystander.project.id);
      const siblingBefore = await rowCounts(sibling.body.id);
      const seqsBefore = await changeSeqs(target.project.id);
      const envsBefore = (await get(`${target.proj}/envs`, target.projectToken)).body;
      const tokensBefore = await api.db.select().from(serviceTokens).where(eq(serviceTokens.projectId, target.project.id));

      const nuked = await nuke(target.project.id);
      expectOk(nuked);
      expect(nuked.body).toEqual({ projectId: target.project.id, rowCountsDeleted: before });
      expect(Object.keys(nuked.body.rowCountsDeleted).sort()).toEqual([...NUKED_TABLES].sort());
      expect(await rowCounts(target.project.id)).toEqual(zeros);

      // other projects, of the same organization and another, are untouched
      expect(await rowCounts(bystander.project.id)).toEqual(bystanderBefore);
      expect(await rowCounts(sibling.body.id)).toEqual(siblingBefore);

      // kept: the project, its environments, tokens (which still work), secrets, graph views and members
      expect((await get(`/orgs/${target.org.slug}/projects`, target.user)).body.map((p: { id: string }) => p.id)).toContain(target.project.id);
      expect((await get(`${target.proj}/envs`, target.projectToken)).body).toEqual(envsBefore);
      expect(await api.db.select().from(serviceTokens).where(eq(serviceTokens.projectId, target.project.id))).toEqual(tokensBefore);
      expect((await get(`${target.proj}/envs/default/secrets`, target.projectToken)).body.map((s: { name: string }) => s.name)).toEqual(['api-key']);
      expect(await api.db.select().from(graphViews).where(eq(graphViews.projectId, target.project.id))).toHaveLength(1);
      expect((await get(`/admin/orgs/${target.org.id}`)).body.members).toHaveLength(1);
      expect((await get(`${target.proj}/entity-types`, target.projectToken)).body).toEqual([]);
      expect((await get(`${target.proj}/envs/default/entities`, target.projectToken)).body).toEqual([]);

      // sequences advance (never reset) where entities or changes went, so old resume points must resync
      const seqsAfter = await changeSeqs(target.project.id);
      expect(seqsAfter).toEqual({ default: seqsBefore.default! + 1, staging: seqsBefore.staging! + 1, empty: seqsBefore.empty });
      expectError(await get(`${target.proj}/envs/default/changes?after=${seqsBefore.default}`, target.projectToken), 410, 'resync_required');
      expectOk(await get(`${target.proj}/envs/default/changes?after=${seqsAfter.default}`, target.projectToken));

      // idempotent: a second nuke finds nothing and moves no sequence
      const again = await nuke(target.project.id);
      expectOk(again);
      expect(again.body).toEqual({ projectId: target.project.id, rowCountsDeleted: zeros });
      expect(await changeSeqs(target.project.id)).toEqual(seqsAfter);

      const events = await auditOf(api, target.org.id, 'project.nuked');
      expect(events.map((event) => event.data)).toEqual([
        { slug: target.project.slug, rowCountsDeleted: before },
        { slug: target.project.slug, rowCountsDeleted: zeros },
      ]);
      expect(events[0]).toMatchObject({ actorType: 'super-admin', actorId: root.id, targetType: 'project', targetId: target.project.id });

      // the project is usable again, its change log continuing after the gap
      await api.call('POST', `${target.proj}/entity-types`, {
        token: target.projectToken,
        body: { kind: 'EntityType', name: 'vm', states: ['up'], initialState: 'up' },
      });
      expectOk(await api.call('POST', `${target.proj}/envs/default/entities`, { token: target.projectToken, body: { kind: 'Entity', entityType: 'vm', name: 'vm-a' } }), 201);
      const changes = await get(`${target.proj}/envs/default/changes?after=${seqsAfter.default}`, target.projectToken);
      expect(changes.body.changes.map((change: { seq: number; type: string }) => [change.seq, change.type])).toEqual([
        [seqsAfter.default! + 1, 'entity.created'],
      ]);
    });

    it('works on a project of a suspended organization', async () => {
      const fresh = await freshTenant();
      await api.call('POST', `/${fresh.org.slug}/${fresh.project.slug}/entity-types`, {
        token: fresh.user.token,
        body: { kind: 'EntityType', name: 'vm', states: ['up'], initialState: 'up' },
      });
      expectOk(await post(`/admin/orgs/${fresh.org.id}/suspend`));
      const nuked = await nuke(fresh.project.id);
      expectOk(nuked);
      expect(nuked.body.rowCountsDeleted.entity_types).toBe(1);
    });

    it('two concurrent nukes each delete a row once', async () => {
      const target = await populated();
      const before = await rowCounts(target.project.id);
      const answers = await Promise.all([nuke(target.project.id), nuke(target.project.id)]);
      for (const answer of answers) expectOk(answer);
      const summed = Object.fromEntries(
        NUKED_TABLES.map((table) => [table, answers.reduce((sum, answer) => sum + answer.body.rowCountsDeleted[table], 0)]),
      );
      expect(summed).toEqual(before);
      expect(await rowCounts(target.project.id)).toEqual(zeros);
    });

    it('racing writes land wholly before it (and are wiped) or after it, never half', async () => {
      const fresh = await freshTenant();
      const proj = `/${fresh.org.slug}/${fresh.project.slug}`;
      const token = fresh.user.token;
      const typeBody = (name: string) => ({ kind: 'EntityType', name, states: ['up'], initialState: 'up' });
      for (let round = 0; round < 3; round++) {
        expectOk(await api.call('POST', `${proj}/entity-types`, { token, body: typeBody('vm') }), 201);
        const [nuked, ...writes] = await Promise.all([
          nuke(fresh.project.id),
          ...Array.from({ length: 6 }, (_, i) =>
            api.call('POST', `${proj}/envs/default/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name: `vm-${round}-${i}` } }),
          ),
          ...Array.from({ length: 3 }, (_, i) => api.call('POST', `${proj}/entity-types`, { token, body: typeBody(`t-${round}-${i}`) })),
        ]);
        expectOk(nuked!);
        const entityWrites = writes.slice(0, 6);
        const typeWrites = writes.slice(6);
        for (const write of writes) expect([201, 404], JSON.stringify(write.body)).toContain(write.status);
        // an entity written after the nuke would need `vm`, which is gone: every one that landed was wiped
        expect(nuked!.body.rowCountsDeleted.entities).toBe(entityWrites.filter((write) => write.status === 201).length);
        const remaining = await rowCounts(fresh.project.id);
        expect(remaining.entities).toBe(0);
        // types are wiped with `vm` or survive it, each exactly once
        expect(nuked!.body.rowCountsDeleted.entity_types + remaining.entity_types).toBe(1 + typeWrites.filter((write) => write.status === 201).length);
        expect(typeWrites.every((write) => write.status === 201)).toBe(true);
        await nuke(fresh.project.id);
      }
    });

    it('answers 404 for an unknown project, 400 for a path that is not a project id', async () => {
      expectError(await nuke(crypto.randomUUID()), 404, 'not_found');
      expectError(await nuke(tenant.project.slug), 400, 'validation_failed');
      expect(await auditOf(api, tenant.org.id, 'project.nuked')).toHaveLength(0);
    });
  });
});

describe('GET /admin/metrics/overview', () => {
  const HOUR = 60 * 60 * 1000;
  const DAY = 24 * HOUR;
  let api: TestApi;
  let root: TestUser;

  beforeAll(async () => {
    // a database of its own: the counts are of every user and session in it
    api = await createTestApi({ env: { SUPER_ADMIN_EMAILS: ROOT } });
    root = await verifiedUser(api, ROOT);
  });
  afterAll(() => api.close());

  const overview = async () => {
    const response = await api.call('GET', '/admin/metrics/overview', { token: root.token });
    expectOk(response);
    return response.body;
  };

  it('counts users by sign-up time, unexpired sessions, and users active within 30 days', async () => {
    const baseline = await overview();
    // root signed up now; its sign-up and verification left it unexpired sessions
    expect(baseline).toMatchObject({ totalUsers: 1, signups24h: 1, signups7d: 1, signups30d: 1, mauApprox: 1 });
    expect(baseline.activeSessions).toBeGreaterThanOrEqual(1);
    const now = Date.now();
    const ago = (ms: number) => new Date(now - ms);
    const user = async (name: string, createdAt: Date) => {
      const [row] = await api.db.insert(users).values({ name, email: `${name}@metrics.example.com`, createdAt, updatedAt: createdAt }).returning();
      return row!.id;
    };
    const session = (userId: string, times: { createdAt: Date; updatedAt: Date; expiresAt: Date }) =>
      api.db.insert(sessions).values({ userId, token: crypto.randomUUID(), ...times });

    const recent = await user('recent', ago(2 * HOUR));
    await user('this-week', ago(3 * DAY));
    const thisMonth = await user('this-month', ago(10 * DAY));
    const old = await user('old', ago(40 * DAY));
    // recent: an expired session of yesterday (active this month, no live session)
    await session(recent, { createdAt: ago(DAY), updatedAt: ago(DAY), expiresAt: ago(HOUR) });
    // this-month: a live session made 35 days ago, refreshed 2 days ago (active, live)
    await session(thisMonth, { createdAt: ago(35 * DAY), updatedAt: ago(2 * DAY), expiresAt: new Date(now + DAY) });
    await session(thisMonth, { createdAt: ago(5 * DAY), updatedAt: ago(5 * DAY), expiresAt: new Date(now + DAY) });
    // old: nothing within 30 days
    await session(old, { createdAt: ago(60 * DAY), updatedAt: ago(45 * DAY), expiresAt: ago(38 * DAY) });

    expect(await overview()).toEqual({
      totalUsers: 5,
      signups24h: 2,
      signups7d: 3,
      signups30d: 4,
      activeSessions: baseline.activeSessions + 2,
      mauApprox: 3,
    });
  });

  it('every count is an integer', async () => {
    const body = await overview();
    expect(Object.keys(body).sort()).toEqual(['activeSessions', 'mauApprox', 'signups24h', 'signups30d', 'signups7d', 'totalUsers']);
    for (const value of Object.values(body)) expect(Number.isInteger(value)).toBe(true);
  });
});
