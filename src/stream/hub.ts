import { and, eq, inArray, isNull } from 'drizzle-orm';
import type { Db } from '../db/client';
import { environments, orgs, serviceTokens } from '../db/schema';
import type { Logger } from '../logger';
import type { Clock } from '../platform';
import { attachCells, changeEvent, latestSeq, resumePoint, needsCells, passes, readChanges, type ChangeFilter, type ChangeRow } from './feed';

/**
 * The entity change stream's fan-out, the same on both hosts: the Node
 * host keeps one hub for the process, the Worker one per environment inside
 * its Durable Object (durable-objects/environment-stream.ts).
 *
 * The change log is the only source. `publish(envId)` says "the log grew";
 * the hub then reads what is new once and hands each change to every live
 * subscriber whose filter it passes. A publish that never arrives costs
 * latency, not changes: the heartbeat reads the log too. A publish may carry
 * the changes its commit logged, as the log holds them: when they follow on
 * from what the hub last read, with no gap, they are what the read would
 * return, and are fanned out without it (#deliverCommitted).
 *
 * A subscriber first catches up from the log on its own (its Last-Event-ID,
 * or the environment's latest sequence), then goes live. A change the hub
 * fans out while a subscriber is still catching up marks it dirty, so its
 * catch-up reads once more before going live: no gap. Every subscriber keeps
 * the sequence it has reached and skips anything at or below it: no
 * duplicate. Sequences commit in order (change-log.ts), so order holds.
 */

export interface StreamSink {
  /**
   * Writes UTF-8 SSE text; false (or a throw) when the client is gone. A
   * change's frame is encoded once, and the same Uint8Array is written to
   * every subscriber it goes to.
   */
  write(chunk: Uint8Array): boolean;
  close(): void;
}

export interface SubscriptionRequest {
  envId: string;
  projectId: string;
  /** The Last-Event-ID: the last sequence the client has; null for "from now". */
  after: number | null;
  filter: ChangeFilter;
  /** The token that opened the stream: it ends when the token is revoked or expires. Null in bootstrap mode. */
  token: { id: string; expiresAt: Date | null } | null;
}

export interface HubOptions {
  heartbeatMs: number;
  maxSubscribersPerEnvironment: number;
  /** Changes read per query. */
  batch: number;
}

export const DEFAULT_HUB_OPTIONS: HubOptions = { heartbeatMs: 15_000, maxSubscribersPerEnvironment: 10_000, batch: 500 };

export class StreamLimitError extends Error {}

/** The longest a timer can wait: setTimeout fires at once (Node: after 1 ms) beyond it. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface HubDeps {
  /** A database handle for one read (Node: the shared one; the Worker: a pool per use). */
  withDb<T>(work: (db: Db) => Promise<T>): Promise<T>;
  clock: Clock;
  logger: Logger;
}

/** Frames are encoded once per change, whatever the number of subscribers it goes to. */
const encoder = new TextEncoder();
const frame = (change: ChangeRow) => encoder.encode(`id: ${change.seq}\nevent: ${change.type}\ndata: ${JSON.stringify(changeEvent(change))}\n\n`);
const HEARTBEAT = encoder.encode(': heartbeat\n\n');

class Subscriber {
  cursor = 0;
  live = false;
  dirty = false;
  closed = false;
  expiryTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly request: SubscriptionRequest,
    readonly sink: StreamSink,
  ) {}

  send(text: string | Uint8Array): boolean {
    if (this.closed) return false;
    try {
      return this.sink.write(typeof text === 'string' ? encoder.encode(text) : text);
    } catch {
      return false;
    }
  }
}

/**
 * The environment's live subscribers, for a fan-out that does not await
 * before it has delivered to them. The others are still catching up, and are
 * marked to read once more before they go live: what goes out now is theirs
 * from their own read.
 */
function liveMarkingTheRestDirty(state: EnvironmentState): Subscriber[] {
  const live: Subscriber[] = [];
  for (const subscriber of state.subscribers) {
    if (subscriber.live) live.push(subscriber);
    else subscriber.dirty = true;
  }
  return live;
}

