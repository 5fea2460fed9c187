/**
 * What the entity change stream costs the server: CPU time per delivered
 * frame of a `npm start` child, beside a bare `node:net` server writing the
 * same bytes to the same number of sockets (target ≤ 1.5×).
 *
 * M creates (BENCH_HTTP_STREAM_CHANGES, default 500) and K subscribers
 * (BENCH_HTTP_SUBSCRIBERS, default 100), each a real SSE request over HTTP,
 * held by a process of their own (sse-clients.ts) so their reading is not a
 * server's. In each of ROUNDS rounds, one block of creates after another:
 *
 * 1. without: creates in an environment no one streams, the child's CPU time
 *    for the writes themselves;
 * 2. with: as many creates in the environment the K stream, until every
 *    subscriber has read every frame;
 * 3. the floor: net-baseline.ts in its own process, given the app's response
 *    head and one of its frames as the app puts them on the wire (captured
 *    from a raw socket), writes that frame to its K sockets, read by the same
 *    clients, as many times, at the pace the app's creates came.
 *
 * App per frame = (CPU with − CPU without) / (M × K), the hub's one read of
 * the log per change included (shared by the K); floor per frame = its CPU /
 * (M × K).
 *
 * Before the first timed round, WARM_ROUNDS untimed rounds of all three, so
 * each measures its path compiled. The creates' warm-up below runs with no
 * subscriber, so it never reaches the fan-out (the hub's read, the frames,
 * the writes): left cold, the first timed rounds of "with" carried the JIT
 * compiling that path, a one-off cost per process, into the app's per-frame
 * figure (two rounds at ~1.7× the later ones' CPU, read with perf).
 *
 * CPU time is read as ./cpu.ts reads it: each thread's time on a CPU, over
 * the child's threads and its descendants'.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { positiveInteger } from '../harness';
import { cpuMs } from './cpu';
import { atMost, callApi, type HttpTarget, type Row } from './target';

/** Lets the subscribers' catch-up reads and the connections' setup finish before the CPU is read. */
const SETTLE_MS = 500;
/**
 * The three measures take turns, a block of creates each, so load from the
 * rest of the machine and any drift of the create's own cost (a warming JIT,
 * a growing heap) land on all of them alike.
 */
const ROUNDS = 10;
const WARM_UP = 300;
/** Untimed rounds of the three measures before the timed ones (see the header). */
const WARM_ROUNDS = 2;

