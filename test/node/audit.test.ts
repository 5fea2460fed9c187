import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditEvents, environmentSecrets, orgs } from '../../src/db/schema';
import { expectError, type Tenant } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, verifiedUser, type TestUser } from '../support/people';

/**
 * The audit log as GET /admin/audit reads it (SPEC "Audit events";
 * DECISIONS §7: limit default 50 max 200, offset, filters action, orgId,
 * actorId, since, until; newest first), and the events the people feature
 * writes besides the admin routes' own: secret put and delete (names only),
 * each committed with its change or not at all.
 */

const ROOT = 'root@example.com';
const ROW_FIELDS = ['action', 'actorId', 'actorType', 'at', 'data', 'id', 'orgId', 'targetId', 'targetType'];
const BASE = Date.parse('2026-03-01T00:00:00.000Z');
const second = (i: number) => new Date(BASE + i * 1000);

interface AuditPage {
  data: { id: string; at: string; action: string; actorId: string | null; data: Record<string, unknown> }[];
  total: number;
  limit: number;
  offset: number;
}

const expectOk = (response: ApiResponse) => expect(response.status, JSON.stringify(response.body)).toBe(200);

describe('GET /admin/audit', () => {
  let api: TestApi;
  let root: TestUser;
  /** The organization of the 60 seeded events. */
  const seededOrg = crypto.randomUUID();
  /** Five events of one instant, for ties. */
  const tiedOrg = crypto.randomUUID();

  const audit = async (query: string) => {
    const response = await api.call('GET', `/admin/audit${query}`, { token: root.token });
    expectOk(response);
    return response.body as AuditPage;
  };

  beforeAll(async () => {
    api = await createTestApi({ env: { SUPER_ADMIN_EMAILS: ROOT } });
    root = await verifiedUser(api, ROOT);
    // event i: one second after event i - 1; action alternates; actor-a on every third
    await api.db.insert(auditEvents).values(
      Array.from({ length: 60 }, (_, i) => ({
        at: second(i),
        action: i % 2 === 0 ? 'alpha.one' : 'alpha.two',
        orgId: seededOrg,
        actorType: 'user',
        actorId: i % 3 === 0 ? 'actor-a' : 'actor-b',
        targetType: 'thing',
        targetId: `thing-${i}`,
        data: { i },
      })),
    );
    await api.db.insert(auditEvents).values(
      Array.from({ length: 5 }, (_, i) => ({ at: second(0), action: 'tie', orgId: tiedOrg, actorType: 'system', actorId: null, data: { i } })),
    );
  });
  afterAll(() => api.close());

  /** The seeded events' numbers, in page order. */
  const indexes = (page: AuditPage) => page.data.map((row) => (row.data as { i: number }).i);

  it('pages newest first, 50 by default, with the total under the filters', async () => {
    const page = await audit(`?orgId=${seededOrg}`);
    expect({ total: page.total, limit: page.limit, offset: page.offset, rows: page.data.length }).toEqual({ total: 60, limit: 50, offset: 0, rows: 50 });
    expect(indexes(page)).toEqual(Array.from({ length: 50 }, (_, k) => 59 - k));
    const last = await audit(`?orgId=${seededOrg}&limit=25&offset=50`);
    expect({ total: last.total, limit: last.limit, offset: last.offset }).toEqual({ total: 60, limit: 25, offset: 50 });
    expect(indexes(last)).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    expect((await audit(`?orgId=${seededOrg}&offset=60`)).data).toEqual([]);
    expect((await audit(`?orgId=${seededOrg}&limit=200`)).data).toHaveLength(60);
  });

  it('pages through events of one instant without repeating or skipping one', async () => {
    const seen: string[] = [];
    for (let offset = 0; offset < 5; offset += 2) seen.push(...(await audit(`?orgId=${tiedOrg}&limit=2&offset=${offset}`)).data.map((row) => row.id));
    expect(seen).toHaveLength(5);
    expect(new Set(seen).size).toBe(5);
  });

  it('gives each event as a row of the log', async () => {
    const [row] = (await audit(`?orgId=${seededOrg}&limit=1`)).data;
    expect(Object.keys(row!).sort()).toEqual(ROW_FIELDS);
    expect(row).toEqual({
      id: expect.any(String),
      at: second(59).toISOString(),
      action: 'alpha.two',
      orgId: seededOrg,
      actorType: 'user',
      actorId: 'actor-b',
      targetType: 'thing',
      targetId: 'thing-59',
      data: { i: 59 },
    });
  });

  it('filters by action, actor and organization, together', async () => {
    expect((await audit(`?orgId=${seededOrg}&action=alpha.one`)).total).toBe(30);
    const byActor = await audit(`?orgId=${seededOrg}&actorId=actor-a`);
    expect(byActor.total).toBe(20);
    expect(byActor.data.every((row) => row.actorId === 'actor-a')).toBe(true);
    const both = await audit(`?orgId=${seededOrg}&action=alpha.one&actorId=actor-a`);
    expect(indexes(both)).toEqual([54, 48, 42, 36, 30, 24, 18, 12, 6, 0]);
    expect(both.total).toBe(10);
    // the action filter alone spans organizations
    expect((await audit('?action=alpha.one')).total).toBe(30);
    expect((await audit(`?orgId=${crypto.randomUUID()}`)).total).toBe(0);
  });

  it('filters by time: since inclusive, until exclusive', async () => {
    const window = await audit(`?orgId=${seededOrg}&since=${second(10).toISOString()}&until=${second(20).toISOString()}`);
    expect(window.total).toBe(10);
    expect(indexes(window)).toEqual([19, 18, 17, 16, 15, 14, 13, 12, 11, 10]);
    // the same instant with another offset
    const since = encodeURIComponent('2026-03-01T02:00:50.000+02:00');
    expect(indexes(await audit(`?orgId=${seededOrg}&since=${since}`))).toEqual([59, 58, 57, 56, 55, 54, 53, 52, 51, 50]);
    expect((await audit(`?orgId=${seededOrg}&since=${second(30).toISOString()}&until=${second(10).toISOString()}`)).total).toBe(0);
  });

  it.each([
    'limit=0',
    'limit=201',
    'limit=ten',
    'offset=-1',
    'offset=1.5',
    'offset=99999999999999999999',
    'orgId=not-a-uuid',
    'since=yesterday',
    'since=2026-03-01',
    'until=2026-13-01T00:00:00Z',
    'action=',
    'action=%00',
    'actorId=%ED%A0%80',
  ])('answers 400 validation_failed to %s', async (query) => {
    expectError(await api.call('GET', `/admin/audit?${query}`, { token: root.token }), 400, 'validation_failed');
  });
});

