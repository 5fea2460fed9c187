import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, type Role } from '../../src/auth/permissions';
import { generateServiceToken } from '../../src/auth/service-token';
import { cells, entityTypes } from '../../src/db/schema';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';
import {
  matrixOwner,
  GITHUB_SIGNED_ROUTES,
  PUBLIC_ROUTES,
  routeKey,
  RUN_CALLBACK_ROUTES,
  SECURED_ROUTES,
  type RouteKey,
} from '../support/security-matrix/index';
import { PEOPLE_ROUTES } from '../support/people-matrix';
import { resolveRoute, routeTable, type TableRoute } from '../support/security-matrix/route-table';

/**
 * Routes that need a user session are rows of the people matrix
 * (test/node/people-matrix.test.ts), which also checks that a service token
 * gets 401 there; they count as covered here.
 */
const SESSION_ONLY_ROUTES = PEOPLE_ROUTES.filter((route) => route.tokens === 401);
/** Every route the matrix has a row for: secured, run callback, public, session-only. */
const ROWS: RouteKey[] = [...SECURED_ROUTES, ...RUN_CALLBACK_ROUTES, ...GITHUB_SIGNED_ROUTES, ...PUBLIC_ROUTES, ...SESSION_ONLY_ROUTES];

/**
 * `/orgs/{id}` and the token routes under `/orgs/{orgId}/projects/{projectId}`
 * accept an id as well as a slug (docs/decisions.md, Tenancy): there the
 * matrix also checks that the owner reaches the route by id, so that another
 * organization's 404 by id is about the tenant, not about the id.
 */
const promisesIds = (route: RouteKey) => /^\/orgs\/\{(id|orgId)\}/.test(route.path);

/**
 * Every route naming an organization is also called by id with another
 * organization's token: the lookup by id is a query of its own (a UUID-shaped
 * segment is read as an id on every route today), and must be as tight as the
 * one by slug.
 */
const namesOrg = (route: RouteKey) => /^\/(orgs\/)?\{(o|id|orgId)\}/.test(route.path);

/** The tenant with its ids where its slugs go: a row's call then addresses it by id. */
const byId = (t: Tenant): Tenant => ({ org: { id: t.org.id, slug: t.org.id }, project: { id: t.project.id, slug: t.project.id } });

/**
 * Every route of the app × every kind of caller. The rows come from
 * test/support/security-matrix; which routes exist comes from the app's own
 * route table, so a route without a row (or a row without a route) fails here.
 *
 * Callers: none, a malformed token, a checksum-valid unknown token, an expired
 * and a revoked owner token, each role, another organization's owner (by slug
 * and by id), an admin pinned to another environment, and an admin scoped to a
 * cell the route's data is outside of.
 */
