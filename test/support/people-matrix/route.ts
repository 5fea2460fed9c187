import type { ApiResponse, TestApi } from '../node-app';
import type { TestUser } from '../people';
import type { Method, RouteKey } from '../security-matrix/route';

/**
 * The people matrix (test/node/people-matrix.test.ts): every route that a
 * user session may call, × every kind of user caller. Rows live in a file per
 * module, gathered in ./index.ts; the token matrix (test/node/security-matrix)
 * covers service tokens on the same routes.
 *
 * `access` says who succeeds:
 * - `any-user`: any signed-in user (notifications, preferences, POST /orgs);
 * - `member` | `admin` | `owner`: a member of the world's organization with at
 *   least that role (DECISIONS §5); a signed-in user who is not a member gets
 *   404 not_found, a lower role 403 forbidden;
 * - `super-admin`: a user whose verified address is in SUPER_ADMIN_EMAILS;
 *   every other user gets 403 forbidden.
 * Without a session every row is 401 unauthorized.
 *
 * `tokens`: what a service token (the world project's owner token) gets:
 * `'allowed'` when the token matrix covers the route (it is in
 * SECURED_ROUTES), or `401` when the route needs a user session.
 */
export interface PeopleRoute extends RouteKey {
  method: Method;
  access: 'any-user' | 'member' | 'admin' | 'owner' | 'super-admin';
  tokens: 'allowed' | 401;
  success: number;
  /**
   * Calls the route in `world` with `credential` (a session's Bearer value, a
   * service token, or undefined). The last request made is the call under
   * test: fixtures come first, made with world.owner (or world.superAdmin).
   */
  call(api: TestApi, world: PeopleWorld, credential: string | undefined): Promise<ApiResponse>;
}

/**
 * One organization with a project and a user of each role, another
 * organization's owner (the outsider) and a super-admin (a member of
 * nothing). Rows that delete or change what they call make their own
 * fixtures first (a fresh member to remove, a fresh organization to delete).
 */
export interface PeopleWorld {
  org: { id: string; slug: string };
  project: { id: string; slug: string };
  owner: TestUser;
  admin: TestUser;
  member: TestUser;
  /** Signed in, owner of another organization, not a member of this one. */
  outsider: TestUser;
  /** Verified address in SUPER_ADMIN_EMAILS; a member of no organization. */
  superAdmin: TestUser;
  /** An owner service token of the world's project. */
  ownerToken: string;
}

let n = 0;
export const freshName = (base: string) => `${base}-${(++n).toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
