import type { Config } from '../config';
import type { Db, Queryable, Tx } from '../db/client';
import type { Logger } from '../logger';
import type { SignHs256 } from '../auth/callback-token';
import type { Clock } from '../platform';
import type { HmacSha256 } from './outbound-request';
import type { Secret } from '../secret';
import type { ResolveHost } from './outbound-guard';

/** The tenancy of a run: whose secrets it may read. */
export interface RunTenancy {
  orgId: string;
  projectId: string;
  envId: string;
}

/**
 * What the run engine takes from the modules (ARCHITECTURE "Runs: trigger
 * kinds"): src/runs/ imports no module, so the composition (the hosts, and
 * the API's verbs) hands these in; src/modules/action-runs/run-ports.ts is
 * the one implementation.
 */
export interface RunPorts {
  /**
   * The named secrets of one environment, decrypted; absent names are left
   * out. Throws SealedSecretError (src/auth/crypto.ts) for a value that
   * cannot be opened.
   */
  resolveSecrets(db: Queryable, key: Secret, env: RunTenancy, names: string[]): Promise<Map<string, string>>;
  /**
   * Moves an entity to `state` for a run that ends (its action's onSuccess or
   * onFailure), inside the run's transaction, with its change-log row; the
   * environment is noted in `changes` for publishing after commit.
   */
  moveEntityState(
    tx: Tx,
    deps: { clock: Clock; changes: Set<string> },
    entityId: string,
    state: string,
  ): Promise<{ moved: true } | { moved: false; reason: string }>;
}

/**
 * What a webhook attempt reads of its answer: the status and the headers
 * (Retry-After), and the body only to let it go. A fetch Response is one; the
 * Node host answers with these alone (src/node/outbound-fetch.ts), having
 * read and dropped the body itself.
 */
export interface OutboundAnswer {
  status: number;
  headers: { get(name: string): string | null };
  body?: { cancel(): Promise<void> } | null;
}

/**
 * What the run engine works with outside a request: the delivery attempts,
 * the queue consumer, the sweep and the reaper. Each host builds one (Node
 * once, at start; the Worker per queue batch or cron tick, on that
 * invocation's database handle).
 */
export interface RunEngine {
  db: Db;
  config: Config;
  logger: Logger;
  clock: Clock;
  /** [0, 1): the retry schedule's jitter. */
  random: () => number;
  /** A webhook attempt's outbound call: fetch's, or a host's own (the Node host's, src/node/outbound-fetch.ts). */
  fetch: (url: string, init: RequestInit) => Promise<OutboundAnswer>;
  /** Node resolves names before the outbound guard judges them; the Worker's fetch cannot reach private addresses. */
  resolveHost?: ResolveHost;
  /** config.deliveryAttemptTimeoutMs (DECISIONS §4: 10 s). */
  attemptTimeoutMs: number;
  /**
   * config.deliveryLeaseMs: how long a worker holds a job it took. Longer
   * than an attempt can take, so a live worker never loses its job to
   * another; a dead worker's job is taken up again when the lease runs out.
   */
  leaseMs: number;
  /** Secrets and entity moves, from the modules. */
  ports: RunPorts;
  /**
   * Whether the engine's statements may be named, so Postgres keeps their
   * parse and plan per connection (Platform.namedStatements). Default false.
   */
  namedStatements: boolean;
  /** The host's synchronous signer for the callback token (Platform.signHs256); without it, jose. */
  signHs256?: SignHs256;
  /**
   * The host's synchronous HMAC for `webhook-signature` (Node: node:crypto).
   * Without it WebCrypto signs, which on Node is two thread-pool round trips
   * an attempt (the key's import and the signature), as jose's were.
   */
  hmacSha256?: HmacSha256;
}

/** The engine on a host's database handle, with the settings of its config. */
export function createRunEngine(
  parts: Pick<RunEngine, 'db' | 'config' | 'logger' | 'clock' | 'ports'> & Partial<Pick<RunEngine, 'random' | 'fetch' | 'resolveHost' | 'namedStatements' | 'signHs256' | 'hmacSha256'>>,
): RunEngine {
  return {
    random: Math.random,
    namedStatements: false,
    fetch: (input, init) => fetch(input, init),
    ...parts,
    attemptTimeoutMs: parts.config.deliveryAttemptTimeoutMs,
    leaseMs: parts.config.deliveryLeaseMs,
  };
}
