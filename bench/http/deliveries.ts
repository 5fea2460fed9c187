/**
 * The run engine of a `npm start` child (QUEUE_DRIVER=pg, its job runner 8
 * attempts in flight), over real HTTP, against a receiver in this process
 * (node:http on 127.0.0.1, keep-alive, answering 200 at once):
 *
 * - trigger → first delivery: from sending `POST ENV/entities/{e}/actions/{a}`
 *   to the receiver holding the request, one run at a time, beside a bare
 *   `fetch` of the same receiver (p50, target ≤ 3×);
 * - deliveries per second: a backlog of runs drained, beside a bare fetch
 *   loop with the same concurrency and count to the same receiver (target
 *   ≥ 0.5×). The receiver holds the runner's first attempts unanswered, so
 *   its 8 slots are taken, while runs are triggered (8 requests in flight)
 *   for HOLD_MS or until BENCH_HTTP_RUNS are; then it answers them, and the
 *   time to the last run's arrival is what is measured: the runner alone,
 *   not racing the triggers for the server's CPU. Every run must arrive; a
 *   webhook-id seen twice is reported.
 *
 * Beside each, not a target: the least work the row's path must do, written
 * bare against the same database (`leastWork` below): for the trigger, a
 * child process of its own, as the app is (./least-trigger.ts), taking an
 * HTTP request in, reading the entity, inserting and committing the run, and
 * sending the HTTP request out; for the deliveries, the bare fetch loop in
 * this process with each delivery's outcome written and committed. They show how
 * much of a target the database writes alone leave on this machine. The
 * trigger's least work is also measured kept whole: with the guarantees the
 * app's trigger keeps, each in its least form (`triggerWhole`).
 *
 * The child must be started with OUTBOUND_ALLOWED_HOSTS=127.0.0.1: the
 * outbound guard refuses loopback receivers otherwise (any port of that host
 * passes, so the receiver's port need not be known in advance). Its
 * DELIVERY_ATTEMPT_TIMEOUT_SECONDS must stay above HOLD_MS and a trigger's
 * time (the default, 10 s, does), or the held attempts time out and are made
 * again.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { positiveInteger } from '../harness';
import { cpuMs } from './cpu';
import { deleteLeastRuns, dropLeastTables, LEAST_RUNS_TABLE, type RungName } from './least-trigger';
import { startLeastTrigger } from './server';
import { atLeast, atMost, callApi, type HttpTarget, type Row } from './target';

/** The job runner's attempts in flight (src/node/job-runner.ts): the bare loop matches it. */
const IN_FLIGHT = 8;
/** A drain that gets no delivery for this long has lost runs: the bench says so instead of waiting forever. */
const STALL_MS = 30_000;
/**
 * How long runs are triggered while the receiver holds the runner's attempts:
 * with the triggers still in flight then, under the default attempt timeout
 * (10 s). A machine that triggers fewer than BENCH_HTTP_RUNS in that time
 * times a smaller backlog; the row says how many.
 */
const HOLD_MS = 7_000;

/**
 * The rungs of the trigger's least work (./least-trigger.ts) measured beside
 * the app, lowest first, each printed with what it adds to the rung below.
 */
const RUNGS: { rung: RungName; label: string; adds: string }[] = [
  { rung: 'relay', label: 'the two HTTP crossings alone', adds: 'a request taken, 202, then the receiver fetched: no database' },
  { rung: 'read', label: 'and the read', adds: 'the entity read by name' },
  { rung: 'plain', label: 'least work', adds: 'a run inserted and committed: what the row must do' },
  { rung: 'outbox', label: 'and the outbox', adds: 'the token hashed, the access epoch read with the entity, and the job row in the run\'s statement' },
  { rung: 'signed', label: 'and the callback token', adds: 'a callback token signed by fast-jwt, as the Node host signs it, in the payload' },
  { rung: 'whole', label: 'least work kept whole', adds: 'a request id and a log line, and the webhook before the 202' },
  { rung: 'appread', label: "and the app's read", adds: "the app's own read in place of the ladder's: the access epoch, the entity and the action, every column" },
  { rung: 'stored', label: "and the app's insert", adds: "the app's own insert in place of the ladder's: the run the app stores, with its job, into the app's tables" },
];