describe('audit events of the people feature', () => {
  let api: TestApi;
  let root: TestUser;
  let owner: TestUser;
  let tenant: Tenant;
  let env: string;

  const eventsOf = (orgId: string, action: string) =>
    api.db
      .select()
      .from(auditEvents)
      .where(and(eq(auditEvents.orgId, orgId), eq(auditEvents.action, action)))
      .orderBy(auditEvents.at);

  beforeAll(async () => {
    api = await createTestApi({ env: { SUPER_ADMIN_EMAILS: ROOT } });
    root = await verifiedUser(api, ROOT);
    owner = await signUp(api);
    tenant = await createUserTenant(api, owner);
    env = `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;
  });
  afterAll(() => api.close());

  it('records a secret put and delete with its name, never its value', async () => {
    const value = 'audit-secret-value-4f9c2e';
    expect((await api.call('PUT', `${env}/secrets/db-password`, { token: owner.token, body: { value } })).status).toBe(201);
    expect((await api.call('PUT', `${env}/secrets/db-password`, { token: owner.token, body: { value: `${value}-2` } })).status).toBe(200);
    expect((await api.call('DELETE', `${env}/secrets/db-password`, { token: owner.token })).status).toBe(200);

    const puts = await eventsOf(tenant.org.id, 'secret.put');
    expect(puts.map((event) => event.data)).toEqual([
      { projectId: tenant.project.id, envId: expect.any(String), envName: 'default', name: 'db-password', created: true },
      { projectId: tenant.project.id, envId: expect.any(String), envName: 'default', name: 'db-password', created: false },
    ]);
    expect(puts[0]).toMatchObject({ actorType: 'user', actorId: owner.id, targetType: 'secret' });
    const deletes = await eventsOf(tenant.org.id, 'secret.deleted');
    expect(deletes).toHaveLength(1);
    expect(deletes[0]).toMatchObject({ actorType: 'user', actorId: owner.id, targetType: 'secret', targetId: puts[0]!.targetId });
    expect(deletes[0]!.data).toMatchObject({ name: 'db-password', envName: 'default' });

    // as the super-admin reads them, too
    const listed = await api.call('GET', `/admin/audit?orgId=${tenant.org.id}&action=secret.put`, { token: root.token });
    expect(listed.body.total).toBe(2);
    expect(JSON.stringify(listed.body)).not.toContain(value);
    const everything = await api.db.select().from(auditEvents);
    expect(JSON.stringify(everything)).not.toContain(value);
  });

  it("names a token's secret writes after the token", async () => {
    const minted = await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
      token: owner.token,
      body: { name: 'ci', role: 'admin' },
    });
    expect(minted.status).toBe(201);
    expect((await api.call('PUT', `${env}/secrets/ci-key`, { token: minted.body.token, body: { value: 'ci-secret-value-1' } })).status).toBe(201);
    const [event] = (await eventsOf(tenant.org.id, 'secret.put')).filter((row) => (row.data as { name: string }).name === 'ci-key');
    expect(event).toMatchObject({ actorType: 'token', actorId: minted.body.id });
  });

  it('records the creation of an organization by its user, and by bootstrap mode', async () => {
    const [created] = await eventsOf(tenant.org.id, 'org.created');
    expect(created).toMatchObject({ actorType: 'user', actorId: owner.id, targetType: 'org', targetId: tenant.org.id });
    expect(created!.data).toEqual({ slug: tenant.org.slug, name: `Org ${tenant.org.slug}` });
    const fresh = await createTestApi();
    try {
      const org = await fresh.call('POST', '/orgs', { body: { name: 'Boot', slug: 'boot' } });
      expect(org.status).toBe(201);
      const [event] = await fresh.db.select().from(auditEvents).where(eq(auditEvents.action, 'org.created'));
      expect(event).toMatchObject({ actorType: 'bootstrap', actorId: null, orgId: org.body.id });
    } finally {
      await fresh.close();
    }
  });

  it('records token mints and revocations with the prefix, never the token; a refused mint records nothing', async () => {
    const tokens = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
    const minted = await api.call('POST', tokens, { token: owner.token, body: { name: 'deployer', role: 'admin', personal: true } });
    expect(minted.status).toBe(201);
    const [mint] = (await eventsOf(tenant.org.id, 'token.minted')).filter((row) => row.targetId === minted.body.id);
    expect(mint).toMatchObject({ actorType: 'user', actorId: owner.id, targetType: 'token' });
    expect(mint!.data).toMatchObject({ name: 'deployer', prefix: minted.body.prefix, role: 'admin', personal: true });
    expect(JSON.stringify(mint)).not.toContain(minted.body.token);

    expect((await api.call('DELETE', `${tokens}/${minted.body.id}`, { token: minted.body.token })).status).toBe(200);
    const [revoke] = (await eventsOf(tenant.org.id, 'token.revoked')).filter((row) => row.targetId === minted.body.id);
    expect(revoke).toMatchObject({ actorType: 'token', actorId: minted.body.id, data: { projectId: tenant.project.id, prefix: minted.body.prefix } });

    const member = await signUp(api);
    await api.db.execute(sql`insert into org_members (org_id, user_id, role) values (${tenant.org.id}, ${member.id}, 'member')`);
    const before = (await eventsOf(tenant.org.id, 'token.minted')).length;
    expectError(await api.call('POST', tokens, { token: member.token, body: { name: 'nope' } }), 403, 'forbidden');
    expect(await eventsOf(tenant.org.id, 'token.minted')).toHaveLength(before);
  });

  it('records nothing for a refused or failed secret write', async () => {
    const member = await signUp(api);
    await api.db.execute(sql`insert into org_members (org_id, user_id, role) values (${tenant.org.id}, ${member.id}, 'member')`);
    const before = (await api.db.select().from(auditEvents).where(eq(auditEvents.orgId, tenant.org.id))).length;
    expectError(await api.call('PUT', `${env}/secrets/nope`, { token: member.token, body: { value: 'member-secret-value' } }), 403, 'forbidden');
    expectError(await api.call('DELETE', `${env}/secrets/never-was`, { token: owner.token }), 404, 'not_found');
    expect((await api.db.select().from(auditEvents).where(eq(auditEvents.orgId, tenant.org.id))).length).toBe(before);
  });

  describe('when the audit insert fails', () => {
    beforeAll(async () => {
      // a database-level fault: the audit row of anything named "doomed" cannot be written
      await api.db.execute(sql`
        create function refuse_doomed_audit() returns trigger language plpgsql as $$
        begin
          if (new.action = 'secret.put' and new.data->>'name' = 'doomed')
             or (new.action = 'org.suspended' and new.data->>'slug' like 'doomed-%') then
            raise exception 'audit refused';
          end if;
          return new;
        end $$`);
      await api.db.execute(sql`create trigger refuse_doomed_audit before insert on audit_events for each row execute function refuse_doomed_audit()`);
    });

    it('the secret write it records is rolled back with it', async () => {
      const response = await api.call('PUT', `${env}/secrets/doomed`, { token: owner.token, body: { value: 'doomed-secret-value' } });
      expectError(response, 500, 'internal');
      const rows = await api.db.select().from(environmentSecrets).where(eq(environmentSecrets.name, 'doomed'));
      expect(rows).toHaveLength(0);
    });

    it('so is a suspension', async () => {
      const doomedOwner = await signUp(api);
      const doomed = await createUserTenant(api, doomedOwner, { org: `doomed-${crypto.randomUUID().slice(0, 8)}` });
      expectError(await api.call('POST', `/admin/orgs/${doomed.org.id}/suspend`, { token: root.token }), 500, 'internal');
      const [row] = await api.db.select({ suspendedAt: orgs.suspendedAt }).from(orgs).where(eq(orgs.id, doomed.org.id));
      expect(row!.suspendedAt).toBeNull();
      expect((await api.call('GET', `/orgs/${doomed.org.slug}`, { token: doomedOwner.token })).status).toBe(200);
    });
  });
});
