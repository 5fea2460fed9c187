/**
 * The run engine on the Node host (QUEUE_DRIVER=pg), against a local receiver:
 *
 * - trigger → first delivery: from sending `POST .../actions/{action}` to the
 *   receiver holding the request, one run at a time, beside a bare `fetch` of
 *   the same receiver;
 * - deliveries per second: N runs already triggered, drained by the job
 *   runner (8 attempts in flight), beside a bare fetch loop with the same
 *   concurrency to the same receiver.
 *
 * Both are printed as ratios to their bare-fetch baseline of the same run.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { createApp } from '../src/app';
import { loadConfig } from '../src/config';
import { createLogger } from '../src/logger';
import { DEFAULT_JOB_RUNNER_OPTIONS } from '../src/node/job-runner';
import { platformWithJobRunner } from '../src/node/platform';
import { BENCH_RATE_LIMIT, createBenchTenant, expectStatus, json, positiveInteger, type Benchmark } from './harness';

interface Receiver {
  url: string;
  host: string;
  /** Resolves when a request with this webhook-id arrives. */
  arrival(webhookId: string): Promise<number>;
  received(): number;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const waiting = new Map<string, (at: number) => void>();
  const arrived = new Map<string, number>();
  let count = 0;
  const server = createServer((req, res) => {
    const at = performance.now();
    count++;
    const id = req.headers['webhook-id'];
    req.resume();
    req.on('end', () => res.end());
    if (typeof id === 'string') {
      const waiter = waiting.get(id);
      if (waiter) {
        waiting.delete(id);
        waiter(at);
      } else arrived.set(id, at);
    }
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    arrival: (id) => {
      const at = arrived.get(id);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => waiting.set(id, resolve));
    },
    received: () => count,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
const summary = (samples: number[]) => {
  const sorted = [...samples].sort((a, b) => a - b);
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), mean: samples.reduce((a, b) => a + b, 0) / samples.length };
};
const ms = (value: number) => value.toFixed(2).padStart(9);

export const runs: Benchmark = {
  name: 'runs',
  async run(context) {
    const { database, label } = context;
    const latencyRuns = Math.min(positiveInteger('BENCH_ITERATIONS', 2000), 300);
    const throughputRuns = 500;
    const receiver = await startReceiver();
    const config = loadConfig({
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      AUTH_SECRET: randomBytes(32).toString('hex'),
      OUTBOUND_ALLOWED_HOSTS: receiver.host,
      API_BASE_URL: 'https://cellplane.example.com',
      ...BENCH_RATE_LIMIT,
    });
    const logger = createLogger({ level: 'info', secrets: [config.encryptionKey, config.authSecret], sink: () => {} });
    const { platform, jobs } = platformWithJobRunner({ config, logger, db: database.db, namedStatements: database.kind === 'postgres' });
    const app = createApp(platform);
    const ctx = { ...context, app };
    try {
      const { org, projects } = await createBenchTenant(ctx, 'bench-runs', ['runs']);
      const project = projects.runs!;
      const base = `/${org.slug}/${project.slug}`;
      await expectStatus(
        app.request(`${base}/entity-types`, json('POST', { kind: 'EntityType', name: 'vm', states: ['new', 'ready'], initialState: 'new' }, project.token)),
        201,
        'entity type',
      );
      await expectStatus(app.request(`${base}/envs/default/entities`, json('POST', { kind: 'Entity', entityType: 'vm', name: 'web-1' }, project.token)), 201, 'entity');
      await expectStatus(
        app.request(
          `${base}/actions`,
          json(
            'POST',
            {
              kind: 'Action',
              name: 'deploy',
              entityType: 'vm',
              trigger: {
                type: 'webhook',
                url: `${receiver.url}/deploy`,
                payload: { vm: '{{ entity.name }}', callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}' },
              },
            },
            project.token,
          ),
        ),
        201,
        'action',
      );
      const triggerUrl = `${base}/envs/default/entities/web-1/actions/deploy`;
      const trigger = async () => (await expectStatus(app.request(triggerUrl, json('POST', {}, project.token)), 202, 'trigger')) as { id: string };

      // trigger → first delivery, one at a time, the runner woken by the trigger as on `npm start`
      jobs.start();
      const bareFetch = async () => {
        const res = await fetch(`${receiver.url}/bare`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
        await res.arrayBuffer();
      };
      const warm = Math.max(20, Math.floor(latencyRuns / 5));
      for (let i = 0; i < warm; i++) {
        const run = await trigger();
        await receiver.arrival(run.id);
        await bareFetch();
      }
      const latency: number[] = [];
      const bare: number[] = [];
      for (let i = 0; i < latencyRuns; i++) {
        let started = performance.now();
        const run = await trigger();
        latency.push((await receiver.arrival(run.id)) - started);
        started = performance.now();
        await bareFetch();
        bare.push(performance.now() - started);
      }
      await jobs.stop();

      // deliveries per second: a backlog drained by the runner
      const backlog: string[] = [];
      for (let i = 0; i < throughputRuns; i++) backlog.push((await trigger()).id);
      let started = performance.now();
      await jobs.drain();
      await Promise.all(backlog.map((id) => receiver.arrival(id)));
      const drainSeconds = (performance.now() - started) / 1000;
      const concurrency = DEFAULT_JOB_RUNNER_OPTIONS.concurrency;
      let next = 0;
      started = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next++ < throughputRuns) await bareFetch();
        }),
      );
      const bareSeconds = (performance.now() - started) / 1000;

      const l = summary(latency);
      const b = summary(bare);
      console.log('Cellplane run engine benchmark: runs');
      console.log(`  host:       ${label}`);
      console.log(`  node:       ${process.version} (${process.platform}/${process.arch})`);
      console.log(`  receiver:   node:http on 127.0.0.1, answers 200 at once; deliveries through the Node job runner (QUEUE_DRIVER=pg)`);
      console.log(`  latency:    ${latencyRuns} runs one at a time after ${warm} warm-up; throughput: ${throughputRuns} runs drained, ${concurrency} in flight\n`);
      console.log('case                                   p50 ms    p99 ms   mean ms');
      console.log('------------------------------------------------------------------');
      console.log(`trigger → first delivery            ${ms(l.p50)} ${ms(l.p99)} ${ms(l.mean)}`);
      console.log(`bare fetch to the receiver          ${ms(b.p50)} ${ms(b.p99)} ${ms(b.mean)}`);
      console.log('');
      const delivered = throughputRuns / drainSeconds;
      const fetched = throughputRuns / bareSeconds;
      console.log(`deliveries per second (job runner): ${delivered.toFixed(0)}`);
      console.log(`fetches per second (bare loop):     ${fetched.toFixed(0)}`);
      console.log('');
      console.log('Ratios (informational; the issue sets no target):');
      console.log(`  trigger → first delivery vs bare fetch: ${(l.p50 / b.p50).toFixed(1)}x at p50, ${(l.mean / b.mean).toFixed(1)}x on mean`);
      console.log(`  deliveries per second vs bare fetches:  ${(delivered / fetched).toFixed(2)}x`);
    } finally {
      await jobs.stop();
      await receiver.close();
    }
  },
};