interface Receiver {
  url: string;
  /** Resolves with the arrival time (performance.now()) of the first request carrying this webhook-id. */
  arrival(webhookId: string): Promise<number>;
  /** Every webhook-id received so far, with how many requests carried it. */
  deliveries: Map<string, number>;
  lastArrival(): number;
  /** Leaves webhook requests unanswered until release(). */
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const waiting = new Map<string, (at: number) => void>();
  const arrived = new Map<string, number>();
  const deliveries = new Map<string, number>();
  let last = 0;
  /** The answers the receiver owes, while it holds. */
  let held: (() => void)[] | undefined;
  const release = () => {
    for (const answer of held ?? []) answer();
    held = undefined;
  };
  const server = createServer((req, res) => {
    const at = performance.now();
    const id = req.headers['webhook-id'];
    req.resume();
    const answer = () => res.end();
    if (held && typeof id === 'string') held.push(answer);
    else req.on('end', answer);
    if (typeof id !== 'string') return;
    last = at;
    const seen = deliveries.get(id) ?? 0;
    deliveries.set(id, seen + 1);
    if (seen > 0) return;
    const waiter = waiting.get(id);
    if (waiter) {
      waiting.delete(id);
      waiter(at);
    } else arrived.set(id, at);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrival: (id) => {
      const at = arrived.get(id);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => waiting.set(id, resolve));
    },
    deliveries,
    lastArrival: () => last,
    hold: () => {
      held = [];
    },
    release,
    close: () =>
      new Promise((resolve) => {
        release();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Resolves once every id has arrived; rejects, naming how many are missing, once STALL_MS pass without an arrival. */
async function allArrived(receiver: Receiver, ids: string[]): Promise<void> {
  let stall: ReturnType<typeof setInterval> | undefined;
  const stalled = new Promise<never>((_, reject) => {
    let count = -1;
    stall = setInterval(() => {
      const now = receiver.deliveries.size;
      if (now === count) {
        const missing = ids.filter((id) => !receiver.deliveries.has(id)).length;
        reject(new Error(`deliveries: ${missing} of ${ids.length} runs not delivered after ${STALL_MS / 1000} s without a delivery`));
      }
      count = now;
    }, STALL_MS);
  });
  try {
    await Promise.race([Promise.all(ids.map((id) => receiver.arrival(id))), stalled]);
  } finally {
    clearInterval(stall);
  }
}

/** The monotonic clock V8's CPU profiles are stamped with, in µs: a profile can be cut to a window with it. */
const monotonicMicros = () => Number(process.hrtime.bigint() / 1000n);

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
const summary = (samples: number[]) => {
  const sorted = [...samples].sort((a, b) => a - b);
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
};

/** Up to `count` calls of `work`, `concurrency` at a time, starting none once `enough()` says so. */
async function inParallel(count: number, concurrency: number, work: () => Promise<void>, enough = () => false): Promise<void> {
  let started = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (started < count && !enough()) {
        started++;
        await work();
      }
    }),
  );
}

/**
 * The least work of the two rows, bare, on the app's database: `pg` (a pool
 * of the app's size, named statements) and node:http.
 *
 * - `trigger(rung)`: a fetch to the bare node:http server of
 *   ./least-trigger.ts, a child process of its own, at one rung of its ladder
 *   (LADDER there): from the two HTTP crossings alone (`relay`), through the
 *   entity read, the run committed (`plain`: the row's least work), the
 *   outbox and the token check, the callback token, to the least work kept
 *   whole (`whole`), and then the app's own read (`appread`) and insert
 *   (`stored`) in place of the ladder's, each rung one step more than the one below;
 *   resolves with the run's id. The ladder writes tables of its own, dropped
 *   at the end; the `stored` rung writes the app's, and its runs are deleted
 *   at the end.
 * - `record(id)`: what a delivery must write once answered: one row,
 *   committed, from this process beside its bare fetch.
 */
async function leastWork(databaseUrl: string, envId: string, names: { entity: string; action: string }, receiverUrl: string, token: string) {
  const logDir = await mkdtemp(join(tmpdir(), 'cellplane-least-work-'));
  const child = await startLeastTrigger({
    databaseUrl,
    envId,
    entityName: names.entity,
    actionName: names.action,
    receiverUrl,
    logFile: join(logDir, 'least-work-trigger.log'),
  });
  // the child is ready once its tables exist: the loop's inserts need nothing more
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 10 });
  const triggerAt = async (path: string, headers: Record<string, string>): Promise<string> => {
    const res = await fetch(`${child.url}${path}`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json', ...headers } });
    if (res.status !== 202) throw new Error(`least-work trigger: ${res.status} ${await res.text()}`);
    return ((await res.json()) as { id: string }).id;
  };
  return {
    trigger: (rung: RungName) => triggerAt(`/${rung}`, { authorization: `Bearer ${token}` }),
    record: async (): Promise<void> => {
      await pool.query({ name: 'least_record', text: `insert into ${LEAST_RUNS_TABLE} (id, entity_id, body) values ($1, $1, $2)`, values: [crypto.randomUUID(), '{"outcome":"delivered"}'] });
    },
    close: async () => {
      await child.stop();
      await dropLeastTables(pool);
      await deleteLeastRuns(pool);
      await pool.end();
      await rm(logDir, { recursive: true, force: true });
    },
  };
}

