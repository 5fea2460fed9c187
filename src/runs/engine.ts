import type { Config } from '../config';
import type { Db } from '../db/client';
import type { Logger } from '../logger';
import type { Clock } from '../platform';
import type { ResolveHost } from './outbound-guard';

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
  fetch: typeof fetch;
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
}

/** The engine on a host's database handle, with the settings of its config. */
export function createRunEngine(
  parts: Pick<RunEngine, 'db' | 'config' | 'logger' | 'clock'> & Partial<Pick<RunEngine, 'random' | 'fetch' | 'resolveHost'>>,
): RunEngine {
  return {
    random: Math.random,
    fetch: (input, init) => fetch(input, init),
    ...parts,
    attemptTimeoutMs: parts.config.deliveryAttemptTimeoutMs,
    leaseMs: parts.config.deliveryLeaseMs,
  };
}
