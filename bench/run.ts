/**
 * Request-path benchmark (STYLE.md point 11): the foundation's routes, timed
 * in-process through `app.request()`, against baselines measured in the same
 * run on the same database: a bare Hono hello and the raw driver round trip.
 *
 * PGlite in memory by default; with BENCH_DATABASE_URL, a fresh database on
 * that Postgres server (created, migrated, dropped at the end).
 * BENCH_ITERATIONS sets the timed iterations per case (default 2000).
 *
 * Cases run interleaved, in rounds, so a burst of load from something else
 * on the machine lands on the baselines and the routes alike.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Hono } from 'hono';
import { eq } from 'drizzle-orm';
import { createApp } from '../src/app';
import { generateServiceToken, hashServiceToken } from '../src/auth/service-token';
import { loadConfig } from '../src/config';
import { createLogger } from '../src/logger';
import { orgs, serviceTokens } from '../src/db/schema';
import { migrateDatabase, openPglite, type NodeDatabase } from '../src/node/database';
import { platformOnSharedDatabase } from '../src/node/platform';
import { createThrowawayPostgres } from '../test/support/node-database';

interface BenchDatabase {
  database: NodeDatabase;
  /** What the run measured against, without credentials. */
  label: string;
  drop(): Promise<void>;
}

/** In-memory PGlite, or a throwaway database on a real server (test/support/node-database.ts). */
async function openBenchDatabase(): Promise<BenchDatabase> {
  const adminUrl = process.env.BENCH_DATABASE_URL;
  if (!adminUrl) {
    const database = await openPglite(undefined);
    if (database.kind !== 'pglite') throw new Error('openPglite returned a non-PGlite database');
    await migrateDatabase(database);
    const version = await database.pglite.query<{ server_version: string }>('show server_version');
    return {
      database,
      label: `PGlite ${version.rows[0]?.server_version ?? '?'} (in-memory, WASM, in-process)`,
      drop: () => database.close(),
    };
  }
  const { database, name, url, drop } = await createThrowawayPostgres(adminUrl, 'cellplane_bench');
  if (database.kind !== 'postgres') throw new Error('openPostgres returned a non-Postgres database');
  const version = await database.pool.query<{ server_version: string }>('show server_version');
  return {
    database,
    label: `Postgres ${version.rows[0]?.server_version ?? '?'} at ${new URL(url!).host} (node-postgres pool, database ${name})`,
    drop,
  };
}

/** The raw driver, no drizzle: the floor under every query the app makes. */
function rawQuery(database: NodeDatabase): (text: string, params: unknown[]) => Promise<unknown> {
  return database.kind === 'pglite'
    ? (text, params) => database.pglite.query(text, params)
    : (text, params) => database.pool.query(text, params);
}

/**
 * Records the SQL statements the driver receives while `run` executes, to
 * report how many round trips one request costs. Used on a single probe
 * request, never while timing.
 */
async function statementsDuring(database: NodeDatabase, run: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const target: { query: unknown; transaction?: unknown; connect?: unknown } =
    database.kind === 'pglite' ? database.pglite : database.pool;
  // a transaction runs on its own handle, outside the wrapped `query`: note that it started, at least
  const transactionKey = database.kind === 'pglite' ? 'transaction' : 'connect';
  const originalQuery = target.query as (...args: unknown[]) => unknown;
  const originalTransaction = target[transactionKey] as (...args: unknown[]) => unknown;
  // pg's Pool.query checks a client out through this.connect() synchronously: that is not a transaction
  let insideQuery = false;
  target.query = function (this: unknown, ...args: unknown[]) {
    const first = args[0];
    seen.push(typeof first === 'string' ? first : String((first as { text?: string }).text));
    insideQuery = true;
    try {
      return originalQuery.apply(this, args);
    } finally {
      insideQuery = false;
    }
  };
  target[transactionKey] = function (this: unknown, ...args: unknown[]) {
    if (!insideQuery) seen.push(`(${transactionKey}: a transaction or checked-out client; its statements are not listed)`);
    return originalTransaction.apply(this, args);
  };
  try {
    await run();
  } finally {
    target.query = originalQuery;
    target[transactionKey] = originalTransaction;
  }
  return seen;
}

interface Case {
  name: string;
  /** Baselines have no probe: their query count is what they are. */
  queries?: number;
  call(i: number): Promise<void>;
}

interface Result {
  name: string;
  p50: number;
  p99: number;
  mean: number;
  /** Driver statements one call sends. */
  statements: string[];
}

const ROUNDS = 10;

