import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { orgMembers } from '../../src/db/schema';
import { expectError } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { PEOPLE_ROUTES, type PeopleRoute, type PeopleWorld } from '../support/people-matrix';
import { createUserTenant, signUp, verifiedUser, type TestUser } from '../support/people';
import { resolveRoute, routeTable, type TableRoute } from '../support/security-matrix/route-table';
import { routeKey } from '../support/security-matrix';

const SUPER_ADMIN = 'root@matrix.example';

type Caller = 'none' | 'token' | 'outsider' | 'member' | 'admin' | 'owner' | 'super-admin';
const ROLE_RANK = { member: 1, admin: 2, owner: 3 } as const;

/** What `caller` gets from `route`: success, or the error SPEC and DECISIONS §5 give it. */
function expected(route: PeopleRoute, caller: Caller): { status: number; code?: string } | 'skip' {
  if (caller === 'none') return { status: 401, code: 'unauthorized' };
  if (caller === 'token') return route.tokens === 401 ? { status: 401, code: 'unauthorized' } : 'skip';
  const success = { status: route.success };
  switch (route.access) {
    case 'any-user':
      return success;
    case 'super-admin':
      return caller === 'super-admin' ? success : { status: 403, code: 'forbidden' };
    default:
      if (caller === 'outsider' || caller === 'super-admin') return { status: 404, code: 'not_found' };
      return ROLE_RANK[caller] >= ROLE_RANK[route.access] ? success : { status: 403, code: 'forbidden' };
  }
}

/**
 * Every route a user session may call × every kind of user caller (no
 * session, a service token, a signed-in outsider, each organization role, a
 * super-admin). The rows come from test/support/people-matrix; that every
 * route has a row somewhere is checked by the token matrix's route table
 * (test/node/security-matrix.test.ts), which counts these rows.
 */
describe('people matrix', () => {
  let api: TestApi;
  let world: PeopleWorld;
  let table: TableRoute[];
  const requests: { method: string; path: string }[] = [];

  beforeAll(async () => {
    const base = await createTestApi({ env: { SUPER_ADMIN_EMAILS: SUPER_ADMIN } });
    api = {
      ...base,
      call: (method, path, options) => {
        requests.push({ method, path });
        return base.call(method, path, options);
      },
      close: () => base.close(),
    };
    table = routeTable(api.app);
    const owner = await signUp(api, { name: 'Owner' });
    const tenant = await createUserTenant(api, owner);
    const admin = await signUp(api, { name: 'Admin' });
    const member = await signUp(api, { name: 'Member' });
    // memberships as fixtures: the member routes themselves are rows of the matrix
    await api.db.insert(orgMembers).values([
      { orgId: tenant.org.id, userId: admin.id, role: 'admin' },
      { orgId: tenant.org.id, userId: member.id, role: 'member' },
    ]);
    const outsider = await signUp(api, { name: 'Outsider' });
    await createUserTenant(api, outsider);
    const superAdmin = await verifiedUser(api, SUPER_ADMIN);
    const minted = await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
      token: owner.token,
      body: { name: 'matrix-owner', role: 'owner' },
    });
    expect(minted.status).toBe(201);
    world = { ...tenant, owner, admin, member, outsider, superAdmin, ownerToken: minted.body.token };
  });
  afterAll(() => api.close());

  const credential = (caller: Caller): string | undefined => {
    const users: Record<Exclude<Caller, 'none' | 'token'>, TestUser> = {
      outsider: world.outsider,
      member: world.member,
      admin: world.admin,
      owner: world.owner,
      'super-admin': world.superAdmin,
    };
    if (caller === 'none') return undefined;
    if (caller === 'token') return world.ownerToken;
    return users[caller].token;
  };

  it('has rows', () => {
    expect(PEOPLE_ROUTES.length).toBeGreaterThan(0);
  });

  const CALLERS: Caller[] = ['none', 'token', 'outsider', 'member', 'admin', 'owner', 'super-admin'];
  for (const route of PEOPLE_ROUTES) {
    describe(`${route.name} (${route.access})`, () => {
      for (const caller of CALLERS) {
        const expectation = expected(route, caller);
        if (expectation === 'skip') continue;
        it(`${caller}: ${expectation.status}${expectation.code ? ` ${expectation.code}` : ''}`, async () => {
          const before = requests.length;
          const response = await route.call(api, world, credential(caller));
          expect(requests.length, 'the row made no request').toBeGreaterThan(before);
          const last = requests.at(-1)!;
          const landed = resolveRoute(table, last.method, last.path);
          expect(landed ? routeKey(landed) : 'no route', 'the call under test landed on another route').toBe(routeKey(route));
          if (expectation.code) expectError(response, expectation.status, expectation.code);
          else expect(response.status, JSON.stringify(response.body)).toBe(expectation.status);
        });
      }
    });
  }
});