function forkChild(script: string): ChildProcess {
  return fork(fileURLToPath(new URL(script, import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
}

/** The next message from `child` that has `key`. */
function nextMessage<T>(child: ChildProcess, key: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: Record<string, unknown>) => {
      if (!(key in message)) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(message as T);
    };
    const onExit = (code: number | null) => reject(new Error(`child process exited (${code}) before sending "${key}"`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.send({ stop: true });
  await exited;
}

/** K subscribers, connected; `reach(n)` resolves once each has read n events in all. */
async function startSubscribers(url: string, token: string | undefined, count: number) {
  const child = forkChild('./sse-clients.ts');
  const ready = nextMessage(child, 'ready');
  child.send({ url, token, count });
  await ready;
  return {
    reach: async (events: number) => {
      const reached = nextMessage(child, 'reached');
      child.send({ reach: events });
      await reached;
    },
    stop: () => stopChild(child),
  };
}

/**
 * What the app puts on the wire for a subscriber: its response head with the
 * preamble's chunk, and one change's chunk, read off a raw socket while
 * `change` runs. Both are split at the chunked encoding's own boundaries.
 */
async function captureWire(target: HttpTarget, change: () => Promise<void>): Promise<{ head: Buffer; frame: Buffer }> {
  const { hostname, port } = new URL(target.url);
  const socket: Socket = connect(Number(port), hostname);
  let received = Buffer.alloc(0);
  /** Where each complete chunk after the head ends in `received`. */
  const chunkEnds = (): number[] => {
    const headEnd = received.indexOf('\r\n\r\n');
    if (headEnd === -1) return [];
    if (!received.subarray(0, 12).toString().startsWith('HTTP/1.1 200')) throw new Error(`the stream answered ${received.subarray(0, headEnd).toString()}`);
    const ends: number[] = [];
    for (let at = headEnd + 4; ; ) {
      const line = received.indexOf('\r\n', at);
      if (line === -1) return ends;
      const size = parseInt(received.subarray(at, line).toString(), 16);
      if (Number.isNaN(size)) throw new Error('the stream is not in chunked encoding');
      const end = line + 2 + size + 2;
      if (end > received.length) return ends;
      ends.push((at = end));
    }
  };
  const chunks = (count: number) =>
    new Promise<number[]>((resolve, reject) => {
      const check = () => {
        try {
          const ends = chunkEnds();
          if (ends.length < count) return;
          socket.off('data', check);
          resolve(ends);
        } catch (error) {
          reject(error);
        }
      };
      socket.on('data', check);
      socket.once('error', reject);
      check();
    });
  socket.on('data', (data: Buffer) => (received = Buffer.concat([received, data])));
  socket.write(
    `GET ${target.env}/entities/stream HTTP/1.1\r\nhost: ${hostname}:${port}\r\nauthorization: Bearer ${target.token}\r\naccept: text/event-stream\r\n\r\n`,
  );
  try {
    const [preambleEnd] = await chunks(1);
    // let the subscription finish its catch-up, so the change goes out live
    await new Promise((resolve) => setTimeout(resolve, 200));
    await change();
    const [, frameEnd] = await chunks(2);
    const head = Buffer.from(received.subarray(0, preambleEnd));
    const frame = Buffer.from(received.subarray(preambleEnd, frameEnd));
    if (!frame.includes('\r\nid: ')) throw new Error(`the stream's second chunk is not a change: ${frame.toString()}`);
    return { head, frame };
  } finally {
    socket.destroy();
  }
}

export async function measureStreamCost(target: HttpTarget): Promise<Row[]> {
  const subscribers = positiveInteger('BENCH_HTTP_SUBSCRIBERS', 100);
  const perRound = Math.ceil(positiveInteger('BENCH_HTTP_STREAM_CHANGES', 500) / ROUNDS);
  const changes = perRound * ROUNDS;
  const project = target.env.replace(/\/envs\/[^/]+$/, '');
  const suffix = randomBytes(3).toString('hex');
  const entityType = `bench-stream-${suffix}`;
  // the creates without subscribers go to an environment no one streams: the hub does nothing for them
  const quiet = `${project}/envs/bench-quiet-${suffix}`;
  await callApi(target, 'POST', `${project}/envs`, 201, { name: `bench-quiet-${suffix}` });
  await callApi(target, 'POST', `${project}/entity-types`, 201, { kind: 'EntityType', name: entityType, states: ['new'], initialState: 'new' });
  let created = 0;
  const create = async (env: string) => {
    // fixed width, so every frame has the size of the captured one
    const name = `e-${String(++created).padStart(6, '0')}`;
    await callApi(target, 'POST', `${env}/entities`, 201, { kind: 'Entity', entityType, name });
  };
  const createBlock = async (env: string) => {
    for (let i = 0; i < perRound; i++) await create(env);
  };

  // warm: the create path compiled, the fast path taken (src/modules/entities/fast-paths.ts), in both environments
  for (let i = 0; i < WARM_UP; i++) await create(i % 2 ? quiet : target.env);
  const { head, frame } = await captureWire(target, () => create(target.env));

  const server = forkChild('./net-baseline.ts');
  const app = await startSubscribers(`${target.url}${target.env}/entities/stream`, target.token, subscribers);
  let floor: Awaited<ReturnType<typeof startSubscribers>> | undefined;
  let without = 0;
  let withSubscribers = 0;
  let baseline = 0;
  let paced = 0;
  try {
    const listening = nextMessage<{ port: number }>(server, 'port');
    server.send({ head: head.toString('base64'), frame: frame.toString('base64'), count: subscribers });
    floor = await startSubscribers(`http://127.0.0.1:${(await listening).port}/`, undefined, subscribers);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));

    // every subscriber has read `events` in all once a round's creates have reached it
    let events = 0;
    for (let round = 1; round <= WARM_ROUNDS; round++) {
      await createBlock(quiet);
      const started = performance.now();
      await createBlock(target.env);
      const paceMs = (performance.now() - started) / perRound;
      await app.reach((events += perRound));
      const sent = nextMessage(server, 'sent');
      server.send({ send: perRound, intervalMs: paceMs });
      await Promise.all([sent, floor.reach(events)]);
    }

    for (let round = 1; round <= ROUNDS; round++) {
      events += perRound;
      let before = cpuMs(target.pid);
      await createBlock(quiet);
      let after = cpuMs(target.pid);
      without += after - before;

      before = after;
      const started = performance.now();
      await createBlock(target.env);
      const paceMs = (performance.now() - started) / perRound;
      paced += paceMs;
      await app.reach(events);
      withSubscribers += cpuMs(target.pid) - before;

      before = cpuMs(server.pid!);
      const sent = nextMessage(server, 'sent');
      server.send({ send: perRound, intervalMs: paceMs });
      await Promise.all([sent, floor.reach(events)]);
      baseline += cpuMs(server.pid!) - before;
    }
  } finally {
    await app.stop();
    await floor?.stop();
    await stopChild(server);
  }

  const frames = changes * subscribers;
  const perFrameUs = (ms: number) => (ms * 1000) / frames;
  const ms = (value: number) => `${value.toFixed(0)} ms`;
  return [
    atMost(
      `stream: server CPU per delivered frame (${subscribers} subscribers)`,
      perFrameUs(withSubscribers - without),
      perFrameUs(baseline),
      'µs',
      1.5,
      `${changes} creates × ${subscribers} SSE subscribers (clients in processes of their own), ${frame.length}-byte frames on the wire, ` +
        `in ${ROUNDS} interleaved rounds after ${WARM_ROUNDS} untimed ones; app CPU ${ms(withSubscribers)} with subscribers − ${ms(without)} for as many creates in an unwatched environment, ` +
        `floor ${ms(baseline)}: a bare node:net server writing the same head and frames to ${subscribers} sockets ` +
        `at the app's pace (${(paced / ROUNDS).toFixed(2)} ms a create)`,
    ),
  ];
}