interface EnvironmentState {
  projectId: string;
  subscribers: Set<Subscriber>;
  /** The sequence the hub has read up to; undefined until its first read. */
  cursor: number | undefined;
  reading: Promise<void> | undefined;
  readAgain: boolean;
}


export class ChangeHub {
  readonly #deps: HubDeps;
  readonly #options: HubOptions;
  readonly #environments = new Map<string, EnvironmentState>();
  #heartbeat: ReturnType<typeof setInterval> | undefined;

  constructor(deps: HubDeps, options: Partial<HubOptions> = {}) {
    this.#deps = deps;
    this.#options = { ...DEFAULT_HUB_OPTIONS, ...options };
  }

  subscriberCount(envId?: string): number {
    if (envId !== undefined) return this.#environments.get(envId)?.subscribers.size ?? 0;
    let total = 0;
    for (const state of this.#environments.values()) total += state.subscribers.size;
    return total;
  }

  /**
   * Registers a subscriber and starts its catch-up. Throws StreamLimitError
   * when the environment has as many as it may hold. Returns the unsubscribe.
   */
  subscribe(request: SubscriptionRequest, sink: StreamSink): () => void {
    let state = this.#environments.get(request.envId);
    if (state && state.subscribers.size >= this.#options.maxSubscribersPerEnvironment) {
      throw new StreamLimitError(`this environment already has ${state.subscribers.size} open streams, the most it serves`);
    }
    if (!state) {
      state = { projectId: request.projectId, subscribers: new Set(), cursor: undefined, reading: undefined, readAgain: false };
      this.#environments.set(request.envId, state);
    }
    const subscriber = new Subscriber(request, sink);
    state.subscribers.add(subscriber);
    this.#startHeartbeat();
    if (request.token?.expiresAt) this.#endAtExpiry(subscriber, request.token.expiresAt);
    void this.#catchUp(subscriber).catch((error) => {
      this.#deps.logger.error('stream catch-up failed', { envId: request.envId, error });
      this.#end(subscriber, 'catch-up failed');
    });
    return () => this.#remove(subscriber);
  }

  /**
   * The log of `envId` grew: read it and fan out. `committed`, when given,
   * are every change of `envId` one commit logged, read back from it by the
   * writer's own statement.
   */
  publish(envId: string, committed?: readonly ChangeRow[]): Promise<void> {
    const state = this.#environments.get(envId);
    if (!state || state.subscribers.size === 0) return Promise.resolve();
    if (state.reading) {
      state.readAgain = true;
      return state.reading;
    }
    if (committed && this.#deliverCommitted(state, committed)) return Promise.resolve();
    state.reading = (async () => {
      try {
        do {
          state.readAgain = false;
          await this.#fanOut(envId, state);
        } while (state.readAgain && state.subscribers.size > 0);
      } catch (error) {
        this.#deps.logger.error('stream fan-out failed', { envId, error });
      } finally {
        state.reading = undefined;
      }
    })();
    return state.reading;
  }

  /**
   * Heartbeat comments, dead clients pruned, tokens re-checked, and the log
   * read in case a publish was lost. Never rejects: it runs from a timer,
   * where a rejection would be unhandled (on Node, the end of the process).
   */
  async beat(): Promise<void> {
    for (const [envId, state] of this.#environments) {
      for (const subscriber of state.subscribers) {
        if (!subscriber.send(HEARTBEAT)) this.#remove(subscriber);
      }
      if (state.subscribers.size === 0) continue;
      try {
        if (!(await this.#recheckEnvironment(envId, state))) continue;
        await this.#recheckTokens(state);
      } catch (error) {
        // the database is out of reach for now: the streams stay, the next beat checks again
        this.#deps.logger.warn('stream access check failed; retried at the next heartbeat', { envId, error });
      }
      void this.publish(envId);
    }
  }

  close(): void {
    clearInterval(this.#heartbeat);
    this.#heartbeat = undefined;
    for (const state of this.#environments.values()) {
      for (const subscriber of state.subscribers) this.#end(subscriber, 'server shutting down');
    }
  }

  #startHeartbeat(): void {
    if (this.#heartbeat) return;
    this.#heartbeat = setInterval(() => void this.beat(), this.#options.heartbeatMs);
    // the Node host must be free to exit with streams open
    (this.#heartbeat as { unref?: () => void }).unref?.();
  }

  async #catchUp(subscriber: Subscriber): Promise<void> {
    const { envId, projectId, after, filter } = subscriber.request;
    await this.#deps.withDb(async (db) => {
      const point = after === null ? null : await resumePoint(db, envId, after);
      if (after === null) {
        subscriber.cursor = await latestSeq(db, envId);
      } else if (point!.verdict === 'resumable') {
        subscriber.cursor = after;
      } else {
        // the changes after the client's point are gone (or it never existed): start over from now
        subscriber.cursor = point!.latest;
        subscriber.send(`event: resync\ndata: ${JSON.stringify({ type: 'resync', reason: 'the resume point is older than the change log keeps; reload the state, then continue from this stream', latestSeq: subscriber.cursor })}\n\n`);
      }
      for (;;) {
        subscriber.dirty = false;
        const changes = await readChanges(db, envId, subscriber.cursor, this.#options.batch);
        if (needsCells(filter)) await attachCells(db, projectId, changes);
        for (const change of changes) {
          if (subscriber.closed) return;
          if (passes(filter, change) && !subscriber.send(frame(change))) return this.#remove(subscriber);
          subscriber.cursor = change.seq;
        }
        // single-threaded: nothing can fan out between this check and going live
        if (changes.length < this.#options.batch && !subscriber.dirty) {
          subscriber.live = true;
          return;
        }
      }
    });
  }

  async #fanOut(envId: string, state: EnvironmentState): Promise<void> {
    // re-reading a little is harmless (each subscriber skips what it has); missing something is not
    let from = state.cursor ?? Number.POSITIVE_INFINITY;
    let anyLive = false;
    for (const subscriber of state.subscribers) {
      if (!subscriber.live) continue;
      anyLive = true;
      if (subscriber.cursor < from) from = subscriber.cursor;
    }
    if (!anyLive) {
      for (const subscriber of state.subscribers) subscriber.dirty = true;
      return;
    }
    await this.#deps.withDb(async (db) => {
      let cursor = from;
      for (;;) {
        const changes = await readChanges(db, envId, cursor, this.#options.batch);
        let cells = false;
        for (const subscriber of state.subscribers) cells ||= needsCells(subscriber.request.filter);
        if (cells) await attachCells(db, state.projectId, changes);
        // from here to the end of the batch nothing awaits, so who is live cannot change under it
        const live = liveMarkingTheRestDirty(state);
        for (const change of changes) this.#deliver(change, live);
        if (changes.length > 0) cursor = changes[changes.length - 1]!.seq;
        if (changes.length < this.#options.batch) break;
      }
      state.cursor = Math.max(cursor, state.cursor ?? 0);
    });
  }

  /**
   * Fans out a commit's own changes without reading the log, when that is
   * exactly what a read would do. Sequences are gapless per environment and
   * commit in order (change-log.ts), so changes numbered from the hub's
   * cursor + 1 on, with no gap, are the log's next rows; every live
   * subscriber must have reached the cursor (a read would start lower
   * otherwise), and no subscriber may filter by cell (the cells are read
   * from the database). Anything else, or no live subscriber, is false: the
   * caller reads the log as before. Nothing here awaits, so the subscribers
   * cannot change under it.
   */
  #deliverCommitted(state: EnvironmentState, committed: readonly ChangeRow[]): boolean {
    const cursor = state.cursor;
    if (cursor === undefined || committed.length === 0) return false;
    for (let i = 0; i < committed.length; i++) if (committed[i]!.seq !== cursor + 1 + i) return false;
    let anyLive = false;
    for (const subscriber of state.subscribers) {
      if (needsCells(subscriber.request.filter)) return false;
      if (subscriber.live && subscriber.cursor < cursor) return false;
      anyLive ||= subscriber.live;
    }
    if (!anyLive) return false;
    const live = liveMarkingTheRestDirty(state);
    for (const change of committed) this.#deliver(change, live);
    state.cursor = committed[committed.length - 1]!.seq;
    return true;
  }

  /**
   * One change to the live subscribers: its frame is encoded once, on the
   * first subscriber it passes, and the very same bytes go to every other
   * (a sink may frame them once for all, as sse-socket.ts does per chunk).
   * The loop is the fan-out's only per-subscriber work: a cursor check, the
   * filter, one write.
   */
  #deliver(change: ChangeRow, live: readonly Subscriber[]): void {
    const seq = change.seq;
    let text: Uint8Array | undefined;
    for (const subscriber of live) {
      if (subscriber.closed || seq <= subscriber.cursor) continue;
      if (passes(subscriber.request.filter, change) && !subscriber.send((text ??= frame(change)))) {
        this.#remove(subscriber);
        continue;
      }
      subscriber.cursor = seq;
    }
  }

  /**
   * Whether the environment is still served: it exists and its organization
   * is neither suspended nor deleted. When not, every stream of it ends, as
   * its next request would be refused (404, or 403 org_suspended).
   */
  async #recheckEnvironment(envId: string, state: EnvironmentState): Promise<boolean> {
    const [row] = await this.#deps.withDb((db) =>
      db
        .select({ suspendedAt: orgs.suspendedAt, deletedAt: orgs.deletedAt })
        .from(environments)
        .innerJoin(orgs, eq(orgs.id, environments.orgId))
        .where(eq(environments.id, envId))
        .limit(1),
    );
    const reason = !row || row.deletedAt ? 'environment deleted' : row.suspendedAt ? 'organization suspended' : undefined;
    if (reason === undefined) return true;
    for (const subscriber of state.subscribers) this.#end(subscriber, reason);
    return false;
  }

  async #recheckTokens(state: EnvironmentState): Promise<void> {
    const byToken = new Map<string, Subscriber[]>();
    for (const subscriber of state.subscribers) {
      const token = subscriber.request.token;
      if (token) byToken.set(token.id, [...(byToken.get(token.id) ?? []), subscriber]);
    }
    if (byToken.size === 0) return;
    const now = this.#deps.clock.now();
    const valid = await this.#deps.withDb((db) =>
      db
        .select({ id: serviceTokens.id, expiresAt: serviceTokens.expiresAt })
        .from(serviceTokens)
        .where(and(inArray(serviceTokens.id, [...byToken.keys()]), isNull(serviceTokens.revokedAt))),
    );
    const stillValid = new Set(valid.filter((t) => t.expiresAt === null || t.expiresAt > now).map((t) => t.id));
    for (const [id, subscribers] of byToken) {
      if (!stillValid.has(id)) for (const subscriber of subscribers) this.#end(subscriber, 'token revoked or expired');
    }
  }

  #endAtExpiry(subscriber: Subscriber, expiresAt: Date): void {
    const wait = Math.max(0, expiresAt.getTime() - this.#deps.clock.now().getTime());
    // a timer waits at most 2^31 - 1 ms (about 24.8 days); a later expiry is waited for in steps
    subscriber.expiryTimer =
      wait > MAX_TIMER_MS
        ? setTimeout(() => this.#endAtExpiry(subscriber, expiresAt), MAX_TIMER_MS)
        : setTimeout(() => this.#end(subscriber, 'token expired'), wait);
  }

  #end(subscriber: Subscriber, reason: string): void {
    if (subscriber.closed) return;
    subscriber.send(`event: end\ndata: ${JSON.stringify({ type: 'end', reason })}\n\n`);
    this.#remove(subscriber);
  }

  #remove(subscriber: Subscriber): void {
    if (subscriber.closed) return;
    subscriber.closed = true;
    clearTimeout(subscriber.expiryTimer);
    try {
      subscriber.sink.close();
    } catch {
      // already gone
    }
    const state = this.#environments.get(subscriber.request.envId);
    if (!state) return;
    state.subscribers.delete(subscriber);
    if (state.subscribers.size === 0) this.#environments.delete(subscriber.request.envId);
    if (this.#environments.size === 0 && this.#heartbeat) {
      clearInterval(this.#heartbeat);
      this.#heartbeat = undefined;
    }
  }
}
