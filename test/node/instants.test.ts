import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { dateTimeEdges } from '../support/openapi-fuzz';
import { verifiedUser, type TestUser } from '../support/people';

/**
 * Every date-time a client sends (DateTimeInput, src/http/openapi.ts) is an
 * RFC 3339 date-time within the years 1000–9999 in UTC. RFC 3339 allows the
 * year 0000, which Postgres refuses, and Postgres prints a timestamp of the
 * years 1–999 in a form JavaScript's Date reads as another year. Each route
 * taking one refuses the instants outside with a 400 naming the field, and
 * stores and answers those at the edges as they were sent.
 */
describe('instants a client sends', () => {
  const ROOT = 'root@example.com';
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let root: TestUser;
  let n = 0;

  const envPath = () => `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;
  const createEntity = (fields: Record<string, unknown>) =>
    api.call('POST', `${envPath()}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'box', name: `box-${++n}`, ...fields } });

  /** A 400 validation_failed naming `path`. */
  function refused(response: ApiResponse, path: string) {
    expectError(response, 400, 'validation_failed');
    expect(JSON.stringify(response.body.details), JSON.stringify(response.body)).toContain(path);
  }

  /** The instants no store takes, as the fuzz test sends them too. */
  const OUTSIDE = dateTimeEdges;

  beforeAll(async () => {
    api = await createTestApi({ env: { SUPER_ADMIN_EMAILS: ROOT } });
    tenant = await createTenant(api);
    const type = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/entity-types`, {
      body: { kind: 'EntityType', name: 'box', states: ['on'], initialState: 'on' },
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    owner = await mintToken(api, tenant, { role: 'owner' });
    root = await verifiedUser(api, ROOT);
  });
  afterAll(() => api?.close());

  it('refuses each outside instant on every route that takes one, and writes nothing', async () => {
    const runs = `${envPath()}/action-runs`;
    for (const instant of OUTSIDE) {
      refused(await createEntity({ lastSyncedAt: instant }), 'lastSyncedAt');
      refused(await api.call('GET', `${envPath()}/entities?updatedSince=${encodeURIComponent(instant)}`, { token: owner }), 'updatedSince');
      refused(await api.call('GET', `${runs}?since=${encodeURIComponent(instant)}`, { token: owner }), 'since');
      refused(
        await api.call('POST', `${envPath()}/batch`, { token: owner, body: { source: 'tf', observedAt: instant, entities: [{ entityType: 'box', name: `batch-${++n}` }] } }),
        'observedAt',
      );
      refused(await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, { token: owner, body: { name: 'late', expiresAt: instant } }), 'expiresAt');
      refused(await api.call('GET', `/admin/audit?since=${encodeURIComponent(instant)}`, { token: root.token }), 'since');
      refused(await api.call('GET', `/admin/audit?until=${encodeURIComponent(instant)}`, { token: root.token }), 'until');
    }
    const made = await createEntity({});
    expect(made.status).toBe(201);
    for (const instant of OUTSIDE) {
      refused(await api.call('PUT', `${envPath()}/entities/${made.body.name}`, { token: owner, body: { lastSyncedAt: instant } }), 'lastSyncedAt');
      refused(await api.call('POST', `${envPath()}/entities/${made.body.name}/sync-stamp`, { token: owner, body: { source: 'tf', observedAt: instant } }), 'observedAt');
    }
    // nothing of the refused writes is there: the one entity made, and no batch entity
    const listed = await api.call('GET', `${envPath()}/entities?limit=1000`, { token: owner });
    expect(listed.body.map((entity: { name: string }) => entity.name)).toEqual([made.body.name]);
    expect(listed.body[0].lastSyncedAt).toBeNull();
  });

  it('stores the first instant of the year 1000, through an offset too, and answers it as sent on every read', async () => {
    for (const [sent, stored] of [
      ['1000-01-01T00:00:00Z', '1000-01-01T00:00:00.000Z'],
      ['1000-01-01T01:00:00.123+01:00', '1000-01-01T00:00:00.123Z'],
    ]) {
      const created = await createEntity({ lastSyncedAt: sent });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body.lastSyncedAt).toBe(stored);
      const read = await api.call('GET', `${envPath()}/entities/${created.body.name}`, { token: owner });
      expect(read.body.lastSyncedAt).toBe(stored);
      const page = await api.call('GET', `${envPath()}/entities?namePrefix=${created.body.name}`, { token: owner });
      expect(page.body.map((entity: { lastSyncedAt: string }) => entity.lastSyncedAt)).toEqual([stored]);
    }
    const since = await api.call('GET', `${envPath()}/entities?updatedSince=1000-01-01T00:00:00Z&limit=1`, { token: owner });
    expect(since.status).toBe(200);
    expect((await api.call('GET', `${envPath()}/action-runs?since=9999-12-31T23:59:59.999Z`, { token: owner })).body).toEqual([]);
  });
});