const quantile = (sorted: Float64Array, q: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;

/**
 * Warm-up for every case, then `iterations` timed calls per case spread over
 * ROUNDS rounds, the case order rotating each round. Samples are microseconds.
 */
async function measureAll(cases: Case[], options: { warmup: number; iterations: number }): Promise<Map<string, Float64Array>> {
  const next = new Map(cases.map((c) => [c.name, 0]));
  const call = (c: Case) => {
    const i = next.get(c.name)!;
    next.set(c.name, i + 1);
    return c.call(i);
  };
  for (const c of cases) for (let w = 0; w < options.warmup; w++) await call(c);
  const samples = new Map(cases.map((c) => [c.name, new Float64Array(options.iterations)]));
  const filled = new Map(cases.map((c) => [c.name, 0]));
  for (let round = 0; round < ROUNDS; round++) {
    const perRound = Math.floor(options.iterations / ROUNDS) + (round < options.iterations % ROUNDS ? 1 : 0);
    for (let k = 0; k < cases.length; k++) {
      const c = cases[(round + k) % cases.length]!;
      const into = samples.get(c.name)!;
      let n = filled.get(c.name)!;
      for (let r = 0; r < perRound; r++) {
        const start = performance.now();
        await call(c);
        into[n++] = (performance.now() - start) * 1000;
      }
      filled.set(c.name, n);
    }
  }
  return samples;
}

function summarize(name: string, samples: Float64Array, statements: string[]): Result {
  let total = 0;
  for (const sample of samples) total += sample;
  const sorted = Float64Array.from(samples).sort();
  return { name, p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), mean: total / sorted.length, statements };
}

/** One app call: the body is read (as a client would) and the status checked, so a bench never times errors. */
async function expectStatus(response: Response | Promise<Response>, status: number, what: string): Promise<unknown> {
  const res = await response;
  const text = await res.text();
  if (res.status !== status) throw new Error(`${what}: expected ${status}, got ${res.status}: ${text}`);
  return text.length ? JSON.parse(text) : undefined;
}

