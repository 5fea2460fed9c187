import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Caller, TokenCaller } from '../context';
import type { Db, Queryable } from '../db/client';
import { environments, serviceTokens, systemState } from '../db/schema';
import { ApiError } from '../http/errors';
import type { BootstrapMemo, Clock } from '../platform';
import { hashServiceToken, isWellFormedServiceToken } from './service-token';

/**
 * Who is calling, resolved at most once per request and as late as possible.
 *
 * The request middleware settles what needs no token lookup: no header
 * (bootstrap mode, or 401) and a malformed header or token (401, before any
 * query). A well-formed token is only hashed there; the first tenancy lookup
 * (src/auth/access.ts) then resolves the token, the organization, the project
 * and the environment in one joined query. Reading `current` before that is a
 * programming error, and says so.
 */
export class CallerState {
  #caller: Caller | undefined;

  constructor(
    caller: Caller | undefined,
    /** SHA-256 of the presented token while it is not yet looked up. */
    readonly tokenHash: string | undefined,
  ) {
    this.#caller = caller;
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

/** The header check that needs no token lookup. */
export async function authenticateRequest(
  deps: { db: () => Db; bootstrap: BootstrapMemo },
  authorization: string | undefined,
  /** hashServiceToken of this header's token, when the request already computed it (the rate limiter). */
  knownTokenHash?: string,
): Promise<CallerState> {
  if (authorization === undefined) {
    if (!deps.bootstrap.closed) {
      const [state] = await deps.db().select().from(systemState).limit(1);
      if (state && state.bootstrapClosedAt === null) return new CallerState({ kind: 'bootstrap' }, undefined);
      deps.bootstrap.closed = true;
    }
    throw unauthorized('authentication required: send Authorization: Bearer <token>');
  }
  const token = bearerCredential(authorization);
  if (token === undefined) throw unauthorized('expected Authorization: Bearer <token>');
  if (!isWellFormedServiceToken(token)) throw unauthorized('malformed token');
  return new CallerState(undefined, knownTokenHash ?? hashServiceToken(token));
}

/** The token columns a caller is built from; select these wherever a token is joined. */
export const tokenCallerColumns = {
  tokenId: serviceTokens.id,
  tokenOrgId: serviceTokens.orgId,
  tokenProjectId: serviceTokens.projectId,
  tokenRole: serviceTokens.role,
  tokenEnvId: serviceTokens.envId,
  tokenCellScopes: serviceTokens.cellScopes,
  tokenExpiresAt: serviceTokens.expiresAt,
};

type TokenColumns = { [K in keyof typeof tokenCallerColumns]: (typeof tokenCallerColumns)[K]['_']['data'] | null };

/** A token row (revoked ones are filtered in the query) → the caller, or 401 when expired. */
export function tokenCaller(row: TokenColumns & { pinnedEnvName: string | null }, clock: Clock): TokenCaller {
  if (row.tokenExpiresAt && row.tokenExpiresAt.getTime() <= clock.now().getTime()) throw unauthorized('token expired');
  return {
    kind: 'token',
    tokenId: row.tokenId!,
    orgId: row.tokenOrgId!,
    projectId: row.tokenProjectId!,
    role: row.tokenRole!,
    envId: row.tokenEnvId,
    envName: row.pinnedEnvName,
    cellScopes: row.tokenCellScopes ?? [],
    expiresAt: row.tokenExpiresAt,
  };
}

/** The name of a token's pinned environment, as a column for queries that join the token. */
export const pinnedEnvName = sql<string | null>`(select pin.name from environments pin where pin.id = ${serviceTokens.envId})`;

/** Resolves a pending token on its own (routes without a project in their path). */
export async function resolveCaller(state: CallerState, db: Queryable, clock: Clock): Promise<Caller> {
  if (state.resolved) return state.current;
  const [row] = await db
    .select({ ...tokenCallerColumns, pinnedEnvName: environments.name })
    .from(serviceTokens)
    .leftJoin(environments, eq(environments.id, serviceTokens.envId))
    .where(and(eq(serviceTokens.tokenHash, state.tokenHash!), isNull(serviceTokens.revokedAt)))
    .limit(1);
  if (!row) throw unauthorized('invalid or revoked token');
  const caller = tokenCaller(row, clock);
  state.settle(caller);
  return caller;
}
