import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Db } from '../../src/db/client';
import { createLogger } from '../../src/logger';
import type { Clock } from '../../src/platform';
import type { ChangeRow } from '../../src/stream/feed';
import type { ServerResponse } from 'node:http';
import { openSseOnSocket } from '../../src/node/sse-socket';
import { ChangeHub, type HubDeps, type HubOptions, type StreamSink, type SubscriptionRequest } from '../../src/stream/hub';
import { openSseResponse, STALLED_CLIENT_MS, STREAM_PREAMBLE, UNSENT_HIGH_WATER_BYTES } from '../../src/stream/sse-response';

/**
 * The hub's fan-out against a scripted change log whose reads the test
 * resolves when it chooses, so the interleavings that real databases only
 * produce now and then happen every time: a change committed while a
 * subscriber's catch-up read is in flight, a publish during a fan-out read,
 * a fan-out that re-reads from behind a subscriber. Also the heartbeat's
 * behaviour when the database fails, expiries further ahead than a timer
 * can wait, and clients that stop reading.
 *
 * Reads take their snapshot when called, as a query does; `hold()` keeps
 * later reads pending until `release()`.
 */
const log = vi.hoisted(() => {
  const rows: ChangeRow[] = [];
  const held: (() => void)[] = [];
  let holding = false;
  let reads = 0;
  return {
    latest: () => rows.at(-1)?.seq ?? 0,
    /** The log's rows after `after`, as a writer's own statement returns the ones it logged. */
    rowsAfter: (after: number) => rows.filter((row) => row.seq > after).map((row) => ({ ...row })),
    /** Reads of the log so far. */
    reads: () => reads,
    append(count = 1, entityTypeName = 'vm', padding = 0) {
      for (let i = 0; i < count; i++) {
        const seq = (rows.at(-1)?.seq ?? 0) + 1;
        const entity = { id: `id-${seq}`, name: `e${seq}`, entityTypeName, ...(padding ? { spec: { blob: 'x'.repeat(padding) } } : {}) };
        rows.push({ seq, type: 'entity.created', entityId: entity.id, entityTypeName, entity, at: new Date(), storedCells: null });
      }
    },
    read(after: number, limit: number): Promise<ChangeRow[]> {
      reads++;
      const snapshot = rows.filter((row) => row.seq > after).slice(0, limit).map((row) => ({ ...row }));
      if (!holding) return Promise.resolve(snapshot);
      return new Promise((resolve) => held.push(() => resolve(snapshot)));
    },
    hold() {
      holding = true;
    },
    /** Stops holding new reads; the held ones stay pending until release(). */
    unhold() {
      holding = false;
    },
    pending: () => held.length,
    release() {
      holding = false;
      for (const resolve of held.splice(0)) resolve();
    },
    reset() {
      rows.length = 0;
      held.length = 0;
      holding = false;
      reads = 0;
    },
  };
});

vi.mock('../../src/stream/feed', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../src/stream/feed')>();
  return {
    ...actual,
    latestSeq: async () => log.latest(),
    resumePoint: async (_db: unknown, _envId: string, after: number) => ({
      latest: log.latest(),
      verdict: after <= log.latest() ? 'resumable' : 'beyond',
    }),
    readChanges: (_db: unknown, _envId: string, after: number, limit: number) => log.read(after, limit),
  };
});

/** The token re-check's query, answered from `tokens`. */
const tokenRows: { id: string; expiresAt: Date | null }[] = [];
/** The hub's two heartbeat reads: its environment (joined with its organization, still served) and the tokens still valid. */
const fakeDb = {
  select: () => ({
    from: () => {
      let joined = false;
      const query = {
        innerJoin: () => ((joined = true), query),
        where: () => (joined ? { limit: async () => [{ suspendedAt: null, deletedAt: null }] } : Promise.resolve(tokenRows)),
      };
      return query;
    },
  }),
} as unknown as Db;

interface RecordingSink extends StreamSink {
  texts: string[];
  ids(): number[];
  closed: boolean;
}

function recordingSink(options: { fails?: () => boolean } = {}): RecordingSink {
  const sink: RecordingSink = {
    texts: [],
    closed: false,
    ids: () => sink.texts.flatMap((text) => /^id: (\d+)$/m.exec(text)?.[1] ?? []).map(Number),
    write(chunk) {
      if (options.fails?.()) return false;
      sink.texts.push(new TextDecoder().decode(chunk));
      return true;
    },
    close() {
      sink.closed = true;
    },
  };
  return sink;
}

