import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { orgs } from '../../src/db/schema';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, expectError, seedToken, type Tenant } from '../support/fixtures';
import { matrixOwner, SECURED_ROUTES } from '../support/security-matrix/index';

// the super-admin endpoints that set `suspended_at` come later; the column is the contract
const suspend = (api: TestApi, tenant: Tenant, at: Date | null) =>
  api.db.update(orgs).set({ suspendedAt: at }).where(eq(orgs.id, tenant.org.id));

describe('a suspended organization', () => {
  let api: TestApi;
  let suspended: Tenant;
  let active: Tenant;
  let owner: string;
  let activeOwner: string;

  beforeAll(async () => {
    api = await createTestApi();
    suspended = await createTenant(api);
    active = await createTenant(api);
    owner = await seedToken(api, suspended, 'owner');
    activeOwner = await seedToken(api, active, 'owner');
    matrixOwner.set(api, owner);
    await suspend(api, suspended, new Date());
  });
  afterAll(() => api.close());

  it.each(SECURED_ROUTES.filter((route) => route.minRole !== 'none'))('$name answers 403 org_suspended', async (route) => {
    expectError(await route.call(api, suspended, owner), 403, 'org_suspended');
  });

  it('stays hidden (404), not reported suspended, to a token of another organization', async () => {
    expectError(await api.call('GET', `/orgs/${suspended.org.slug}`, { token: activeOwner }), 404, 'not_found');
  });

  it('leaves other organizations alone', async () => {
    expect((await api.call('GET', `/orgs/${active.org.slug}`, { token: activeOwner })).status).toBe(200);
    expect((await api.call('GET', `/${active.org.slug}/${active.project.slug}/envs`, { token: activeOwner })).status).toBe(200);
  });

  it('answers again once unsuspended', async () => {
    await suspend(api, suspended, null);
    expect((await api.call('GET', `/orgs/${suspended.org.slug}`, { token: owner })).status).toBe(200);
    await suspend(api, suspended, new Date());
  });
});

describe('suspension in bootstrap mode', () => {
  it('applies to unauthenticated requests as well', async () => {
    const api = await createTestApi();
    try {
      const tenant = await createTenant(api);
      await suspend(api, tenant, new Date());
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`), 403, 'org_suspended');
      expectError(await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'x' } }), 403, 'org_suspended');
    } finally {
      await api.close();
    }
  });
});
