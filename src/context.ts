import type { Config } from './config';
import type { Db } from './db/client';
import type { Logger } from './logger';
import type { BootstrapMemo, ChangeStreams, Clock, DeliveryScheduler } from './platform';
import type { CallerState } from './auth/caller';
import type { Role } from './auth/permissions';

export interface TokenCaller {
  kind: 'token';
  tokenId: string;
  orgId: string;
  projectId: string;
  role: Role;
  /** The environment the token is pinned to, or null for all environments. */
  envId: string | null;
  envName: string | null;
  /** Cell names the token is restricted to; empty means every cell. */
  cellScopes: string[];
  expiresAt: Date | null;
}

/** Bootstrap mode: a fresh deployment with no token minted yet accepts every request. */
export interface BootstrapCaller {
  kind: 'bootstrap';
}

export type Caller = TokenCaller | BootstrapCaller;

/** What a service verb receives: everything it may use, nothing of the host. */
export interface ServiceContext {
  readonly db: Db;
  readonly config: Config;
  readonly logger: Logger;
  readonly clock: Clock;
  /**
   * Who is calling. Resolved by the first tenancy lookup (src/auth/access.ts)
   * or by resolveCaller(); reading it earlier throws.
   */
  readonly caller: Caller;
  readonly callerState: CallerState;
  readonly bootstrap: BootstrapMemo;
  /** See Platform.namedStatements. */
  readonly namedStatements: boolean;
  readonly deliveries: DeliveryScheduler;
  readonly changes: ChangeStreams;
  /**
   * Environments whose change log this request wrote to. Noted inside the
   * writing transaction; published by the request middleware once the
   * request has succeeded (so after the commit).
   */
  readonly changedEnvironments: Set<string>;
  readonly requestId: string;
}

export type AppEnv = {
  Variables: {
    requestId: string;
    /** Built by the request-context middleware; the database inside opens on first use. */
    services: ServiceContext;
    /**
     * SHA-256 of the request's well-formed service token, when the rate
     * limiter already hashed it for its key: authentication reuses it rather
     * than hash the same token twice (a SHA-256 in JS costs ~9 µs).
     */
    serviceTokenHash?: string;
    /** The RateLimit-Policy and RateLimit headers of this request, for responses the context does not build. */
    rateLimitHeaders?: Record<string, string>;
  };
};
