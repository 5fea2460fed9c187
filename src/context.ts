import type { PlainCallers } from './auth/plain-callers';
import type { Config } from './config';
import type { Db } from './db/client';
import type { Logger } from './logger';
import type { SignHs256 } from './auth/callback-token';
import type { BootstrapMemo, ChangeStreams, Clock, DeliveryScheduler, Mailer } from './platform';
import type { Auth } from './auth/sessions';
import type { Caller, CallerState } from './auth/caller';
import type { ChangeRow } from './stream/feed';

/** Who is calling and what they may do: src/auth/caller.ts (principal and grants, kept apart). */
export type { Caller };

/** What a service verb receives: everything it may use, nothing of the host. */
export interface ServiceContext {
  readonly db: Db;
  readonly config: Config;
  readonly logger: Logger;
  readonly clock: Clock;
  /**
   * Who is calling (`caller.principal`) and what they may do
   * (`caller.grants`). Resolved by the first tenancy lookup
   * (src/auth/access.ts) or by resolveCaller(); reading it earlier throws.
   */
  readonly caller: Caller;
  readonly callerState: CallerState;
  readonly bootstrap: BootstrapMemo;
  /** See Platform.namedStatements. */
  readonly namedStatements: boolean;
  readonly deliveries: DeliveryScheduler;
  readonly changes: ChangeStreams;
  readonly mailer: Mailer;
  /** Better Auth on this request's database (src/auth/sessions.ts), built on first use. */
  auth(): Auth;
  /**
   * Environments whose change log this request wrote to. Noted inside the
   * writing transaction; published by the request middleware once the
   * request has succeeded (so after the commit).
   */
  readonly changedEnvironments: Set<string>;
  /**
   * Changes this request logged with their log rows in hand (the
   * one-statement create, src/modules/entities/fast-paths.ts), by
   * environment: published with those rows (ChangeStreams.publish), so the
   * Node host's hub need not read them back. Noted only there, never also in
   * changedEnvironments; an environment in both is published without them,
   * since some change of it came without its row.
   */
  readonly committedChanges: Map<string, ChangeRow[]>;
  /** See Platform.plainCallers. */
  readonly plainCallers?: PlainCallers;
  /** See Platform.signHs256. */
  readonly signHs256?: SignHs256;
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
    /**
     * The headers every response to this request carries (X-Request-Id, and
     * RateLimit-Policy and RateLimit where the host limits), gathered by
     * src/http/request-envelope.ts and given to the response once it is made;
     * a response written past the context (the Node host's change stream,
     * straight to its socket) takes them from here.
     */
    responseHeaders?: Record<string, string>;
    /** The response answerText built with responseHeaders already in it (src/http/request-envelope.ts). */
    answeredWithHeaders?: Response;
  };
};
