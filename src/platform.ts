import type { SignHs256 } from './auth/callback-token';
import type { PlainCallers } from './auth/plain-callers';
import type { Context } from 'hono';
import type { Config } from './config';
import type { Db } from './db/client';
import type { Logger } from './logger';
import type { LeasedJob } from './runs/delivery';
import type { ChangeRow } from './stream/feed';
import type { SubscriptionRequest } from './stream/hub';

/**
 * The ports each host implements (ARCHITECTURE.md). The core imports no
 * `node:` module and no binding: whatever differs between the Worker and the
 * Node host comes through here.
 */

export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A database handle for one request, and how to let it go afterwards. */
export interface DatabaseLease {
  db: Db;
  /** Node: nothing (the pool outlives requests). Worker: ends the per-request Neon Pool. */
  release(): Promise<void>;
}

/**
 * Bootstrap mode only ever goes from open to closed, so a host may remember
 * "closed" for its lifetime and skip the query; "open" is always re-checked.
 */
export interface BootstrapMemo {
  closed: boolean;
}

/**
 * The `deliveries` port: told, after the commit that wrote a delivery job,
 * that the job is due at `runAt`. Worker: a queue message; Node: a wake-up
 * of the job runner. A failure here loses nothing: the job row is the truth,
 * and the sweep (cron or poll) finds every due job.
 */
export interface DeliveryScheduler {
  schedule(job: { runId: string; attempt: number; runAt: Date }): Promise<void>;
  /**
   * A host whose worker runs in this process (Node) may hand a trigger one of
   * its free slots: the trigger writes its job already leased until
   * `leaseUntil`, in the same statement as the run, and gives the written run
   * to `start`, so the first attempt needs no claim. `release` when nothing
   * was written. Undefined: no free slot, or no worker here (the Worker's
   * queue); the job is then written unleased and `schedule`d. A process that
   * dies holding such a lease loses nothing: the job is taken up again when
   * the lease runs out, as after any claim.
   */
  reserve?(): DeliverySlot | undefined;
}

export interface DeliverySlot {
  leaseUntil: Date;
  /**
   * `work`, once the statement the caller began in this turn is on the wire:
   * a pool hands its connection over on a later tick, so work started in the
   * same turn (signing the run's callback token) would go first and hold the
   * statement back. The trigger's token is signed while its insert is out.
   */
  meanwhile<T>(work: () => Promise<T>): Promise<T>;
  start(leased: LeasedJob): void;
  release(): void;
}

/**
 * The `changes` port: the entity change stream's fan-out. Node: the
 * in-process hub; Worker: the environment's Durable Object.
 */
export interface ChangeStreams {
  /**
   * After a commit that logged changes of `envId`: subscribers read the log.
   * Losing it delays, never loses, changes. `committed`, when given, are
   * every change of `envId` the commit logged, as the log holds them: a host
   * may fan them out without reading them back when they follow on from
   * what it last read (src/stream/hub.ts); it reads the log otherwise.
   */
  publish(envId: string, committed?: readonly ChangeRow[]): Promise<void>;
  /**
   * Serves an SSE stream of one environment to a caller already authorized
   * for it. `connection` is the host's own handle of the request (Hono's
   * `c.env`: Node's request and response objects, the Worker's bindings) and
   * the headers every response carries; a host may write to it directly.
   */
  open(request: SubscriptionRequest, connection: { raw: unknown; headers: Record<string, string> }): Promise<Response>;
}

/** Where one rate-limit key stands in its current window (src/http/rate-limit.ts). */
export interface RateLimitStanding {
  /** Whether this request was admitted (and counted). */
  allowed: boolean;
  /** Requests left in the window after this one. */
  remaining: number;
  /** When the window ends, in epoch milliseconds. */
  resetAt: number;
}

/**
 * The `rateLimits` port: request counts per key (docs/decisions.md, Rate
 * limits). Node: in process, synced through Postgres when several instances
 * share one; Worker: a Durable Object per key.
 */
export interface RateLimits {
  /** The client's network address as the host sees it, or undefined when it cannot tell. */
  clientAddress(c: Context): string | undefined;
  /**
   * Counts one request against `key` unless its window is already full. A
   * store refuses a budget it has already seen spent without I/O.
   */
  hit(key: string, limit: number): RateLimitStanding | Promise<RateLimitStanding>;
  /** What this process or isolate last saw of `key` in the current window, with no I/O; undefined when nothing. */
  peek(key: string, limit: number): RateLimitStanding | undefined;
}

/** One message of the service's own mail: verification, password reset, invitation links. */
export interface MailMessage {
  to: string;
  subject: string;
  text: string;
}

/**
 * The `mailer` port. Node: SMTP through nodemailer when SMTP_URL is set,
 * else one log line per message (the embedded local default). A failure
 * is the caller's to report; nothing retries a message.
 */
export interface Mailer {
  send(message: MailMessage): Promise<void>;
}

export interface Platform {
  config: Config;
  logger: Logger;
  clock: Clock;
  /** Opened lazily, on a request's first query; requests refused earlier never touch the database. */
  openDatabase(): DatabaseLease;
  bootstrap: BootstrapMemo;
  /**
   * Whether hot queries may be named server-side prepared statements, whose
   * plans Postgres keeps per connection. Off where several connections share
   * one session (PGlite behind pglite-socket): there a name prepared by one
   * connection collides with the next one's.
   */
  namedStatements: boolean;
  deliveries: DeliveryScheduler;
  changes: ChangeStreams;
  mailer: Mailer;
  /** Both hosts set it; a platform without it (one built by hand for a test of something else) limits nothing. */
  rateLimits?: RateLimits;
  /**
   * Whether requests arrive with an execution context (the Worker's
   * `waitUntil`). Asked of the platform, not of Hono, whose getter throws
   * where there is none: an Error and its stack on every Node request.
   */
  executionContext: boolean;
  /**
   * Plain answers of the token check, remembered for this database and
   * validated by its access epoch (src/auth/plain-callers.ts). Without it
   * every request checks its token in full.
   */
  plainCallers?: PlainCallers;
  /**
   * SHA-256 of text (its UTF-8), as hex, where the host has a native one to
   * call synchronously (Node: node:crypto). The rate limiter keys every
   * request with a token by it; without it the core's own, @noble/hashes
   * (hashServiceToken in src/auth/service-token.ts), gives the same digest
   * in about three times the time.
   */
  sha256Hex?: (text: string) => string;
  /**
   * A synchronous HS256 signer, where the host has a native HMAC (Node:
   * fast-jwt over node:crypto). Every delivery attempt signs its run's
   * callback token (src/auth/callback-token.ts). Without it jose signs,
   * through WebCrypto, which on Node hands each signature to the thread pool:
   * about 180 µs of CPU a token on the bench's machine, against about 40.
   * Either way the token is the same bytes.
   */
  signHs256?: SignHs256;
  /**
   * The app serves the local-first CLI inside its own process, with no port
   * open: a request without credentials is the operator's, with every power
   * (src/auth/principal.ts, LocalOperatorPrincipal). Never set by a server.
   */
  localOperator?: boolean;
}