export async function measureDeliveries(target: HttpTarget, databaseUrl: string, envId: string): Promise<Row[]> {
  const latencyRuns = positiveInteger('BENCH_HTTP_LATENCY_RUNS', 200);
  const maxRuns = positiveInteger('BENCH_HTTP_RUNS', 2000);
  const project = target.env.replace(/\/envs\/[^/]+$/, '');
  // names of their own, so a second call on the same tenant conflicts with nothing
  const suffix = randomBytes(3).toString('hex');
  const entityType = `bench-vm-${suffix}`;
  const receiver = await startReceiver();
  let closeLeast: (() => Promise<void>) | undefined;
  try {
    await callApi(target, 'POST', `${project}/entity-types`, 201, { kind: 'EntityType', name: entityType, states: ['new'], initialState: 'new' });
    await callApi(target, 'POST', `${target.env}/entities`, 201, { kind: 'Entity', entityType, name: 'web-1' });
    // as bench/runs.ts: a receiver would need the callback to complete the run, so the payload carries it
    await callApi(target, 'POST', `${project}/actions`, 201, {
      kind: 'Action',
      name: 'deploy',
      entityType,
      trigger: {
        type: 'webhook',
        url: `${receiver.url}/deploy`,
        payload: { vm: '{{ entity.name }}', callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}' },
      },
    });
    const triggerPath = `${target.env}/entities/web-1/actions/deploy`;
    const least = await leastWork(databaseUrl, envId, { entity: 'web-1', action: 'deploy' }, receiver.url, target.token);
    closeLeast = least.close;
    const trigger = async () => ((await callApi(target, 'POST', triggerPath, 202, {})) as { id: string }).id;
    const bareFetch = async () => {
      const res = await fetch(`${receiver.url}/bare`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
      await res.arrayBuffer();
    };

    // trigger → first delivery, one run at a time, each beside a bare fetch
    const warm = Math.max(20, Math.floor(latencyRuns / 5));
    for (let i = 0; i < warm; i++) {
      await receiver.arrival(await trigger());
      await bareFetch();
      for (const { rung } of RUNGS) await receiver.arrival(await least.trigger(rung));
    }
    const latency: number[] = [];
    /** The trigger's own answer: the part of the latency that is a request, not the runner. */
    const answered: number[] = [];
    const bare: number[] = [];
    const rungLatency = new Map<RungName, number[]>(RUNGS.map(({ rung }) => [rung, []]));
    for (let i = 0; i < latencyRuns; i++) {
      let started = performance.now();
      const id = await trigger();
      answered.push(performance.now() - started);
      latency.push((await receiver.arrival(id)) - started);
      started = performance.now();
      await bareFetch();
      bare.push(performance.now() - started);
      for (const { rung } of RUNGS) {
        started = performance.now();
        rungLatency.get(rung)!.push((await receiver.arrival(await least.trigger(rung))) - started);
      }
    }

    // deliveries per second: a backlog, queued while the runner's slots wait on held attempts
    const ids: string[] = [];
    receiver.hold();
    const triggering = performance.now();
    await inParallel(
      maxRuns,
      IN_FLIGHT,
      async () => {
        ids.push(await trigger());
      },
      () => performance.now() - triggering > HOLD_MS,
    );
    const queued = performance.now();
    const heldOrDelivered = ids.filter((id) => receiver.deliveries.has(id)).length;
    const drainCpuStart = cpuMs(target.pid);
    const drainFrom = monotonicMicros();
    receiver.release();
    await allArrived(receiver, ids);
    const drainTo = monotonicMicros();
    const drainCpu = cpuMs(target.pid) - drainCpuStart;
    const runs = ids.length;
    const backlog = runs - heldOrDelivered;
    if (backlog === 0) throw new Error('deliveries: no run was left queued behind the held attempts');
    const delivered = backlog / ((receiver.lastArrival() - queued) / 1000);
    const triggered = runs / ((queued - triggering) / 1000);
    // a duplicate would be a repeated attempt: give one a moment to show up
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const duplicates = ids.filter((id) => receiver.deliveries.get(id)! > 1).length;

    const bareStarted = performance.now();
    await inParallel(backlog, IN_FLIGHT, bareFetch);
    const fetched = backlog / ((performance.now() - bareStarted) / 1000);
    const recordedStarted = performance.now();
    await inParallel(backlog, IN_FLIGHT, async () => {
      await bareFetch();
      await least.record();
    });
    const recorded = backlog / ((performance.now() - recordedStarted) / 1000);

    const l = summary(latency);
    const a = summary(answered);
    const b = summary(bare);
    const rungs = RUNGS.map((rung) => ({ ...rung, p: summary(rungLatency.get(rung.rung)!) }));
    return [
      atMost(
        'trigger → first delivery p50',
        l.p50,
        b.p50,
        'ms',
        3,
        `${latencyRuns} runs one at a time after ${warm} warm-up; p99 ${l.p99.toFixed(2)} ms; the trigger's 202 alone p50 ${a.p50.toFixed(2)} ms; floor: a bare fetch of the same receiver (p99 ${b.p99.toFixed(2)} ms)`,
      ),
      atLeast(
        `webhook deliveries/s (Node job runner, ${IN_FLIGHT} in flight)`,
        delivered,
        fetched,
        'deliveries/s',
        0.5,
        `${runs} runs (of at most ${maxRuns}) triggered ${IN_FLIGHT} at a time in ${((queued - triggering) / 1000).toFixed(1)} s (${triggered.toFixed(0)}/s) ` +
          `while the receiver held the runner's first ${heldOrDelivered} attempts; timed: the ${backlog} queued behind them, from answering those until the last arrived; ` +
          `every run delivered, ${duplicates} twice or more; floor: ${backlog} bare fetches, ${IN_FLIGHT} in flight; ` +
          `the server's CPU over the drain: ${((drainCpu / backlog) * 1000).toFixed(0)} µs per delivery (monotonic µs ${drainFrom}–${drainTo}, to cut a profile to it)`,
      ),
      ...rungs.map(({ rung, label, adds, p }, i) => {
        const below = rungs[i - 1]?.p.p50;
        const step = below === undefined ? adds : `the row above and ${adds}: ${p.p50 - below >= 0 ? '+' : ''}${(p.p50 - below).toFixed(2)} ms`;
        return atMost(
          `  ${label}: trigger → delivery p50`,
          p.p50,
          b.p50,
          'ms',
          3,
          `not a target: a bare node:http server in a child process (rung "${rung}"), ${step}; p99 ${p.p99.toFixed(2)} ms; the app ÷ this: ${(l.p50 / p.p50).toFixed(2)}×`,
        );
      }),
      atLeast(
        '  least work: deliveries/s with a write each',
        recorded,
        fetched,
        'deliveries/s',
        0.5,
        `not a target: the bare fetch loop, ${IN_FLIGHT} in flight, each delivery followed by one committed insert; the app ÷ this: ${(delivered / recorded).toFixed(2)}×`,
      ),
    ];
  } finally {
    await closeLeast?.();
    await receiver.close();
  }
}
