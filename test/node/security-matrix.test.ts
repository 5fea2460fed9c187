import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, type Role } from '../../src/auth/permissions';
import { generateServiceToken } from '../../src/auth/service-token';
import { cells, entityTypes } from '../../src/db/schema';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';
import { matrixOwner, RUN_CALLBACK_ROUTES, SECURED_ROUTES } from '../support/security-matrix/index';

/**
 * Every route × every kind of caller: no token, a bad token, each role, a
 * token of another organization, a token pinned to another environment and a
 * cell-scoped token.
 */
describe('security matrix', () => {
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  const roleTokens = {} as Record<Role, string>;
  let otherOrgOwner: string;
  let pinnedAdmin: string;
  let cellScopedAdmin: string;

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    // same project slug in another organization
    other = await createTenant(api, { project: tenant.project.slug });
    await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'staging' } });
    // mint the other organization's owner while bootstrap is open, then this tenant's tokens
    otherOrgOwner = await mintToken(api, other, { role: 'owner' });
    const owner = await api.call('POST', `/orgs/${other.org.slug}/projects`, { token: otherOrgOwner, body: { name: 'n', slug: 'n' } });
    expect(owner.status).toBe(201);
    // bootstrap is closed now: this tenant's tokens come from a seeded owner
    roleTokens.owner = await seedToken(api, tenant, 'owner');
    matrixOwner.set(api, roleTokens.owner);
    for (const role of ROLES.filter((r) => r !== 'owner')) {
      roleTokens[role] = await mintToken(api, tenant, { role, as: roleTokens.owner });
    }
    pinnedAdmin = await mintToken(api, tenant, { role: 'admin', envName: 'staging', as: roleTokens.owner });
    // an explicit cell with no members: everything the routes touch is outside it
    await api.db.insert(entityTypes).values({
      orgId: tenant.org.id,
      projectId: tenant.project.id,
      name: 'matrix-type',
      states: ['active'],
      initialState: 'active',
    });
    await api.db.insert(cells).values({
      orgId: tenant.org.id,
      projectId: tenant.project.id,
      name: 'matrix-scope',
      entityTypeName: 'matrix-type',
      placementPolicy: 'least-loaded',
      membershipMode: 'explicit',
    });
    cellScopedAdmin = await mintToken(api, tenant, { role: 'admin', cellScopes: ['matrix-scope'], as: roleTokens.owner });
  });
  afterAll(() => api.close());

  describe.each(SECURED_ROUTES)('$name', (route) => {
    it('without a token: 401 unauthorized', async () => {
      expectError(await route.call(api, tenant, undefined), 401, 'unauthorized');
    });

    it('with a malformed or unknown token: 401 unauthorized', async () => {
      expectError(await route.call(api, tenant, 'cpl_garbage'), 401, 'unauthorized');
      expectError(await route.call(api, tenant, generateServiceToken().token), 401, 'unauthorized');
    });

    it.each(ROLES)('as %s', async (role) => {
      const response = await route.call(api, tenant, roleTokens[role]);
      const allowed = route.minRole !== 'none' && ROLES.indexOf(role) >= ROLES.indexOf(route.minRole);
      if (allowed) expect(response.status, JSON.stringify(response.body)).toBe(route.success);
      else expectError(response, 403, 'forbidden');
    });

    it('with a token of another organization: 404, as if absent', async () => {
      const response = await route.call(api, tenant, otherOrgOwner);
      if (route.minRole === 'none') expectError(response, 403, 'forbidden');
      else expectError(response, 404, 'not_found');
    });

    it('with a token pinned to another environment', async () => {
      const response = await route.call(api, tenant, pinnedAdmin);
      if (route.minRole === 'none' || route.environmentScoped) expectError(response, 403, 'forbidden');
      else expect(response.status, JSON.stringify(response.body)).toBe(route.success);
    });

    it('with a cell-scoped token, on data outside its cells', async () => {
      const response = await route.call(api, tenant, cellScopedAdmin);
      if (route.minRole === 'none') expectError(response, 403, 'forbidden');
      else if (route.outsideCellScope?.code) expectError(response, route.outsideCellScope.status, route.outsideCellScope.code);
      else if (route.outsideCellScope) expect(response.status, JSON.stringify(response.body)).toBe(route.outsideCellScope.status);
      else expect(response.status, JSON.stringify(response.body)).toBe(route.success);
    });
  });

  // authenticated by the run's own callback token: no service token opens it, whatever its role or scope
  describe.each(RUN_CALLBACK_ROUTES)('$name', (route) => {
    it('without a token: 401 invalid_callback_token', async () => {
      expectError(await route.call(api, tenant, undefined), 401, 'invalid_callback_token');
    });

    it('with a malformed or unknown token: 401 invalid_callback_token', async () => {
      for (const token of ['cpl_garbage', generateServiceToken().token, 'a.b.c']) {
        expectError(await route.call(api, tenant, token), 401, 'invalid_callback_token');
      }
    });

    it.each(ROLES)('with the %s service token: 401 invalid_callback_token', async (role) => {
      expectError(await route.call(api, tenant, roleTokens[role]), 401, 'invalid_callback_token');
    });

    it('with a token of another organization, pinned to another environment or cell-scoped: 401 invalid_callback_token', async () => {
      for (const token of [otherOrgOwner, pinnedAdmin, cellScopedAdmin]) {
        expectError(await route.call(api, tenant, token), 401, 'invalid_callback_token');
      }
    });
  });
});
