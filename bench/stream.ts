/**
 * The entity change stream's fan-out on the Node host: publish → receive
 * latency with 1, 100 and 1,000 subscribers, each a real SSE client over
 * HTTP on 127.0.0.1. The target: p99 at 1,000 subscribers within 2×
 * of one subscriber.
 *
 * One sample is one subscriber receiving one change: from the moment the
 * write that logged it returned (the commit, then the in-process publish)
 * to the moment that subscriber's parser has the event. The subscribers run
 * in a child process (bench/stream-clients.ts), so their reading does not
 * queue behind the server on one event loop; both read one clock
 * (performance.timeOrigin + performance.now()).
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createApp } from '../src/app';
import { loadConfig } from '../src/config';
import { createLogger } from '../src/logger';
import { platformWithJobRunner } from '../src/node/platform';
import { BENCH_RATE_LIMIT, createBenchTenant, expectStatus, json, positiveInteger, type Benchmark } from './harness';

/** A process holding `count` subscribers (bench/stream-clients.ts). */
async function startSubscribers(url: string, token: string, count: number) {
  const child = fork(fileURLToPath(new URL('./stream-clients.ts', import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const waiting = new Map<number, (times: number[]) => void>();
  const arrived = new Map<number, number[]>();
  let ready!: () => void;
  const isReady = new Promise<void>((resolve) => (ready = resolve));
  child.on('message', (message: { ready?: true; change?: number; times?: number[] }) => {
    if (message.ready) return ready();
    const waiter = waiting.get(message.change!);
    if (waiter) {
      waiting.delete(message.change!);
      waiter(message.times!);
    } else arrived.set(message.change!, message.times!);
  });
  child.send({ url, token, count });
  await isReady;
  return {
    /** Every subscriber's receive time (performance.timeOrigin-based) of the n-th change since they subscribed. */
    received(change: number): Promise<number[]> {
      const times = arrived.get(change);
      if (times) return Promise.resolve(times);
      return new Promise((resolve) => waiting.set(change, resolve));
    },
    async close() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ stop: true });
      await exited;
    },
  };
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
const ms = (value: number) => value.toFixed(2).padStart(9);

export const stream: Benchmark = {
  name: 'stream',
  async run(context) {
    const { database, label } = context;
    const rounds = Math.min(positiveInteger('BENCH_ITERATIONS', 2000), 200);
    const config = loadConfig({
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      AUTH_SECRET: randomBytes(32).toString('hex'),
      API_BASE_URL: 'https://cellplane.example.com',
      ...BENCH_RATE_LIMIT,
    });
    const logger = createLogger({ level: 'info', secrets: [config.encryptionKey, config.authSecret], sink: () => {} });
    const { platform, hub } = platformWithJobRunner({ config, logger, db: database.db, namedStatements: database.kind === 'postgres' });
    const app = createApp(platform);
    const server = await new Promise<ServerType>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const results: { subscribers: number; p50: number; p99: number; mean: number }[] = [];
    try {
      const { org, projects } = await createBenchTenant({ ...context, app }, 'bench-stream', ['stream']);
      const project = projects.stream!;
      const envPath = `/${org.slug}/${project.slug}/envs/default`;
      await expectStatus(
        app.request(`/${org.slug}/${project.slug}/entity-types`, json('POST', { kind: 'EntityType', name: 'vm', states: ['a'], initialState: 'a' }, project.token)),
        201,
        'entity type',
      );
      let n = 0;
      for (const count of [1, 100, 1000]) {
        const subscribers = await startSubscribers(`${base}${envPath}/entities/stream`, project.token, count);
        const samples: number[] = [];
        const warm = 10;
        for (let round = 0; round < warm + rounds; round++) {
          const name = `vm-${++n}`;
          const response = await app.request(`${envPath}/entities`, json('POST', { kind: 'Entity', entityType: 'vm', name }, project.token));
          // the commit is done and the publish under way when the response is back
          const written = performance.timeOrigin + performance.now();
          await expectStatus(response, 201, 'create');
          const arrivals = await subscribers.received(round + 1);
          if (round >= warm) for (const at of arrivals) samples.push(at - written);
        }
        await subscribers.close();
        samples.sort((a, b) => a - b);
        results.push({ subscribers: count, p50: percentile(samples, 0.5), p99: percentile(samples, 0.99), mean: samples.reduce((a, b) => a + b, 0) / samples.length });
        // let the hub notice the closed connections before the next size
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    } finally {
      hub.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }

    console.log('Cellplane change stream benchmark: stream');
    console.log(`  host:       ${label}`);
    console.log(`  node:       ${process.version} (${process.platform}/${process.arch})`);
    console.log(`  method:     ${rounds} changes per size after 10 warm-up, each an entity create through the app; the subscribers real SSE clients over HTTP on 127.0.0.1, in a process of their own (bench/stream-clients.ts)\n`);
    console.log('subscribers      p50 ms    p99 ms   mean ms');
    console.log('--------------------------------------------');
    for (const r of results) console.log(`${String(r.subscribers).padStart(11)} ${ms(r.p50)} ${ms(r.p99)} ${ms(r.mean)}`);
    const one = results[0]!;
    console.log('\nRatios to one subscriber:');
    for (const r of results.slice(1)) {
      const verdict = r.subscribers === 1000 ? `; target p99 <= 2x: ${r.p99 / one.p99 <= 2 ? 'PASS' : 'MISS'}` : '';
      console.log(`  ${String(r.subscribers).padStart(5)} subscribers: p50 ${(r.p50 / one.p50).toFixed(2)}x, p99 ${(r.p99 / one.p99).toFixed(2)}x${verdict}`);
    }
  },
};
