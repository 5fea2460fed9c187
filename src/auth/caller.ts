import { and, eq, isNull } from 'drizzle-orm';
import type { Queryable } from '../db/client';
import { environments, serviceTokens } from '../db/schema';
import { ApiError } from '../http/errors';
import type { Clock } from '../platform';
import { grantsOf, tokenGrantColumns, type GrantRow, type Grants } from './grants';
import type { PendingPrincipal, Principal, ServiceTokenPrincipal, UserSessionPrincipal } from './principal';

/** A request's caller: who is calling (principal) and what they may do (grants), kept apart. */
export interface Caller {
  readonly principal: Principal;
  readonly grants: Grants;
}

/**
 * The caller of a request, resolved at most once and as late as possible.
 *
 * The authenticators (./authenticators.ts) settle what needs no lookup: no
 * header (bootstrap mode, or 401) and a malformed header or token (401,
 * before any query). A well-formed token is only hashed there; the first
 * tenancy lookup (src/auth/access.ts) then resolves the token, its grants,
 * the organization, the project and the environment in one joined query.
 * Reading `current` before that is a programming error, and says so.
 */
export class CallerState {
  #caller: Caller | undefined;

  constructor(
    caller: Caller | undefined,
    /** SHA-256 of the presented token while it is not yet looked up. */
    readonly tokenHash: string | undefined,
    /**
     * A signed-in user, known before its grants: those come from its
     * membership of the organization the first tenancy lookup finds
     * (src/auth/memberships.ts).
     */
    readonly user?: UserSessionPrincipal,
  ) {
    this.#caller = caller;
  }

  static pending(pending: PendingPrincipal): CallerState {
    switch (pending.kind) {
      case 'settled':
        return new CallerState(pending.caller, undefined);
      case 'service-token':
        return new CallerState(undefined, pending.tokenHash);
      case 'user-session':
        return new CallerState(undefined, undefined, pending.principal);
    }
  }

  get resolved(): boolean {
    return this.#caller !== undefined;
  }

  get current(): Caller {
    if (!this.#caller) throw new Error('caller read before it was resolved: call an authorize* helper or resolveCaller() first');
    return this.#caller;
  }

  settle(caller: Caller): void {
    this.#caller = caller;
  }
}

const unauthorized = (message: string) => new ApiError('unauthorized', message);

/** The credential of an `Authorization: Bearer <credential>` header; undefined for any other form. */
export function bearerCredential(authorization: string | undefined): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
}

/** The columns of a token that say who it is; its grants are tokenGrantColumns. */
export const tokenPrincipalColumns = {
  tokenId: serviceTokens.id,
  tokenExpiresAt: serviceTokens.expiresAt,
};

/** Everything a token caller is built from; select these wherever a token is joined (with grantEnvName). */
export const tokenCallerColumns = {
  tokenId: tokenPrincipalColumns.tokenId,
  ...tokenGrantColumns,
  tokenExpiresAt: tokenPrincipalColumns.tokenExpiresAt,
};

type TokenPrincipalRow = { [K in keyof typeof tokenPrincipalColumns]: (typeof tokenPrincipalColumns)[K]['_']['data'] | null };

/** A token row (revoked ones are filtered in the query) → the caller, or 401 when expired. */
export function tokenCaller(row: TokenPrincipalRow & GrantRow, clock: Clock): Caller {
  if (row.tokenExpiresAt && row.tokenExpiresAt.getTime() <= clock.now().getTime()) throw unauthorized('token expired');
  const principal: ServiceTokenPrincipal = { kind: 'service-token', tokenId: row.tokenId!, expiresAt: row.tokenExpiresAt };
  return { principal, grants: grantsOf(principal, row) };
}

/**
 * Who is calling, without the grants a path's organization would settle:
 * a pending token is looked up on its own; a user is known already.
 */
export async function callerPrincipal(state: CallerState, db: Queryable, clock: Clock): Promise<Principal> {
  if (state.user) return state.user;
  return (await resolveCaller(state, db, clock)).principal;
}

/** Resolves a pending token on its own (routes without a project in their path). */
export async function resolveCaller(state: CallerState, db: Queryable, clock: Clock): Promise<Caller> {
  if (state.resolved) return state.current;
  if (state.user) throw new Error("a user's grants come with an organization: use loadOrg or an authorize* helper");
  const [row] = await db
    .select({ ...tokenCallerColumns, grantEnvName: environments.name })
    .from(serviceTokens)
    .leftJoin(environments, eq(environments.id, tokenGrantColumns.grantEnvId))
    .where(and(eq(serviceTokens.tokenHash, state.tokenHash!), isNull(serviceTokens.revokedAt)))
    .limit(1);
  if (!row) throw unauthorized('invalid or revoked token');
  const caller = tokenCaller(row, clock);
  state.settle(caller);
  return caller;
}
