import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, type Role } from '../../src/auth/permissions';
import { graphViews, orgMembers, users } from '../../src/db/schema';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { expectError, mintToken, uniqueSlug, type Tenant } from '../support/fixtures';
import { createUserTenant, signUp, type TestUser } from '../support/people';

/** The fields of a GraphView response (SPEC GraphView, plus the timestamps: docs/people/graph-views.md). */
const GRAPH_VIEW_KEYS = [
  'config',
  'createdAt',
  'id',
  'isDefault',
  'name',
  'orgId',
  'ownerUserId',
  'pinnedPositions',
  'projectId',
  'scope',
  'updatedAt',
];
const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** A config of exactly `bytes` bytes of JSON: `{"blob":"xxx…"}`. */
function configOfSize(bytes: number): Record<string, unknown> {
  const overhead = JSON.stringify({ blob: '' }).length;
  return { blob: 'x'.repeat(bytes - overhead) };
}

describe('graph views', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: TestUser;
  let admin: TestUser;
  let member: TestUser;
  /** Another member: personal views of `member` are invisible to them. */
  let peer: TestUser;
  /** Owner of another organization. */
  let outsider: TestUser;
  let outsiderTenant: Tenant;
  let tokens: Record<Role, string>;

  const base = (t: Tenant = tenant) => `/${t.org.slug}/${t.project.slug}/graph-views`;
  const create = (credential: string | undefined, body: Record<string, unknown>, t: Tenant = tenant) =>
    api.call('POST', base(t), { token: credential, body: { config: {}, ...body } });

  async function created(credential: string, body: Record<string, unknown>, t: Tenant = tenant): Promise<any> {
    const response = await create(credential, { name: uniqueSlug('view'), ...body }, t);
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  }
  const personalOf = (user: TestUser, t: Tenant = tenant) => created(user.token, { scope: 'user' }, t);
  const projectView = (t: Tenant = tenant) => created(owner.token, { scope: 'project' }, t);

  async function addMember(user: TestUser, role: 'admin' | 'member', t: Tenant = tenant): Promise<void> {
    await api.db.insert(orgMembers).values({ orgId: t.org.id, userId: user.id, role });
  }

  /** Tokens are scoped to one project: each fresh project gets its own, one per role, minted once. */
  const projectTokens = new Map<string, Record<Role, string>>();
  async function tokensFor(t: Tenant): Promise<Record<Role, string>> {
    let minted = projectTokens.get(t.project.id);
    if (!minted) {
      minted = {} as Record<Role, string>;
      for (const role of ROLES) minted[role] = await mintToken(api, t, { role, as: owner.token });
      projectTokens.set(t.project.id, minted);
    }
    return minted;
  }

  /** A new project of the tenant's organization: for tests that need no views around. */
  async function freshProject(): Promise<Tenant> {
    const slug = uniqueSlug('p');
    const response = await api.call('POST', `/orgs/${tenant.org.slug}/projects`, { token: owner.token, body: { name: slug, slug } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return { org: tenant.org, project: response.body };
  }

  const defaultsOf = (projectId: string) =>
    api.db
      .select({ id: graphViews.id, scope: graphViews.scope, ownerUserId: graphViews.ownerUserId })
      .from(graphViews)
      .where(and(eq(graphViews.projectId, projectId), eq(graphViews.isDefault, true)));

  beforeAll(async () => {
    api = await createTestApi();
    owner = await signUp(api);
    tenant = await createUserTenant(api, owner);
    admin = await signUp(api);
    member = await signUp(api);
    peer = await signUp(api);
    await addMember(admin, 'admin');
    await addMember(member, 'member');
    await addMember(peer, 'member');
    outsider = await signUp(api);
    outsiderTenant = await createUserTenant(api, outsider, { project: tenant.project.slug });
    // minting the first token closes bootstrap mode: from here on a request without credentials is 401
    tokens = await tokensFor(tenant);
  });
  afterAll(() => api.close());

  describe('POST PROJ/graph-views', () => {
    it('saves a personal view of the signed-in user, in the GraphView shape', async () => {
      const response = await create(member.token, {
        name: 'My fleet',
        scope: 'user',
        config: { entityTypes: ['cluster'], layout: 'force', depth: 2, colour: { by: 'state' } },
        pinnedPositions: { 'cluster-1': { x: 10, y: -2.5 } },
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(GRAPH_VIEW_KEYS);
      expect(response.body).toMatchObject({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        scope: 'user',
        ownerUserId: member.id,
        name: 'My fleet',
        isDefault: false,
        // undocumented keys are kept as sent: config is free-form
        config: { entityTypes: ['cluster'], layout: 'force', depth: 2, colour: { by: 'state' } },
        pinnedPositions: { 'cluster-1': { x: 10, y: -2.5 } },
      });
      expect(response.body.id).toMatch(/^[0-9a-f-]{36}$/);
      expect(response.body.createdAt).toMatch(RFC3339_MS);
      expect(response.body.updatedAt).toMatch(RFC3339_MS);
      const read = await api.call('GET', `${base()}/${response.body.id}`, { token: member.token });
      expect(read.status).toBe(200);
      expect(read.body).toEqual(response.body);
    });

    it('pinnedPositions defaults to null', async () => {
      const view = await personalOf(member);
      expect(view.pinnedPositions).toBeNull();
    });

    it('a project view needs graph:manage: a member user gets 403, an admin and an owner 201', async () => {
      expectError(await create(member.token, { name: 'shared', scope: 'project' }), 403, 'forbidden');
      for (const user of [admin, owner]) {
        const view = await created(user.token, { scope: 'project' });
        expect(view).toMatchObject({ scope: 'project', ownerUserId: null, isDefault: false });
      }
    });

    it('service tokens: admin and owner save project views; member and viewer get 403', async () => {
      for (const role of ['admin', 'owner'] as const) {
        const response = await create(tokens[role], { name: `by-${role}`, scope: 'project' });
        expect(response.status, JSON.stringify(response.body)).toBe(201);
        expect(response.body).toMatchObject({ scope: 'project', ownerUserId: null });
      }
      expectError(await create(tokens.member, { name: 'x', scope: 'project' }), 403, 'forbidden');
      expectError(await create(tokens.viewer, { name: 'x', scope: 'project' }), 403, 'forbidden');
    });

    it('a personal view needs a user session: any service token gets 401, and nothing is saved', async () => {
      const name = uniqueSlug('token-personal');
      for (const role of ['owner', 'admin', 'member'] as const) {
        expectError(await create(tokens[role], { name, scope: 'user' }), 401, 'unauthorized');
      }
      // a viewer token may not write at all: its role answers first
      expectError(await create(tokens.viewer, { name, scope: 'user' }), 403, 'forbidden');
      expect(await api.db.select().from(graphViews).where(eq(graphViews.name, name))).toEqual([]);
    });

    it('without credentials: 401', async () => {
      expectError(await create(undefined, { name: 'x', scope: 'project' }), 401, 'unauthorized');
    });

    it('a user of another organization, and a token addressing it: 404', async () => {
      expectError(await create(outsider.token, { name: 'x', scope: 'user' }), 404, 'not_found');
      expectError(await create(owner.token, { name: 'x', scope: 'user' }, outsiderTenant), 404, 'not_found');
      expectError(await create(tokens.owner, { name: 'x', scope: 'project' }, outsiderTenant), 404, 'not_found');
    });

    it.each([
      ['no name', { scope: 'user', config: {} }],
      ['an empty name', { name: '', scope: 'user', config: {} }],
      ['a blank name', { name: '   ', scope: 'user', config: {} }],
      ['a name over 128 characters', { name: 'n'.repeat(129), scope: 'user', config: {} }],
      ['no scope', { name: 'v', config: {} }],
      ['an unknown scope', { name: 'v', scope: 'team', config: {} }],
      ['no config', { name: 'v', scope: 'user' }],
      ['config an array', { name: 'v', scope: 'user', config: [] }],
      ['config a string', { name: 'v', scope: 'user', config: 'all' }],
      ['config null', { name: 'v', scope: 'user', config: null }],
      ['an unknown top-level field', { name: 'v', scope: 'user', config: {}, isDefault: true }],
      ['config.entityTypes not a list', { name: 'v', scope: 'user', config: { entityTypes: 'cluster' } }],
      ['config.relationshipTypes with a non-string', { name: 'v', scope: 'user', config: { relationshipTypes: [1] } }],
      ['config.cells with an invalid name', { name: 'v', scope: 'user', config: { cells: ['-bad'] } }],
      ['config.labels with a non-string value', { name: 'v', scope: 'user', config: { labels: { team: 1 } } }],
      ['config.layout not a string', { name: 'v', scope: 'user', config: { layout: 3 } }],
      ['config.depth not an integer', { name: 'v', scope: 'user', config: { depth: 1.5 } }],
      ['config.depth negative', { name: 'v', scope: 'user', config: { depth: -1 } }],
      ['pinnedPositions an array', { name: 'v', scope: 'user', config: {}, pinnedPositions: [] }],
      ['a pinned position without y', { name: 'v', scope: 'user', config: {}, pinnedPositions: { a: { x: 1 } } }],
      ['a pinned position not numeric', { name: 'v', scope: 'user', config: {}, pinnedPositions: { a: { x: '1', y: 2 } } }],
    ])('%s: 400 validation_failed', async (_, body) => {
      const response = await api.call('POST', base(), { token: member.token, body });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details.length).toBeGreaterThan(0);
    });

    it('config of exactly 64 KB serialized passes; one byte more is 400 validation_failed', async () => {
      const atLimit = await create(member.token, { name: 'big', scope: 'user', config: configOfSize(65536) });
      expect(atLimit.status, JSON.stringify(atLimit.body).slice(0, 300)).toBe(201);
      expect(JSON.stringify(atLimit.body.config).length).toBe(65536);
      const over = await create(member.token, { name: 'too-big', scope: 'user', config: configOfSize(65537) });
      expectError(over, 400, 'validation_failed');
      expect(over.body.details.map((d: { path: string }) => d.path)).toContain('config');
    });

    it('the 64 KB are bytes of UTF-8, not characters', async () => {
      // 'é' is two bytes: 32768 of them are 65536 bytes of content alone
      const response = await create(member.token, { name: 'wide', scope: 'user', config: { blob: 'é'.repeat(32768) } });
      expectError(response, 400, 'validation_failed');
    });
  });

  describe('GET PROJ/graph-views', () => {
    it("lists the project's views and the caller's own personal views, never another user's", async () => {
      const t = await freshProject();
      const shared = await projectView(t);
      const mine = await personalOf(member, t);
      const theirs = await personalOf(peer, t);
      const asMember = await api.call('GET', base(t), { token: member.token });
      expect(asMember.status).toBe(200);
      expect(asMember.body.map((v: any) => v.id)).toEqual([shared.id, mine.id]);
      const asPeer = await api.call('GET', base(t), { token: peer.token });
      expect(asPeer.body.map((v: any) => v.id)).toEqual([shared.id, theirs.id]);
      // the organization's owner sees no one's personal views but its own
      const asOwner = await api.call('GET', base(t), { token: owner.token });
      expect(asOwner.body.map((v: any) => v.id)).toEqual([shared.id]);
    });

    it('project views first, then personal views, each by name', async () => {
      const t = await freshProject();
      const b = await created(owner.token, { name: 'b', scope: 'project' }, t);
      const a = await created(owner.token, { name: 'a', scope: 'project' }, t);
      const pa = await created(member.token, { name: 'a-mine', scope: 'user' }, t);
      const list = await api.call('GET', base(t), { token: member.token });
      expect(list.body.map((v: any) => v.id)).toEqual([a.id, b.id, pa.id]);
    });

    it('a service token (any role) lists project views only', async () => {
      const t = await freshProject();
      const shared = await projectView(t);
      await personalOf(member, t);
      const tk = await tokensFor(t);
      for (const role of ROLES) {
        const list = await api.call('GET', base(t), { token: tk[role] });
        expect(list.status).toBe(200);
        expect(list.body.map((v: any) => v.id)).toEqual([shared.id]);
      }
    });

    it('an empty project: 200 []', async () => {
      const t = await freshProject();
      const list = await api.call('GET', base(t), { token: member.token });
      expect(list.status).toBe(200);
      expect(list.body).toEqual([]);
    });

    it('without credentials 401; another organization 404', async () => {
      expectError(await api.call('GET', base()), 401, 'unauthorized');
      expectError(await api.call('GET', base(), { token: outsider.token }), 404, 'not_found');
      expectError(await api.call('GET', base(outsiderTenant), { token: member.token }), 404, 'not_found');
      expectError(await api.call('GET', base(outsiderTenant), { token: tokens.owner }), 404, 'not_found');
      // a token is scoped to its project: another project of its own organization is 404 too
      expectError(await api.call('GET', base(await freshProject()), { token: tokens.owner }), 404, 'not_found');
    });

    it('addresses the project by ids as well as slugs', async () => {
      const view = await projectView();
      const byIds = `/${tenant.org.id}/${tenant.project.id}/graph-views`;
      const list = await api.call('GET', byIds, { token: member.token });
      expect(list.status).toBe(200);
      expect(list.body.map((v: any) => v.id)).toContain(view.id);
    });
  });

  describe('GET PROJ/graph-views/{id}', () => {
    it('reads a project view as any member and any token role', async () => {
      const view = await projectView();
      for (const credential of [member.token, admin.token, tokens.viewer, tokens.member]) {
        const read = await api.call('GET', `${base()}/${view.id}`, { token: credential });
        expect(read.status).toBe(200);
        expect(read.body).toEqual(view);
      }
    });

    it("another user's personal view is 404, whatever the reader's role, and to every token", async () => {
      const theirs = await personalOf(member);
      for (const credential of [peer.token, admin.token, owner.token, tokens.owner, outsider.token]) {
        expectError(await api.call('GET', `${base()}/${theirs.id}`, { token: credential }), 404, 'not_found');
      }
    });

    it('an unknown id, an id that cannot be one, and a view of another project: 404', async () => {
      expectError(await api.call('GET', `${base()}/00000000-0000-4000-8000-000000000000`, { token: member.token }), 404, 'not_found');
      expectError(await api.call('GET', `${base()}/not-an-id`, { token: member.token }), 404, 'not_found');
      const elsewhere = await projectView(await freshProject());
      expectError(await api.call('GET', `${base()}/${elsewhere.id}`, { token: member.token }), 404, 'not_found');
      // another organization's view, through this organization's path and through its own
      const foreign = await personalOf(outsider, outsiderTenant);
      expectError(await api.call('GET', `${base()}/${foreign.id}`, { token: owner.token }), 404, 'not_found');
      expectError(await api.call('GET', `${base(outsiderTenant)}/${foreign.id}`, { token: owner.token }), 404, 'not_found');
    });

    it('without credentials: 401', async () => {
      const view = await projectView();
      expectError(await api.call('GET', `${base()}/${view.id}`), 401, 'unauthorized');
    });
  });

  describe('PUT PROJ/graph-views/{id}', () => {
    it('the owner of a personal view changes only the fields sent', async () => {
      const view = await created(member.token, {
        name: 'before',
        scope: 'user',
        config: { layout: 'force' },
        pinnedPositions: { a: { x: 1, y: 2 } },
      });
      const renamed = await api.call('PUT', `${base()}/${view.id}`, { token: member.token, body: { name: 'after' } });
      expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
      expect(renamed.body).toMatchObject({ id: view.id, name: 'after', config: { layout: 'force' }, pinnedPositions: { a: { x: 1, y: 2 } } });
      expect(Date.parse(renamed.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(view.updatedAt));
      expect(renamed.body.createdAt).toBe(view.createdAt);
      const reconfigured = await api.call('PUT', `${base()}/${view.id}`, {
        token: member.token,
        body: { config: { depth: 3 }, pinnedPositions: null },
      });
      expect(reconfigured.status).toBe(200);
      // config is replaced whole, not merged
      expect(reconfigured.body).toMatchObject({ name: 'after', config: { depth: 3 }, pinnedPositions: null });
      const read = await api.call('GET', `${base()}/${view.id}`, { token: member.token });
      expect(read.body).toEqual(reconfigured.body);
    });

    it('an empty body changes nothing but is accepted', async () => {
      const view = await personalOf(member);
      const response = await api.call('PUT', `${base()}/${view.id}`, { token: member.token, body: {} });
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ name: view.name, config: view.config });
    });

    it("another user's personal view: 404 even to the organization's owner and admin", async () => {
      const theirs = await personalOf(member);
      for (const credential of [peer.token, admin.token, owner.token, tokens.owner]) {
        expectError(await api.call('PUT', `${base()}/${theirs.id}`, { token: credential, body: { name: 'taken' } }), 404, 'not_found');
      }
      const read = await api.call('GET', `${base()}/${theirs.id}`, { token: member.token });
      expect(read.body.name).toBe(theirs.name);
    });

    it('a project view: member user and member token 403, viewer token 403; admin user and admin token 200', async () => {
      const view = await projectView();
      expectError(await api.call('PUT', `${base()}/${view.id}`, { token: member.token, body: { name: 'm' } }), 403, 'forbidden');
      expectError(await api.call('PUT', `${base()}/${view.id}`, { token: tokens.member, body: { name: 'm' } }), 403, 'forbidden');
      expectError(await api.call('PUT', `${base()}/${view.id}`, { token: tokens.viewer, body: { name: 'm' } }), 403, 'forbidden');
      expect((await api.call('GET', `${base()}/${view.id}`, { token: member.token })).body.name).toBe(view.name);
      const byAdmin = await api.call('PUT', `${base()}/${view.id}`, { token: admin.token, body: { name: 'by-admin' } });
      expect(byAdmin.status).toBe(200);
      expect(byAdmin.body.name).toBe('by-admin');
      const byToken = await api.call('PUT', `${base()}/${view.id}`, { token: tokens.admin, body: { name: 'by-token' } });
      expect(byToken.status).toBe(200);
      expect(byToken.body.name).toBe('by-token');
    });

    it.each([
      ['an unknown field', { name: 'x', scope: 'project' }],
      ['an empty name', { name: '' }],
      ['config an array', { config: [1] }],
      ['config over 64 KB', { config: configOfSize(65537) }],
      ['bad pinned positions', { pinnedPositions: { a: { x: 1, y: 2, z: 3 } } }],
    ])('%s: 400 validation_failed, and the view is unchanged', async (_, body) => {
      const view = await personalOf(member);
      expectError(await api.call('PUT', `${base()}/${view.id}`, { token: member.token, body }), 400, 'validation_failed');
      const read = await api.call('GET', `${base()}/${view.id}`, { token: member.token });
      expect(read.body).toEqual(view);
    });

    it('unknown id 404; without credentials 401; another organization 404', async () => {
      expectError(
        await api.call('PUT', `${base()}/00000000-0000-4000-8000-000000000000`, { token: admin.token, body: { name: 'x' } }),
        404,
        'not_found',
      );
      const view = await projectView();
      expectError(await api.call('PUT', `${base()}/${view.id}`, { body: { name: 'x' } }), 401, 'unauthorized');
      expectError(await api.call('PUT', `${base()}/${view.id}`, { token: outsider.token, body: { name: 'x' } }), 404, 'not_found');
    });
  });

  describe('DELETE PROJ/graph-views/{id}', () => {
    it('the owner deletes a personal view: 200 {deleted, id}, then it is gone', async () => {
      const view = await personalOf(member);
      const response = await api.call('DELETE', `${base()}/${view.id}`, { token: member.token });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, id: view.id });
      expectError(await api.call('GET', `${base()}/${view.id}`, { token: member.token }), 404, 'not_found');
      expectError(await api.call('DELETE', `${base()}/${view.id}`, { token: member.token }), 404, 'not_found');
    });

    it("another user's personal view: 404 to everyone else, and it stays", async () => {
      const theirs = await personalOf(member);
      for (const credential of [peer.token, admin.token, owner.token, tokens.owner]) {
        expectError(await api.call('DELETE', `${base()}/${theirs.id}`, { token: credential }), 404, 'not_found');
      }
      expect((await api.call('GET', `${base()}/${theirs.id}`, { token: member.token })).status).toBe(200);
    });

    it('a project view: member user, member and viewer tokens 403; admin token and owner user 200', async () => {
      const view = await projectView();
      for (const credential of [member.token, tokens.member, tokens.viewer]) {
        expectError(await api.call('DELETE', `${base()}/${view.id}`, { token: credential }), 403, 'forbidden');
      }
      expect((await api.call('DELETE', `${base()}/${view.id}`, { token: tokens.admin })).body).toEqual({ deleted: true, id: view.id });
      const another = await projectView();
      expect((await api.call('DELETE', `${base()}/${another.id}`, { token: owner.token })).status).toBe(200);
    });

    it('without credentials 401; another organization 404', async () => {
      const view = await projectView();
      expectError(await api.call('DELETE', `${base()}/${view.id}`), 401, 'unauthorized');
      expectError(await api.call('DELETE', `${base()}/${view.id}`, { token: outsider.token }), 404, 'not_found');
      expect((await api.call('GET', `${base()}/${view.id}`, { token: member.token })).status).toBe(200);
    });
  });

  describe('PATCH PROJ/graph-views/{id}/default', () => {
    const makeDefault = (id: string, credential: string | undefined, t: Tenant = tenant) =>
      api.call('PATCH', `${base(t)}/${id}/default`, { token: credential });

    it('switches the default of a personal group: the previous one is cleared', async () => {
      const t = await freshProject();
      const first = await personalOf(member, t);
      const second = await personalOf(member, t);
      const one = await makeDefault(first.id, member.token, t);
      expect(one.status).toBe(200);
      expect(one.body).toMatchObject({ id: first.id, isDefault: true });
      const two = await makeDefault(second.id, member.token, t);
      expect(two.body).toMatchObject({ id: second.id, isDefault: true });
      expect((await api.call('GET', `${base(t)}/${first.id}`, { token: member.token })).body.isDefault).toBe(false);
      expect(await defaultsOf(t.project.id)).toEqual([{ id: second.id, scope: 'user', ownerUserId: member.id }]);
    });

    it('is idempotent', async () => {
      const t = await freshProject();
      const view = await personalOf(member, t);
      expect((await makeDefault(view.id, member.token, t)).status).toBe(200);
      const again = await makeDefault(view.id, member.token, t);
      expect(again.status).toBe(200);
      expect(again.body.isDefault).toBe(true);
      expect(await defaultsOf(t.project.id)).toHaveLength(1);
    });

    it("groups are apart: a user's personal default, another user's and the project's coexist", async () => {
      const t = await freshProject();
      const mine = await personalOf(member, t);
      const theirs = await personalOf(peer, t);
      const shared = await projectView(t);
      for (const [id, credential] of [
        [mine.id, member.token],
        [theirs.id, peer.token],
        [shared.id, admin.token],
      ] as const) {
        expect((await makeDefault(id, credential, t)).status).toBe(200);
      }
      const defaults = (await defaultsOf(t.project.id)).map((d) => d.id).sort();
      expect(defaults).toEqual([mine.id, theirs.id, shared.id].sort());
    });

    it('a project view: member user and member token 403; admin token 200', async () => {
      const t = await freshProject();
      const view = await projectView(t);
      const tk = await tokensFor(t);
      expectError(await makeDefault(view.id, member.token, t), 403, 'forbidden');
      expectError(await makeDefault(view.id, tk.member, t), 403, 'forbidden');
      expectError(await makeDefault(view.id, tk.viewer, t), 403, 'forbidden');
      expect(await defaultsOf(t.project.id)).toEqual([]);
      const byToken = await makeDefault(view.id, tk.admin, t);
      expect(byToken.status).toBe(200);
      expect(byToken.body.isDefault).toBe(true);
    });

    it("another user's personal view: 404; unknown id 404; without credentials 401; another organization 404", async () => {
      const theirs = await personalOf(member);
      for (const credential of [peer.token, owner.token, tokens.owner]) {
        expectError(await makeDefault(theirs.id, credential), 404, 'not_found');
      }
      expectError(await makeDefault('00000000-0000-4000-8000-000000000000', member.token), 404, 'not_found');
      expectError(await makeDefault(theirs.id, undefined), 401, 'unauthorized');
      expectError(await makeDefault(theirs.id, outsider.token), 404, 'not_found');
      expect((await api.call('GET', `${base()}/${theirs.id}`, { token: member.token })).body.isDefault).toBe(false);
    });

    it('concurrent switches of one group end with exactly one default, and every request succeeds', async () => {
      const t = await freshProject();
      const views = await Promise.all(Array.from({ length: 6 }, () => projectView(t)));
      const tk = await tokensFor(t);
      for (let round = 0; round < 4; round += 1) {
        const responses = await Promise.all(views.map((view) => makeDefault(view.id, tk.admin, t)));
        expect(responses.map((r) => r.status)).toEqual(views.map(() => 200));
        const defaults = await defaultsOf(t.project.id);
        expect(defaults).toHaveLength(1);
        const current = await api.call('GET', `${base(t)}/default`, { token: tk.viewer });
        expect(current.body.id).toBe(defaults[0]!.id);
      }
    });

    it('concurrent switches of a personal group, with no default before: exactly one default', async () => {
      const t = await freshProject();
      const views = await Promise.all(Array.from({ length: 6 }, () => personalOf(member, t)));
      const responses = await Promise.all(views.map((view) => makeDefault(view.id, member.token, t)));
      expect(responses.map((r) => r.status)).toEqual(views.map(() => 200));
      const defaults = await defaultsOf(t.project.id);
      expect(defaults).toHaveLength(1);
      expect(defaults[0]!.ownerUserId).toBe(member.id);
    });
  });

  describe('GET PROJ/graph-views/default', () => {
    const readDefault = (credential: string | undefined, t: Tenant = tenant) => api.call('GET', `${base(t)}/default`, { token: credential });
    const makeDefault = async (id: string, credential: string, t: Tenant) => {
      const response = await api.call('PATCH', `${base(t)}/${id}/default`, { token: credential });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
    };

    it('with nothing saved: the synthetic Fleet view', async () => {
      const t = await freshProject();
      // saved views that are not defaults do not count
      await personalOf(member, t);
      await projectView(t);
      const response = await readDefault(member.token, t);
      expect(response.status).toBe(200);
      expect(response.body).toEqual({
        id: null,
        orgId: t.org.id,
        projectId: t.project.id,
        scope: 'project',
        ownerUserId: null,
        name: 'Fleet',
        isDefault: true,
        config: {},
        pinnedPositions: null,
        createdAt: null,
        updatedAt: null,
      });
    });

    it('falls back personal → project → Fleet, as defaults are deleted', async () => {
      const t = await freshProject();
      const shared = await projectView(t);
      const mine = await personalOf(member, t);
      await makeDefault(shared.id, admin.token, t);
      expect((await readDefault(member.token, t)).body).toMatchObject({ id: shared.id, isDefault: true, scope: 'project' });
      await makeDefault(mine.id, member.token, t);
      expect((await readDefault(member.token, t)).body).toMatchObject({ id: mine.id, isDefault: true, scope: 'user' });
      // another user, and a token, still get the project default
      expect((await readDefault(peer.token, t)).body.id).toBe(shared.id);
      expect((await readDefault((await tokensFor(t)).viewer, t)).body.id).toBe(shared.id);
      expect((await api.call('DELETE', `${base(t)}/${mine.id}`, { token: member.token })).status).toBe(200);
      expect((await readDefault(member.token, t)).body.id).toBe(shared.id);
      expect((await api.call('DELETE', `${base(t)}/${shared.id}`, { token: admin.token })).status).toBe(200);
      const fleet = await readDefault(member.token, t);
      expect(fleet.status).toBe(200);
      expect(fleet.body).toMatchObject({ id: null, name: 'Fleet', isDefault: true });
    });

    it('a personal default with no project default', async () => {
      const t = await freshProject();
      const mine = await personalOf(member, t);
      await makeDefault(mine.id, member.token, t);
      expect((await readDefault(member.token, t)).body.id).toBe(mine.id);
      expect((await readDefault(peer.token, t)).body).toMatchObject({ id: null, name: 'Fleet' });
    });

    it('every token role reads it; without credentials 401; another organization 404', async () => {
      for (const role of ['viewer', 'member', 'admin', 'owner'] as const) {
        expect((await readDefault(tokens[role])).status).toBe(200);
      }
      expectError(await readDefault(undefined), 401, 'unauthorized');
      expectError(await readDefault(outsider.token), 404, 'not_found');
      expectError(await readDefault(tokens.owner, outsiderTenant), 404, 'not_found');
    });
  });

  it('personal views die with their owner', async () => {
    const t = await freshProject();
    const leaver = await signUp(api);
    await addMember(leaver, 'member');
    const view = await personalOf(leaver, t);
    // the user row going takes its personal views with it (ON DELETE CASCADE)
    await api.db.delete(users).where(eq(users.id, leaver.id));
    expect(await api.db.select().from(graphViews).where(eq(graphViews.id, view.id))).toEqual([]);
  });
});

describe('graph views in bootstrap mode', () => {
  let api: TestApi;
  let tenant: Tenant;

  beforeAll(async () => {
    api = await createTestApi();
    const slug = uniqueSlug('org');
    expect((await api.call('POST', '/orgs', { body: { name: slug, slug } })).status).toBe(201);
    const project = await api.call('POST', `/orgs/${slug}/projects`, { body: { name: 'p', slug: 'p' } });
    tenant = { org: { id: project.body.orgId, slug }, project: project.body };
  });
  afterAll(() => api.close());

  const path = () => `/${tenant.org.slug}/${tenant.project.slug}/graph-views`;

  it('saves project views without credentials, but a personal view is 401: nobody would own it', async () => {
    const shared: ApiResponse = await api.call('POST', path(), { body: { name: 'shared', scope: 'project', config: {} } });
    expect(shared.status, JSON.stringify(shared.body)).toBe(201);
    expectError(await api.call('POST', path(), { body: { name: 'mine', scope: 'user', config: {} } }), 401, 'unauthorized');
    const list = await api.call('GET', path());
    expect(list.body.map((v: any) => v.name)).toEqual(['shared']);
  });
});
