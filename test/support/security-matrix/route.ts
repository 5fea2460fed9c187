import type { Role } from '../../../src/auth/permissions';
import type { Tenant } from '../fixtures';
import type { ApiResponse, TestApi } from '../node-app';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** The prefixes SPEC calls `PROJ` and `ENV`, as the route table spells them. */
export const PROJ = '/{o}/{p}';
export const ENV = `${PROJ}/envs/{envName}`;

/** A route of the app's route table: method and path template, `{param}` style. */
export interface RouteKey {
  method: Method;
  /** The template exactly as registered, e.g. `/{o}/{p}/envs/{envName}/entities/{name}`. */
  path: string;
}

export const routeKey = (route: { method: string; path: string }): string => `${route.method} ${route.path}`;

/**
 * One row per route: how to call it for a tenant, and the least role it
 * needs (`none` for routes no service token may use). The shared matrix in
 * test/node/security-matrix.test.ts runs every row against every kind of
 * caller, and fails when a route of the app has no row, when a row names a
 * route the app no longer has, and when a row's call lands on another route.
 * Rows live in a file per module, gathered in ./index.ts.
 *
 * The tenant has environments `default` and `staging`; routes act on
 * `default`. The matrix's tokens: one per role, a token of another
 * organization, an admin pinned to `staging`, and an admin scoped to the cell
 * `matrix-scope` (which the matrix creates as an explicit cell of the entity
 * type `matrix-type`, with no members: everything a route touches is outside it).
 */
export interface SecuredRoute extends RouteKey {
  minRole: Role | 'none';
  /** True when a token pinned to another environment must be refused (403 forbidden). */
  environmentScoped: boolean;
  /**
   * Calls the route for `tenant`, addressing it by `tenant.org.slug` and
   * `tenant.project.slug` (the matrix passes ids there to address by id).
   * The last request made is the call under test: fixtures come first.
   */
  call(api: TestApi, tenant: Tenant, token: string | undefined): Promise<ApiResponse>;
  success: number;
  /**
   * What the cell-scoped admin gets when the route touches data outside its
   * cells: omitted means its role decides, as for the unscoped admin.
   */
  outsideCellScope?: { status: number; code?: string };
}

let n = 0;
export const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

/** The owner token each matrix run sets up, for routes that need fixtures made first. */
export const matrixOwner = new WeakMap<TestApi, string>();

/** Calls with the matrix's owner token: for fixtures a route needs before the call under test. */
export const asOwner = (api: TestApi) => {
  const token = matrixOwner.get(api);
  if (!token) throw new Error('matrixOwner is not set for this api');
  return token;
};
