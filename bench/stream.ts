/**
 * The entity change stream's fan-out on the Node host: publish → receive
 * latency with 1, 100 and 1,000 subscribers, each a real SSE client over
 * HTTP on 127.0.0.1. The target: p99 at 1,000 subscribers within 2×
 * of one subscriber.
 *
 * One sample is one subscriber receiving one change: from the moment the
 * write that logged it returned (the commit, then the in-process publish)
 * to the moment that subscriber's parser has the event.
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { createParser } from 'eventsource-parser';
import { createApp } from '../src/app';
import { loadConfig } from '../src/config';
import { createLogger } from '../src/logger';
import { platformWithJobRunner } from '../src/node/platform';
import { createBenchTenant, expectStatus, json, positiveInteger, type Benchmark } from './harness';

interface Subscriber {
  /** Resolves with the receive time of the event of the entity with this name. */
  received(name: string): Promise<number>;
  close(): void;
}

async function subscribe(url: string, token: string): Promise<Subscriber> {
  const controller = new AbortController();
  const response = await fetch(url, { headers: { authorization: `Bearer ${token}` }, signal: controller.signal });
  if (response.status !== 200 || !response.body) throw new Error(`stream answered ${response.status}`);
  const arrived = new Map<string, number>();
  const waiting = new Map<string, (at: number) => void>();
  const parser = createParser({
    onEvent(message) {
      const at = performance.now();
      const name = (JSON.parse(message.data) as { entity: { name: string } }).entity.name;
      const waiter = waiting.get(name);
      if (waiter) {
        waiting.delete(name);
        waiter(at);
      } else arrived.set(name, at);
    },
  });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  void (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        parser.feed(value);
      }
    } catch {
      // closed
    }
  })();
  return {
    received: (name) => {
      const at = arrived.get(name);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => waiting.set(name, resolve));
    },
    close: () => controller.abort(),
  };
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
const ms = (value: number) => value.toFixed(2).padStart(9);

export const stream: Benchmark = {
  name: 'stream',
  async run(context) {
    const { database, label } = context;
    const rounds = Math.min(positiveInteger('BENCH_ITERATIONS', 2000), 200);
    const config = loadConfig({ ENCRYPTION_KEY: randomBytes(32).toString('hex'), AUTH_SECRET: randomBytes(32).toString('hex') });
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
        const subscribers = await Promise.all(Array.from({ length: count }, () => subscribe(`${base}${envPath}/entities/stream`, project.token)));
        const samples: number[] = [];
        const warm = 10;
        for (let round = 0; round < warm + rounds; round++) {
          const name = `vm-${++n}`;
          const response = await app.request(`${envPath}/entities`, json('POST', { kind: 'Entity', entityType: 'vm', name }, project.token));
          const written = performance.now();
          await expectStatus(response, 201, 'create');
          const arrivals = await Promise.all(subscribers.map((s) => s.received(name)));
          if (round >= warm) for (const at of arrivals) samples.push(at - written);
        }
        for (const s of subscribers) s.close();
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
    console.log(`  method:     ${rounds} changes per size after 10 warm-up, each an entity create through the app; every subscriber a real SSE client over HTTP on 127.0.0.1 in this process\n`);
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