describe('security matrix', () => {
  let base: TestApi;
  /** `base`, recording every request a row makes: the last one is the call under test. */
  let api: TestApi;
  const requests: { method: string; path: string }[] = [];
  let table: TableRoute[];
  let tenant: Tenant;
  let other: Tenant;
  const roleTokens = {} as Record<Role, string>;
  let otherOrgOwner: string;
  let pinnedAdmin: string;
  let cellScopedAdmin: string;
  let expiredOwner: string;
  let revokedOwner: string;

  beforeAll(async () => {
    base = await createTestApi();
    const app = new Proxy(base.app, {
      get(target, property) {
        if (property !== 'request') return Reflect.get(target, property);
        return (input: string, init?: RequestInit) => {
          requests.push({ method: init?.method ?? 'GET', path: input });
          return target.request(input, init);
        };
      },
    });
    api = {
      ...base,
      app,
      call: (method, path, options) => {
        requests.push({ method, path });
        return base.call(method, path, options);
      },
    };
    table = routeTable(base.app);

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
    // owners both, so the credential is the only thing wrong with them
    expiredOwner = await seedToken(api, tenant, 'owner', { expiresAt: new Date('2020-01-01T00:00:00.000Z') });
    const tokensPath = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
    const revoked = await api.call('POST', tokensPath, { token: roleTokens.owner, body: { name: 'revoked', role: 'owner' } });
    expect((await api.call('DELETE', `${tokensPath}/${revoked.body.id}`, { token: roleTokens.owner })).status).toBe(200);
    revokedOwner = revoked.body.token;
  });
  afterAll(() => base.close());

  /**
   * Runs a row's call and checks that its last request, the call under test,
   * landed on the row's own route: a row cannot vouch for a route it does not call.
   */
  async function call(
    route: RouteKey & { call(api: TestApi, tenant: Tenant, token: string | undefined): Promise<ApiResponse> },
    token: string | undefined,
    t: Tenant = tenant,
  ): Promise<ApiResponse> {
    const before = requests.length;
    const response = await route.call(api, t, token);
    expect(requests.length, 'the row made no request').toBeGreaterThan(before);
    const last = requests.at(-1)!;
    const landed = resolveRoute(table, last.method, last.path);
    const landedKey = landed ? routeKey(landed) : 'no route';
    if (landedKey !== routeKey(route)) {
      throw new Error(`the row of ${routeKey(route)} called ${last.method} ${last.path}, which is ${landedKey}`);
    }
    return response;
  }

  describe('route table', () => {
    const keys = (routes: { method: string; path: string }[]) => routes.map(routeKey);

    it('has a row for every route of the app', () => {
      const rows = new Set(keys(ROWS));
      expect(table.length).toBeGreaterThan(PUBLIC_ROUTES.length);
      const missing = keys(table).filter((key) => !rows.has(key));
      expect(missing, `routes without a row in test/support/security-matrix: ${missing.join(', ')}`).toEqual([]);
    });

    it('has no row for a route the app does not have', () => {
      const routes = new Set(keys(table));
      const stale = keys(ROWS).filter((key) => !routes.has(key));
      expect(stale, `rows naming no route of the app: ${stale.join(', ')}`).toEqual([]);
    });

    it('has one row per route', () => {
      const all = keys(ROWS);
      const twice = all.filter((key, i) => all.indexOf(key) !== i);
      expect(twice, `routes with two rows: ${twice.join(', ')}`).toEqual([]);
    });

    it('holds every operation of the OpenAPI document', () => {
      const document = base.app.getOpenAPI31Document({ openapi: '3.1.0', info: { title: 'matrix', version: '0' } });
      const operations = Object.entries(document.paths ?? {}).flatMap(([path, item]) =>
        Object.keys(item ?? {})
          .filter((method) => ['get', 'post', 'put', 'patch', 'delete'].includes(method))
          .map((method) => `${method.toUpperCase()} ${path}`),
      );
      expect(operations.length).toBeGreaterThan(0);
      const routes = new Set(keys(table));
      // an operation under a wildcard route (Better Auth's /api/auth/*) is that route's
      const underWildcard = (key: string) => {
        const [method, path] = key.split(' ') as [string, string];
        return resolveRoute(table, method, path)?.path.endsWith('*') ?? false;
      };
      const unknown = operations.filter((key) => !routes.has(key) && !underWildcard(key));
      expect(unknown, `OpenAPI operations missing from the route table: ${unknown.join(', ')}`).toEqual([]);
    });
  });

  /** Callers whose credential is refused before anything else is looked at. */
  const credentialFailures: [string, () => string | undefined][] = [
    ['without credentials', () => undefined],
    ['with a malformed token', () => 'cpl_garbage'],
    ['with a checksum-valid unknown token', () => generateServiceToken().token],
    ['with an expired owner token', () => expiredOwner],
    ['with a revoked owner token', () => revokedOwner],
  ];

  // a loop, not describe.each: its `$name` cuts long paths short
  for (const route of SECURED_ROUTES) describe(routeKey(route), () => {
    for (const [caller, token] of credentialFailures) {
      it(`${caller}: 401 unauthorized`, async () => {
        expectError(await call(route, token()), 401, 'unauthorized');
      });
    }

    it.each(ROLES)('as %s', async (role) => {
      const response = await call(route, roleTokens[role]);
      const allowed = route.minRole !== 'none' && ROLES.indexOf(role) >= ROLES.indexOf(route.minRole);
      if (allowed) expect(response.status, JSON.stringify(response.body)).toBe(route.success);
      else expectError(response, 403, 'forbidden');
    });

    it('with a token of another organization, by slug: 404, as if absent', async () => {
      const response = await call(route, otherOrgOwner);
      if (route.minRole === 'none') expectError(response, 403, 'forbidden');
      else expectError(response, 404, 'not_found');
    });

    if (namesOrg(route)) {
      it('with a token of another organization, by id: 404, as if absent', async () => {
        expectError(await call(route, otherOrgOwner, byId(tenant)), 404, 'not_found');
      });
    }

    if (promisesIds(route)) {
      it('as owner, by id', async () => {
        const response = await call(route, roleTokens.owner, byId(tenant));
        expect(response.status, JSON.stringify(response.body)).toBe(route.success);
      });
    }

    it('with a token pinned to another environment', async () => {
      const response = await call(route, pinnedAdmin);
      if (route.minRole === 'none' || route.environmentScoped) expectError(response, 403, 'forbidden');
      else expect(response.status, JSON.stringify(response.body)).toBe(route.success);
    });

    it('with a cell-scoped token, on data outside its cells', async () => {
      const response = await call(route, cellScopedAdmin);
      if (route.minRole === 'none') expectError(response, 403, 'forbidden');
      else if (route.outsideCellScope?.code) expectError(response, route.outsideCellScope.status, route.outsideCellScope.code);
      else if (route.outsideCellScope) expect(response.status, JSON.stringify(response.body)).toBe(route.outsideCellScope.status);
      else expect(response.status, JSON.stringify(response.body)).toBe(route.success);
    });
  });

  // authenticated by the run's own callback token: no service token opens it, whatever its role or scope
  for (const route of RUN_CALLBACK_ROUTES) describe(routeKey(route), () => {
    const callers: [string, () => string | undefined][] = [
      ['without credentials', () => undefined],
      ['with a malformed token', () => 'cpl_garbage'],
      ['with a checksum-valid unknown service token', () => generateServiceToken().token],
      ['with something shaped like a callback token', () => 'a.b.c'],
      ['with an expired owner token', () => expiredOwner],
      ['with a revoked owner token', () => revokedOwner],
      ...ROLES.map((role): [string, () => string] => [`with the ${role} service token`, () => roleTokens[role]]),
      ['with a token of another organization', () => otherOrgOwner],
      ['with a token pinned to another environment', () => pinnedAdmin],
      ['with a cell-scoped token', () => cellScopedAdmin],
    ];
    for (const [caller, token] of callers) {
      it(`${caller}: 401 invalid_callback_token`, async () => {
        expectError(await call(route, token()), 401, 'invalid_callback_token');
      });
    }
  });

  // signed by the code host (HMAC) or by the install state: no service token opens them either
  for (const route of GITHUB_SIGNED_ROUTES) describe(`${routeKey(route)} (signed)`, () => {
    const callers: [string, () => string | undefined][] = [
      ['without credentials', () => undefined],
      ['with a malformed token', () => 'cpl_garbage'],
      ['with an expired owner token', () => expiredOwner],
      ['with a revoked owner token', () => revokedOwner],
      ...ROLES.map((role): [string, () => string] => [`with the ${role} service token`, () => roleTokens[role]]),
      ['with a token of another organization', () => otherOrgOwner],
      ['with a token pinned to another environment', () => pinnedAdmin],
      ['with a cell-scoped token', () => cellScopedAdmin],
    ];
    for (const [caller, token] of callers) {
      it(`${caller}: its own credential decides`, async () => {
        const { status, code } = route.expected(api);
        expectError(await call(route, token()), status, code);
      });
    }
  });

  for (const route of PUBLIC_ROUTES) describe(`${routeKey(route)} (public)`, () => {
    const publicCall = { ...route, call: (a: TestApi, _t: Tenant, token: string | undefined) => a.call(route.method, route.callPath ?? route.path, { token }) };

    it('answers without credentials', async () => {
      expect((await call(publicCall, undefined)).status).toBe(route.success);
    });

    it('ignores a malformed token', async () => {
      expect((await call(publicCall, 'cpl_garbage')).status).toBe(route.success);
    });
  });
});