/** A sink that keeps every chunk it is handed, as handed. */
function chunkSink(): StreamSink & { chunks: Uint8Array[] } {
  const chunks: Uint8Array[] = [];
  return { chunks, write: (chunk) => (chunks.push(chunk), true), close() {} };
}

/**
 * What openSseOnSocket needs of a ServerResponse, recording what reaches its
 * socket: the head and preamble go through the response, then each frame
 * straight to the socket as an HTTP/1.1 chunk. `writableLength` is what
 * waits unsent, set by the test.
 */
function fakeResponse() {
  const onSocket: Buffer[] = [];
  const response = {
    headersSent: false,
    chunkedEncoding: false,
    writableLength: 0,
    ended: false,
    throughResponse: [] as string[],
    onSocket,
    socket: { write: (chunk: Buffer) => (onSocket.push(chunk), true) },
    writeHead() {
      response.headersSent = true;
      response.chunkedEncoding = true;
      return response;
    },
    write(chunk: string | Uint8Array) {
      response.throughResponse.push(typeof chunk === 'string' ? chunk : new TextDecoder().decode(chunk));
      return true;
    },
    end() {
      response.ended = true;
    },
    on() {
      return response;
    },
    /** The socket's bytes read back as chunked encoding: each chunk's text, checked against its size line. */
    chunkTexts(): string[] {
      return onSocket.map((chunk) => {
        const text = chunk.toString('latin1');
        const line = text.indexOf('\r\n');
        const size = parseInt(text.slice(0, line), 16);
        expect(text.slice(line + 2 + size)).toBe('\r\n');
        return chunk.subarray(line + 2, line + 2 + size).toString('utf8');
      });
    },
  };
  return response;
}

const request = (overrides: Partial<SubscriptionRequest> = {}): SubscriptionRequest => ({
  envId: 'env-1',
  projectId: 'project-1',
  after: null,
  filter: { scopeCells: null },
  token: null,
  ...overrides,
});

/** Lets every pending promise callback run (the scripted reads resolve in microtasks). */
const settle = () => new Promise((resolve) => setImmediate(resolve));

function hubWith(options: Partial<HubOptions> = {}, deps: Partial<HubDeps> = {}) {
  const lines: string[] = [];
  const hub = new ChangeHub(
    {
      withDb: (work) => work(fakeDb),
      clock: { now: () => new Date() },
      logger: createLogger({ level: 'debug', sink: (line) => lines.push(line) }),
      ...deps,
    },
    { heartbeatMs: 600_000, ...options },
  );
  hubs.push(hub);
  return { hub, lines };
}

const hubs: ChangeHub[] = [];
afterEach(() => {
  for (const hub of hubs.splice(0)) hub.close();
  log.reset();
  tokenRows.length = 0;
  vi.useRealTimers();
});

