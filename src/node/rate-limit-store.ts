import type { Context } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { lt, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { rateLimitCounters } from '../db/schema';
import { RATE_LIMIT_WINDOW_MS, rateLimitWindow } from '../http/rate-limit';
import type { Logger } from '../logger';
import type { Clock, RateLimits, RateLimitStanding } from '../platform';

/** How often a shared limiter pushes its counts to Postgres and reads the totals back. */
export const RATE_LIMIT_SYNC_MS = 1_000;
/** Keys per statement of a sync. */
const SYNC_BATCH = 500;

interface Counter {
  windowStart: number;
  /** Every instance's count of the window as of this instance's last sync (its own pushed hits included). */
  synced: number;
  /** This instance's hits since then. */
  pending: number;
}

/** Where a counter stands: whether one more request fits, and how many are left after those counted. */
function standingOf(counter: Counter, limit: number): RateLimitStanding {
  const used = counter.synced + counter.pending;
  return { allowed: used < limit, remaining: Math.max(0, limit - used), resetAt: counter.windowStart + RATE_LIMIT_WINDOW_MS };
}

/**
 * The Node host's rate limiter. Every request is counted in process, with no
 * I/O: a Map lookup on the hot path.
 *
 * Alone (PGlite, one process by construction) that is the whole count. Shared
 * (`shared`: several instances on one Postgres database), every
 * `RATE_LIMIT_SYNC_MS` the instance adds the hits it took since its last sync
 * to `rate_limit_counters` in one statement and reads those keys' totals back.
 * An instance thus decides on a view that lacks what the others admitted
 * since their last push and its own last read of the key: the global count
 * passes the limit by never more than (instances − 1) × limit, and for a
 * steady client by about what it sends in two sync intervals
 * (docs/decisions.md, Rate limits).
 */
export class NodeRateLimits implements RateLimits {
  readonly #counters = new Map<string, Counter>();
  /** Keys with hits not yet pushed. */
  readonly #dirty = new Set<string>();
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #shared: { db: Db; intervalMs: number } | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #syncs: Promise<void> = Promise.resolve();
  #nextSweepAt = 0;
  #nextCleanupAt = 0;
  #closed = false;

  constructor(options: { clock: Clock; logger: Logger; shared?: { db: Db; intervalMs?: number } }) {
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#shared = options.shared && { db: options.shared.db, intervalMs: options.shared.intervalMs ?? RATE_LIMIT_SYNC_MS };
  }

  get shared(): boolean {
    return this.#shared !== undefined;
  }

  /** The socket's peer (@hono/node-server's conninfo); undefined for in-process requests (`app.request`), which have none. */
  clientAddress(c: Context): string | undefined {
    const env = c.env as { incoming?: unknown; server?: unknown } | undefined;
    if (!env?.incoming && !env?.server) return undefined;
    return getConnInfo(c).remote.address;
  }

  hit(key: string, limit: number): RateLimitStanding {
    const now = this.#clock.now().getTime();
    this.#sweep(now);
    let counter = this.#current(key, now);
    if (!counter) {
      counter = { windowStart: rateLimitWindow(key, now).start, synced: 0, pending: 0 };
      this.#counters.set(key, counter);
    }
    const before = standingOf(counter, limit);
    if (!before.allowed) return before;
    counter.pending += 1;
    if (this.#shared) {
      this.#dirty.add(key);
      this.#startSyncing();
    }
    // admitted: this request is counted, and it may have been the window's last
    return { ...standingOf(counter, limit), allowed: true };
  }

  peek(key: string, limit: number): RateLimitStanding | undefined {
    const counter = this.#current(key, this.#clock.now().getTime());
    return counter && standingOf(counter, limit);
  }

  /**
   * Pushes the pending hits and reads the totals back (shared only; alone it
   * does nothing). Runs on its timer; tests call it to sync at a point they
   * choose. Syncs never overlap.
   */
  sync(): Promise<void> {
    const run = this.#syncs.then(() => this.#syncOnce());
    this.#syncs = run.catch(() => {});
    return run;
  }

  /** Stops the timer; the hits not yet pushed are dropped (they expire within a minute anyway). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#syncs;
  }

  /** The key's counter if it is of the current window. */
  #current(key: string, now: number): Counter | undefined {
    const counter = this.#counters.get(key);
    if (!counter || now >= counter.windowStart + RATE_LIMIT_WINDOW_MS || now < counter.windowStart) return undefined;
    return counter;
  }

  /** Once a window's length, drop the counters of ended windows: memory follows the keys of the last minute. */
  #sweep(now: number): void {
    if (now < this.#nextSweepAt) return;
    this.#nextSweepAt = now + RATE_LIMIT_WINDOW_MS;
    for (const [key, counter] of this.#counters) {
      if (now >= counter.windowStart + RATE_LIMIT_WINDOW_MS) {
        this.#counters.delete(key);
        this.#dirty.delete(key);
      }
    }
  }

  #startSyncing(): void {
    if (this.#timer || this.#closed || !this.#shared) return;
    this.#timer = setInterval(() => {
      this.sync().catch((error: unknown) =>
        this.#logger.warn('rate limit sync failed; counting in process until the next one', { error }),
      );
    }, this.#shared.intervalMs);
    // counting must never keep a process alive
    this.#timer.unref?.();
  }

  async #syncOnce(): Promise<void> {
    if (!this.#shared) return;
    const { db } = this.#shared;
    const now = this.#clock.now();
    const batch: { k: string; w: string; d: number }[] = [];
    const sent = new Map<string, { windowStart: number; delta: number }>();
    for (const key of this.#dirty) {
      const counter = this.#current(key, now.getTime());
      if (!counter || counter.pending === 0) continue;
      batch.push({ k: key, w: new Date(counter.windowStart).toISOString(), d: counter.pending });
      sent.set(key, { windowStart: counter.windowStart, delta: counter.pending });
    }
    this.#dirty.clear();
    if (batch.length === 0) return;
    try {
      for (let i = 0; i < batch.length; i += SYNC_BATCH) {
        // one JSON parameter for the whole batch: the same statement on node-postgres and PGlite
        const result = await db.execute(sql`
          insert into ${rateLimitCounters} (key, window_start, count)
          select k, w, d from jsonb_to_recordset(${JSON.stringify(batch.slice(i, i + SYNC_BATCH))}::jsonb) as t(k text, w timestamptz, d integer)
          on conflict (key, window_start) do update set count = ${rateLimitCounters.count} + excluded.count
          returning key, count`);
        for (const row of (result as unknown as { rows: { key: string; count: number | string }[] }).rows) {
          const pushed = sent.get(row.key)!;
          sent.delete(row.key);
          const counter = this.#counters.get(row.key);
          if (!counter || counter.windowStart !== pushed.windowStart) continue;
          counter.synced = Number(row.count);
          counter.pending -= pushed.delta;
        }
      }
    } catch (error) {
      // not pushed: still pending, pushed again next time
      for (const key of sent.keys()) this.#dirty.add(key);
      throw error;
    }
    // windows end once a minute: older rows are of no instance's use
    if (now.getTime() < this.#nextCleanupAt) return;
    this.#nextCleanupAt = now.getTime() + RATE_LIMIT_WINDOW_MS;
    await db.delete(rateLimitCounters).where(lt(rateLimitCounters.windowStart, new Date(now.getTime() - 2 * RATE_LIMIT_WINDOW_MS)));
  }
}