function positiveInteger(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} expects a positive integer, got "${raw}"`);
  return value;
}

const us = (value: number) => value.toFixed(1);
const pad = (text: string, width: number) => text.padStart(width);

async function main(): Promise<void> {
  const iterations = positiveInteger('BENCH_ITERATIONS', 2000);
  const warmup = Math.min(500, Math.max(50, Math.floor(iterations / 5)));

  const bench = await openBenchDatabase();
  try {
    const { database } = bench;
    const config = loadConfig({ ENCRYPTION_KEY: randomBytes(32).toString('hex'), AUTH_SECRET: randomBytes(32).toString('hex') });
    // the real logger, formatting every line; only the I/O is left out
    const logger = createLogger({ level: 'info', secrets: [config.encryptionKey, config.authSecret], sink: () => {} });
    const platform = platformOnSharedDatabase({ config, logger, db: database.db });
    const app = createApp(platform);
    const json = (method: string, body: unknown, token?: string): RequestInit => ({
      method,
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    });

    // Fixtures through the API, in bootstrap mode; the first mint closes it.
    // Reads and writes use separate projects, so the listed project keeps its
    // five environments while the write cases insert thousands elsewhere.
    const org = (await expectStatus(app.request('/orgs', json('POST', { name: 'Bench', slug: 'bench' })), 201, 'create org')) as {
      id: string;
      slug: string;
    };
    const createProject = async (slug: string) =>
      (await expectStatus(app.request(`/orgs/${org.slug}/projects`, json('POST', { name: slug, slug })), 201, 'create project')) as {
        id: string;
        slug: string;
      };
    const reads = await createProject('reads');
    const writes = await createProject('writes');
    const minted = (await expectStatus(
      app.request(`/orgs/${org.slug}/projects/${reads.slug}/tokens`, json('POST', { name: 'bench', role: 'owner' })),
      201,
      'mint token',
    )) as { token: string };
    const readToken = minted.token;
    // a token reaches one project and bootstrap mints only the first: the
    // writes project's owner token is seeded as test/support/fixtures.ts does
    const seeded = generateServiceToken();
    await database.db.insert(serviceTokens).values({
      orgId: org.id,
      projectId: writes.id,
      name: 'bench-writes',
      prefix: seeded.prefix,
      tokenHash: await hashServiceToken(seeded.token),
      role: 'owner',
    });
    const writeToken = seeded.token;
    for (const name of ['dev', 'staging', 'qa', 'prod']) {
      await expectStatus(app.request(`/${org.slug}/${reads.slug}/envs`, json('POST', { name }, readToken)), 201, 'seed env');
    }
    const listedEnvironments = 5;
    const readAuth = { headers: { authorization: `Bearer ${readToken}` } };

    const bare = new Hono();
    bare.get('/hello', (c) => c.json({ ok: true }));
    const raw = rawQuery(database);

    const baselines: Case[] = [
      {
        name: 'bare-hono',
        queries: 0,
        call: async () => {
          await expectStatus(bare.request('/hello'), 200, 'bare-hono');
        },
      },
      {
        name: 'raw-select',
        queries: 1,
        call: async () => {
          await raw('select * from orgs where id = $1', [org.id]);
        },
      },
      {
        name: 'raw-insert',
        queries: 1,
        call: async (i) => {
          await raw('insert into environments (org_id, project_id, name) values ($1, $2, $3) returning *', [
            org.id,
            writes.id,
            `raw-${i}`,
          ]);
        },
      },
      {
        // not a floor: the same select as raw-select, through drizzle, to show what the ORM layer adds per query
        name: 'drizzle-select',
        queries: 1,
        call: async () => {
          await database.db.select().from(orgs).where(eq(orgs.id, org.id));
        },
      },
    ];
    const routes: Case[] = [
      {
        name: 'GET /orgs/{slug}',
        call: async () => {
          await expectStatus(app.request(`/orgs/${org.slug}`, readAuth), 200, 'GET org');
        },
      },
      {
        name: 'GET /{o}/{p}/envs',
        call: async () => {
          await expectStatus(app.request(`/${org.slug}/${reads.slug}/envs`, readAuth), 200, 'GET envs');
        },
      },
      {
        name: 'POST /{o}/{p}/envs',
        call: async (i) => {
          const name = i < 0 ? 'api-probe' : `api-${i}`;
          await expectStatus(app.request(`/${org.slug}/${writes.slug}/envs`, json('POST', { name }, writeToken)), 201, 'POST envs');
        },
      },
    ];

    // query counts from one probe call per route, outside the timed loops
    const probes = new Map<string, string[]>();
    for (const route of routes) probes.set(route.name, await statementsDuring(database, () => route.call(-1)));
    const listed = (await expectStatus(app.request(`/${org.slug}/${reads.slug}/envs`, readAuth), 200, 'GET envs')) as unknown[];
    if (listed.length !== listedEnvironments) throw new Error(`expected ${listedEnvironments} environments, listed ${listed.length}`);

    const all = [...baselines, ...routes];
    const samples = await measureAll(all, { warmup, iterations });
    const results = new Map(
      all.map((c) => [c.name, summarize(c.name, samples.get(c.name)!, probes.get(c.name) ?? Array<string>(c.queries ?? 0).fill(''))]),
    );
    const get = (name: string) => results.get(name)!;

    console.log('Cellplane request-path benchmark');
    console.log(`  host:       ${bench.label}`);
    console.log(`  node:       ${process.version} (${process.platform}/${process.arch})`);
    console.log(
      `  iterations: ${iterations} per case after ${warmup} warm-up calls, interleaved in ${ROUNDS} rounds; one request at a time, in-process app.request()`,
    );
    console.log(`  list size:  ${listedEnvironments} environments\n`);

    const header = `${'case'.padEnd(22)}${pad('p50 µs', 10)}${pad('p99 µs', 10)}${pad('mean µs', 10)}${pad('ops/s', 10)}${pad('queries', 9)}`;
    console.log(header);
    console.log('-'.repeat(header.length));
    for (const c of all) {
      const r = get(c.name);
      console.log(
        `${c.name.padEnd(22)}${pad(us(r.p50), 10)}${pad(us(r.p99), 10)}${pad(us(r.mean), 10)}${pad(Math.round(1e6 / r.mean).toString(), 10)}${pad(String(r.statements.length), 9)}`,
      );
    }

    const ratio = (subject: string, against: string[]) => {
      const s = get(subject);
      const p50 = against.reduce((sum, b) => sum + get(b).p50, 0);
      const mean = against.reduce((sum, b) => sum + get(b).mean, 0);
      return `${(s.p50 / p50).toFixed(2)}x at p50, ${(s.mean / mean).toFixed(2)}x on mean`;
    };
    console.log('\nRatios (route / baselines of this run):');
    console.log(`  GET org    vs (raw-select + bare-hono): ${ratio('GET /orgs/{slug}', ['raw-select', 'bare-hono'])}`);
    console.log(`  envs list  vs (raw-select + bare-hono): ${ratio('GET /{o}/{p}/envs', ['raw-select', 'bare-hono'])}`);
    console.log(`  env create vs (raw-insert + bare-hono): ${ratio('POST /{o}/{p}/envs', ['raw-insert', 'bare-hono'])}`);

    // the same routes against a floor that pays one raw round trip per statement they send
    console.log('\nPer-query floor (bare-hono + a raw round trip per statement the route sends; writes count one raw-insert):');
    for (const [name, write] of [
      ['GET /orgs/{slug}', false],
      ['GET /{o}/{p}/envs', false],
      ['POST /{o}/{p}/envs', true],
    ] as const) {
      const count = get(name).statements.length;
      const floor = ['bare-hono', ...Array<string>(Math.max(0, write ? count - 1 : count)).fill('raw-select'), ...(write ? ['raw-insert'] : [])];
      console.log(`  ${name.padEnd(19)} ${count} queries: ${ratio(name, floor)}`);
    }
    console.log(`  drizzle-select vs raw-select (ORM layer, per query): ${ratio('drizzle-select', ['raw-select'])}`);

    if (process.env.BENCH_VERBOSE) {
      console.log('\nStatements per request:');
      for (const [name, statements] of probes) {
        console.log(`  ${name}`);
        for (const statement of statements) console.log(`    ${statement}`);
      }
    }
  } finally {
    await bench.drop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
