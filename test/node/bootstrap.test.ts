import { afterEach, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app';
import { systemState } from '../../src/db/schema';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken } from '../support/fixtures';

describe('bootstrap mode', () => {
  let api: TestApi;
  afterEach(() => api.close());

  it('accepts every request without credentials on a fresh database, until the first mint', async () => {
    api = await createTestApi();
    const tenant = await createTenant(api);
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
    expect((await api.call('GET', envs)).status).toBe(200);
    expect((await api.call('GET', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`)).body).toEqual([]);

    const owner = await mintToken(api, tenant, { role: 'owner' });
    expectError(await api.call('GET', envs), 401, 'unauthorized');
    expectError(await api.call('POST', '/orgs', { body: { name: 'Late', slug: 'late' } }), 401, 'unauthorized');
    expectError(
      await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, { body: { name: 'again' } }),
      401,
      'unauthorized',
    );
    expect((await api.call('GET', envs, { token: owner })).status).toBe(200);
    // public routes stay public
    expect((await api.call('GET', '/healthz')).status).toBe(200);
    expect((await api.call('GET', '/openapi.json')).status).toBe(200);
  });

  it('a bogus token is refused even while bootstrap mode is open', async () => {
    api = await createTestApi();
    await createTenant(api);
    expectError(await api.call('GET', '/orgs/anything', { token: 'cpl_not-a-real-token' }), 401, 'unauthorized');
  });

  it('stays closed when every token is revoked, and across a restart', async () => {
    api = await createTestApi();
    const tenant = await createTenant(api);
    const owner = await mintToken(api, tenant, { role: 'owner' });
    const tokensPath = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
    const [only] = (await api.call('GET', tokensPath, { token: owner })).body;
    expect((await api.call('DELETE', `${tokensPath}/${only.id}`, { token: owner })).status).toBe(200);
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}`), 401, 'unauthorized');
    // a new process on the same database has no memory of its own: the database says closed
    const restarted = createApp({ ...api.platform, bootstrap: { closed: false } });
    expect((await restarted.request(`/orgs/${tenant.org.slug}`)).status).toBe(401);
    const [state] = await api.db.select().from(systemState);
    expect(state!.bootstrapClosedAt).toBeInstanceOf(Date);
  });

  it('of concurrent first mints, exactly one succeeds and the server ends closed', async () => {
    api = await createTestApi();
    const tenant = await createTenant(api);
    const path = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
    // separate app instances, as separate processes would be: no shared in-memory state
    const apps = Array.from({ length: 6 }, () => createApp({ ...api.platform, bootstrap: { closed: false } }));
    const responses = await Promise.all(
      apps.map((app, i) =>
        app.request(path, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ name: `first-${i}`, role: 'owner' }),
        }),
      ),
    );
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 401, 401, 401, 401, 401]);
    const tokens = await api.db.query.serviceTokens.findMany();
    expect(tokens).toHaveLength(1);
    for (const app of apps) expect((await app.request(`/orgs/${tenant.org.slug}`)).status).toBe(401);
  });
});