describe('the hub against a scripted change log', () => {
  it('a change committed while a catch-up read is in flight reaches that subscriber once it goes live', async () => {
    const { hub } = hubWith();
    log.append(3);
    const live = recordingSink();
    hub.subscribe(request(), live);
    await settle();

    log.hold();
    const joining = recordingSink();
    hub.subscribe(request({ after: 0 }), joining);
    await settle();
    expect(log.pending()).toBe(1);

    // change 4 commits after the catch-up's snapshot; its publish fans out before that read returns
    log.unhold();
    log.append();
    await hub.publish('env-1');
    expect(live.ids()).toEqual([4]);
    log.release();
    await settle();

    expect(joining.ids()).toEqual([1, 2, 3, 4]);
    // and nothing twice afterwards
    log.append();
    await hub.publish('env-1');
    expect(joining.ids()).toEqual([1, 2, 3, 4, 5]);
    expect(live.ids()).toEqual([4, 5]);
  });

  it('a publish that arrives during a fan-out read is read after it, not lost', async () => {
    const { hub } = hubWith();
    const sink = recordingSink();
    hub.subscribe(request(), sink);
    await settle();

    log.hold();
    log.append();
    const first = hub.publish('env-1');
    await settle();
    expect(log.pending()).toBe(1);
    log.unhold();
    log.append();
    const second = hub.publish('env-1');
    log.release();
    await Promise.all([first, second]);
    expect(sink.ids()).toEqual([1, 2]);
  });

  it('a fan-out that reads from behind a subscriber sends it nothing it already has', async () => {
    const { hub } = hubWith();
    log.append(3);
    const early = recordingSink();
    hub.subscribe(request(), early);
    await settle();
    // 4 and 5 commit without a publish; a subscriber from now starts after them
    log.append(2);
    const late = recordingSink();
    hub.subscribe(request(), late);
    await settle();

    log.append();
    await hub.publish('env-1');
    expect(early.ids()).toEqual([4, 5, 6]);
    expect(late.ids()).toEqual([6]);
  });

  it('a filtered subscriber gets only what passes its filter, live and in its catch-up', async () => {
    const { hub } = hubWith();
    log.append(1, 'db');
    const live = recordingSink();
    hub.subscribe(request({ filter: { entityType: 'db', scopeCells: null } }), live);
    await settle();
    log.append(2);
    log.append(1, 'db');
    await hub.publish('env-1');
    expect(live.ids()).toEqual([4]);
    const resumed = recordingSink();
    hub.subscribe(request({ after: 0, filter: { entityType: 'db', scopeCells: null } }), resumed);
    await settle();
    expect(resumed.ids()).toEqual([1, 4]);
  });

  describe('a publish carrying the changes its commit logged', () => {
    it('fans them out without reading the log when they follow on from what the hub last read, in the frames a read gives', async () => {
      const { hub } = hubWith();
      const [carried, read] = [recordingSink(), recordingSink()];
      hub.subscribe(request(), carried);
      await settle();
      // the hub's first fan-out reads: it knows nothing of the log before it
      log.append();
      await hub.publish('env-1', log.rowsAfter(0));
      const readsBefore = log.reads();
      log.append(2);
      await hub.publish('env-1', log.rowsAfter(1));
      expect(log.reads()).toBe(readsBefore);
      expect(carried.ids()).toEqual([1, 2, 3]);
      // the same frames, byte for byte, as a subscriber catching up from the log reads
      hub.subscribe(request({ after: 0 }), read);
      await settle();
      expect(read.texts).toEqual(carried.texts);
    });

    it('reads the log instead when they do not follow on: a change between them and the last read, or a publish out of order', async () => {
      const { hub } = hubWith();
      const sink = recordingSink();
      hub.subscribe(request(), sink);
      await settle();
      log.append();
      await hub.publish('env-1', log.rowsAfter(0));
      // 2 commits and its publish is late: 3's publish finds a gap and reads both
      log.append(2);
      let readsBefore = log.reads();
      await hub.publish('env-1', log.rowsAfter(2));
      expect(log.reads()).toBe(readsBefore + 1);
      expect(sink.ids()).toEqual([1, 2, 3]);
      // 2's publish, late: nothing new, nothing twice
      readsBefore = log.reads();
      await hub.publish('env-1', log.rowsAfter(1).slice(0, 1));
      expect(log.reads()).toBe(readsBefore + 1);
      expect(sink.ids()).toEqual([1, 2, 3]);
    });

    it('reads the log instead when a subscriber filters by cell, whose cells only the database knows', async () => {
      const { hub } = hubWith();
      const [plain, byCell] = [recordingSink(), recordingSink()];
      hub.subscribe(request(), plain);
      hub.subscribe(request({ filter: { cell: 'cell-1', scopeCells: null } }), byCell);
      await settle();
      log.append();
      await hub.publish('env-1', log.rowsAfter(0));
      const readsBefore = log.reads();
      log.append();
      await hub.publish('env-1', log.rowsAfter(1));
      expect(log.reads()).toBe(readsBefore + 1);
      expect(plain.ids()).toEqual([1, 2]);
    });

    it('leaves a subscriber still catching up to its own read, which takes them in before it goes live', async () => {
      const { hub } = hubWith();
      const live = recordingSink();
      hub.subscribe(request(), live);
      await settle();
      log.append();
      await hub.publish('env-1', log.rowsAfter(0));

      log.hold();
      const joining = recordingSink();
      hub.subscribe(request({ after: 0 }), joining);
      await settle();
      expect(log.pending()).toBe(1);
      // 2 commits after the catch-up's snapshot and is carried straight to the live subscriber
      log.unhold();
      log.append();
      await hub.publish('env-1', log.rowsAfter(1));
      expect(live.ids()).toEqual([1, 2]);
      log.release();
      await settle();
      expect(joining.ids()).toEqual([1, 2]);
      log.append();
      await hub.publish('env-1', log.rowsAfter(2));
      expect(joining.ids()).toEqual([1, 2, 3]);
      expect(live.ids()).toEqual([1, 2, 3]);
    });
  });

  it('a change is encoded once: every subscriber it passes is handed the very same bytes', async () => {
    const { hub } = hubWith();
    const [first, second, dbOnly] = [chunkSink(), chunkSink(), chunkSink()];
    hub.subscribe(request(), first);
    hub.subscribe(request(), second);
    hub.subscribe(request({ filter: { entityType: 'db', scopeCells: null } }), dbOnly);
    await settle();
    log.append(1, 'vm');
    log.append(1, 'db');
    await hub.publish('env-1');

    expect(first.chunks).toHaveLength(2);
    expect(second.chunks[0]).toBe(first.chunks[0]);
    expect(second.chunks[1]).toBe(first.chunks[1]);
    // the filtered one gets only what passes, the same bytes as the others
    expect(dbOnly.chunks).toEqual([first.chunks[1]]);
    expect(dbOnly.chunks[0]).toBe(first.chunks[1]);
    expect(new TextDecoder().decode(first.chunks[1])).toMatch(/^id: 2\nevent: entity.created\ndata: \{"type":"entity.created","entity":\{"id":"id-2",/);
  });

  it('on a socket, each frame goes out as one HTTP/1.1 chunk, framed once per change, the right one for every client while another catches up', async () => {
    const { hub } = hubWith();
    log.append(2);
    const a = fakeResponse();
    const b = fakeResponse();
    openSseOnSocket(hub, request(), a as unknown as ServerResponse, {});
    openSseOnSocket(hub, request(), b as unknown as ServerResponse, {});
    await settle();
    expect(a.throughResponse).toEqual([STREAM_PREAMBLE]);

    log.append();
    await hub.publish('env-1');
    // one from the start: its catch-up frames (1, 2, 3) are framed between the live ones' 3 and 4
    const joining = fakeResponse();
    openSseOnSocket(hub, request({ after: 0 }), joining as unknown as ServerResponse, {});
    await settle();
    log.append();
    await hub.publish('env-1');

    const ids = (texts: string[]) => texts.map((text) => Number(/^id: (\d+)$/m.exec(text)![1]));
    expect(ids(a.chunkTexts())).toEqual([3, 4]);
    expect(ids(b.chunkTexts())).toEqual([3, 4]);
    expect(ids(joining.chunkTexts())).toEqual([1, 2, 3, 4]);
    expect(b.onSocket[0]).toBe(a.onSocket[0]);
    expect(b.onSocket[1]).toBe(a.onSocket[1]);
    expect(joining.onSocket[3]).toBe(a.onSocket[1]);
    expect(joining.chunkTexts()[2]).toBe(a.chunkTexts()[0]);
  });

  it('on a socket, a client with over the high-water mark unsent for 30 s is dropped at the next frame; one that catches up in time is kept', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { hub } = hubWith();
    const stalled = fakeResponse();
    const reading = fakeResponse();
    openSseOnSocket(hub, request(), stalled as unknown as ServerResponse, {});
    openSseOnSocket(hub, request(), reading as unknown as ServerResponse, {});
    await settle();
    const publish = async () => {
      log.append();
      await hub.publish('env-1');
    };

    // both fall behind by more than the mark: a burst, not yet a stall
    stalled.writableLength = reading.writableLength = UNSENT_HIGH_WATER_BYTES + 1;
    await publish();
    vi.setSystemTime(Date.now() + STALLED_CLIENT_MS - 1_000);
    // one reads what waited
    reading.writableLength = 0;
    await publish();
    vi.setSystemTime(Date.now() + 2_000);
    await publish();

    expect(stalled.ended).toBe(true);
    expect(reading.ended).toBe(false);
    expect(hub.subscriberCount('env-1')).toBe(1);
    expect(stalled.chunkTexts().map((text) => /^id: (\d+)$/m.exec(text)![1])).toEqual(['1', '2']);
    expect(reading.chunkTexts()).toHaveLength(3);
  });

  it('drops a subscriber whose client is gone at the next write, and frees its slot', async () => {
    const { hub } = hubWith({ maxSubscribersPerEnvironment: 2 });
    let gone = false;
    const leaving = recordingSink({ fails: () => gone });
    hub.subscribe(request(), leaving);
    hub.subscribe(request(), recordingSink());
    await settle();
    expect(() => hub.subscribe(request(), recordingSink())).toThrow(/open streams/);

    gone = true;
    await hub.beat();
    expect(leaving.closed).toBe(true);
    expect(hub.subscriberCount('env-1')).toBe(1);
    hub.subscribe(request(), recordingSink());
    expect(hub.subscriberCount('env-1')).toBe(2);
  });

  it('drops a client that has taken nothing while over a megabyte waited for 30 s; it got every change up to the one it resumes after', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { hub } = hubWith();
    // an SSE response nobody reads: a client whose connection stalled
    const response = openSseResponse(hub, request());
    await settle();
    const publishBig = async (count: number) => {
      for (let i = 0; i < count; i++) {
        log.append(1, 'vm', 64 * 1024);
        await hub.publish('env-1');
      }
    };
    // 2.5 MB waiting, but only just now: a burst, not yet a stall
    await publishBig(40);
    expect(hub.subscriberCount('env-1')).toBe(1);
    vi.setSystemTime(Date.now() + STALLED_CLIENT_MS + 1_000);
    await publishBig(1);
    expect(hub.subscriberCount('env-1')).toBe(0);
    // what was waiting still arrives, then the stream ends; the client resumes after 40 and gets 41 from the log
    const text = await response.text();
    expect([...text.matchAll(/^id: (\d+)$/gm)].map((match) => Number(match[1]))).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
  });

  it('keeps a client that reads through a burst larger than the high-water mark', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { hub } = hubWith();
    const response = openSseResponse(hub, request());
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let received = '';
    const reading = (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        received += value;
      }
    })();
    await settle();
    for (let i = 0; i < 40; i++) {
      log.append(1, 'vm', 64 * 1024);
      await hub.publish('env-1');
    }
    expect(40 * 64 * 1024).toBeGreaterThan(UNSENT_HIGH_WATER_BYTES);
    await settle();
    vi.setSystemTime(Date.now() + STALLED_CLIENT_MS + 1_000);
    log.append();
    await hub.publish('env-1');
    await settle();
    expect(hub.subscriberCount('env-1')).toBe(1);
    expect([...received.matchAll(/^id: (\d+)$/gm)].length).toBe(41);
    await reader.cancel();
    await reading;
  });

  it('a heartbeat whose token check cannot reach the database keeps the streams, logs, and beats the other environments', async () => {
    let failing = false;
    const { hub, lines } = hubWith({}, { withDb: (work) => (failing ? Promise.reject(new Error('connection lost')) : work(fakeDb)) });
    const token = { id: 'token-1', expiresAt: null };
    tokenRows.push(token);
    const first = recordingSink();
    const second = recordingSink();
    hub.subscribe(request({ token }), first);
    hub.subscribe(request({ envId: 'env-2', token }), second);
    await settle();

    failing = true;
    // the heartbeat runs from a timer: a rejection there is an unhandled one, which ends a Node process
    await expect(hub.beat()).resolves.toBeUndefined();
    for (const sink of [first, second]) {
      expect(sink.texts).toContain(': heartbeat\n\n');
      expect(sink.closed).toBe(false);
    }
    expect(lines.some((line) => line.includes('stream access check failed') && line.includes('connection lost'))).toBe(true);

    // once the database answers again, a revoked token still ends its streams
    failing = false;
    tokenRows.length = 0;
    await hub.beat();
    expect(first.closed && second.closed).toBe(true);
    expect(first.texts.at(-1)).toContain('event: end');
  });

  it('a token expiring further ahead than a timer can wait (about 24.8 days) ends its stream at its expiry, not before', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const day = 24 * 60 * 60 * 1000;
    const clock: Clock = { now: () => new Date() };
    const { hub } = hubWith({ heartbeatMs: day }, { clock });
    // an hour past a heartbeat, so the expiry timer ends it, not the heartbeat's re-check
    const token = { id: 'token-1', expiresAt: new Date(Date.now() + 30 * day + 60 * 60 * 1000) };
    tokenRows.push(token);
    const sink = recordingSink();
    hub.subscribe(request({ token }), sink);
    await vi.advanceTimersByTimeAsync(0);

    await vi.advanceTimersByTimeAsync(25 * day);
    expect(sink.closed).toBe(false);
    await vi.advanceTimersByTimeAsync(5 * day);
    expect(sink.closed).toBe(false);
    await vi.advanceTimersByTimeAsync(2 * 60 * 60 * 1000);
    expect(sink.closed).toBe(true);
    expect(sink.texts.at(-1)).toContain('"reason":"token expired"');
  });
});
