import { DurableObject } from 'cloudflare:workers';

/**
 * One instance per rate-limit key (named by the key, src/http/rate-limit.ts):
 * the key's count in its current window, the same for every isolate of the
 * Worker. The Worker computes the window from the key and its clock and
 * passes it in, so this object needs to know neither.
 *
 * The count lives in memory and in the object's SQLite storage (the
 * synchronous KV API): an object left idle may be evicted within seconds,
 * and the window must outlive that. An alarm at the window's end deletes
 * the stored count, so a key that stops calling leaves nothing behind.
 */

interface Window {
  start: number;
  end: number;
  count: number;
}

const STORED = 'window';

// it reads no binding: no Env type, and no import back into the Worker's wiring
export class RateLimiter extends DurableObject {
  #window: Window | undefined;

  /** Counts one request in the window [start, end) unless `limit` are counted already; the count after. */
  async hit(limit: number, start: number, end: number): Promise<{ allowed: boolean; count: number; end: number }> {
    const storage = this.ctx.storage;
    let window = (this.#window ??= storage.kv.get<Window>(STORED));
    // a later window starts afresh; a caller whose clock lags counts into the one already running
    if (!window || start > window.start) {
      window = this.#window = { start, end, count: 0 };
      await storage.setAlarm(end);
    }
    if (window.count >= limit) return { allowed: false, count: window.count, end: window.end };
    window.count += 1;
    storage.kv.put(STORED, window);
    return { allowed: true, count: window.count, end: window.end };
  }

  override async alarm(): Promise<void> {
    const window = (this.#window ??= this.ctx.storage.kv.get<Window>(STORED));
    if (window && Date.now() < window.end) {
      await this.ctx.storage.setAlarm(window.end);
      return;
    }
    this.#window = undefined;
    await this.ctx.storage.deleteAll();
  }
}
