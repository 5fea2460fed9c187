/**
 * What every benchmark in bench/ shares (STYLE.md point 11): a fresh
 * database and app per benchmark, the raw driver as a floor, statement
 * counting on a probe request, interleaved timing, and the printing of
 * results and ratios against baselines measured in the same run.
 *
 * PGlite in memory by default; with BENCH_DATABASE_URL, a fresh database on
 * that Postgres server (created, migrated, dropped at the end).
 * BENCH_ITERATIONS sets the timed iterations per case (default 2000).
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Hono } from 'hono';
import { createApp } from '../src/app';
import { generateServiceToken, hashServiceToken } from '../src/auth/service-token';
import { loadConfig } from '../src/config';
import { createLogger } from '../src/logger';
import { serviceTokens } from '../src/db/schema';
import { migrateDatabase, openPglite, type NodeDatabase } from '../src/node/database';
import { platformOnSharedDatabase } from '../src/node/platform';
import { createThrowawayPostgres } from '../test/support/node-database';

/**
 * The limiter stays on (its in-process count is part of every request's
 * cost) but at a limit no benchmark reaches: one token sends thousands of
 * requests a minute here.
 */
export const BENCH_RATE_LIMIT = { RATE_LIMIT_PER_MINUTE: '1000000000' };

export interface Benchmark {
  /** What `npm run bench -- <name>` selects. */
  name: string;
  run(context: BenchContext): Promise<void>;
}

/** With a `name`, node-postgres prepares the statement once per connection (PGlite ignores it). */
export type RawQuery = (text: string, params: unknown[], name?: string) => Promise<{ rows: unknown[] }>;

export interface BenchContext {
  database: NodeDatabase;
  /** What the run measures against, without credentials. */
  label: string;
  app: ReturnType<typeof createApp>;
  /** The raw driver, no drizzle: the floor under every query the app makes. */
  raw: RawQuery;
  /** `new Hono()` with one GET /hello returning `c.json({ ok: true })`: the floor under every route. */
  bare: Hono;
  iterations: number;
  warmup: number;
}

interface BenchDatabase {
  database: NodeDatabase;
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

function rawQuery(database: NodeDatabase): RawQuery {
  return database.kind === 'pglite'
    ? (text, params) => database.pglite.query(text, params)
    : (text, params, name) => (name ? database.pool.query({ name, text, values: params }) : database.pool.query(text, params));
}

export function positiveInteger(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} expects a positive integer, got "${raw}"`);
  return value;
}

/**
 * A fresh database and app for one benchmark, so no benchmark measures
 * another's leftovers (or finds bootstrap mode already closed).
 */
export async function openBench(): Promise<{ context: BenchContext; close(): Promise<void> }> {
  const iterations = positiveInteger('BENCH_ITERATIONS', 2000);
  const warmup = Math.min(500, Math.max(50, Math.floor(iterations / 5)));
  const bench = await openBenchDatabase();
  const config = loadConfig({
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    AUTH_SECRET: randomBytes(32).toString('hex'),
    ...BENCH_RATE_LIMIT,
  });
  // the real logger, formatting every line; only the I/O is left out
  const logger = createLogger({ level: 'info', secrets: [config.encryptionKey, config.authSecret], sink: () => {} });
  const app = createApp(
    platformOnSharedDatabase({ config, logger, db: bench.database.db, namedStatements: bench.database.kind === 'postgres' }),
  );
  const bare = new Hono();
  bare.get('/hello', (c) => c.json({ ok: true }));
  return {
    context: { database: bench.database, label: bench.label, app, raw: rawQuery(bench.database), bare, iterations, warmup },
    close: bench.drop,
  };
}

/** The bare-Hono baseline: a JSON hello from an app with nothing else in it. */
export function bareHonoCase({ bare }: BenchContext): Case {
  return {
    name: 'bare-hono',
    queries: 0,
    call: async () => {
      await expectStatus(bare.request('/hello'), 200, 'bare-hono');
    },
  };
}

/** A request with a JSON body and, when given, a bearer token. */
/**
 * A request with a JSON body and, when given, a bearer token. It carries
 * Content-Length, as an HTTP client sends it for a body of known size (and
 * @hono/node-server passes it on): without it, the body-limit middleware has
 * to count the bytes through a stream, a cost real requests do not have.
 */
export const json = (method: string, body: unknown, token?: string): RequestInit => {
  const text = JSON.stringify(body);
  return {
    method,
    headers: {
      'content-type': 'application/json',
      'content-length': String(new TextEncoder().encode(text).length),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: text,
  };
};

export const bearer = (token: string): RequestInit => ({ headers: { authorization: `Bearer ${token}` } });

/** One app call: the body is read (as a client would) and the status checked, so a bench never times errors. */
export async function expectStatus(response: Response | Promise<Response>, status: number, what: string): Promise<unknown> {
  const res = await response;
  const text = await res.text();
  if (res.status !== status) throw new Error(`${what}: expected ${status}, got ${res.status}: ${text}`);
  return text.length ? JSON.parse(text) : undefined;
}

export interface BenchProject {
  id: string;
  slug: string;
  /** An owner service token of this project. */
  token: string;
}

export interface BenchTenant {
  org: { id: string; slug: string };
  projects: Record<string, BenchProject>;
}

/**
 * An organization and its projects through the API, in bootstrap mode, each
 * project with an owner token. The first project's token is minted through
 * the API, which closes bootstrap; a token reaches one project and bootstrap
 * mints only the first, so the others are seeded as test/support/fixtures.ts does.
 */
export async function createBenchTenant({ app, database }: BenchContext, orgSlug: string, projectSlugs: string[]): Promise<BenchTenant> {
  const org = (await expectStatus(app.request('/orgs', json('POST', { name: orgSlug, slug: orgSlug })), 201, 'create org')) as {
    id: string;
    slug: string;
  };
  const created: { id: string; slug: string }[] = [];
  for (const slug of projectSlugs) {
    created.push(
      (await expectStatus(app.request(`/orgs/${org.slug}/projects`, json('POST', { name: slug, slug })), 201, 'create project')) as {
        id: string;
        slug: string;
      },
    );
  }
  const projects: Record<string, BenchProject> = {};
  for (const [i, project] of created.entries()) {
    let token: string;
    if (i === 0) {
      const minted = (await expectStatus(
        app.request(`/orgs/${org.slug}/projects/${project.slug}/tokens`, json('POST', { name: 'bench', role: 'owner' })),
        201,
        'mint token',
      )) as { token: string };
      token = minted.token;
    } else {
      const seeded = generateServiceToken();
      await database.db.insert(serviceTokens).values({
        orgId: org.id,
        projectId: project.id,
        name: `bench-${project.slug}`,
        prefix: seeded.prefix,
        tokenHash: await hashServiceToken(seeded.token),
        role: 'owner',
      });
      token = seeded.token;
    }
    projects[project.slug] = { id: project.id, slug: project.slug, token };
  }
  return { org: { id: org.id, slug: org.slug }, projects };
}

type Method = (...args: unknown[]) => unknown;
type PoolClient = { query: Method; release: Method };

const statementText = (first: unknown) => (typeof first === 'string' ? first : String((first as { text?: string }).text));

/** One statement a request sent, with its parameters, so a read can be replayed on the raw driver. */
export interface Statement {
  text: string;
  params: unknown[];
  /** The prepared statement's name, when the app sent it as a named one. */
  name?: string;
}

/** The texts of the statements `run` sends: see recordStatements. */
export async function statementsDuring(database: NodeDatabase, run: () => Promise<void>): Promise<string[]> {
  return (await recordStatements(database, run)).map((statement) => statement.text);
}

/**
 * Records the SQL statements the driver receives while `run` executes, to
 * report how many round trips one request costs, transactions included
 * (their BEGIN and COMMIT count: each is a round trip on a server). Used on a
 * single probe request, never while timing.
 */
export async function recordStatements(database: NodeDatabase, run: () => Promise<void>): Promise<Statement[]> {
  const seen: Statement[] = [];
  const mark = (text: string) => seen.push({ text, params: [] });
  const recording = (original: Method): Method =>
    function (this: unknown, ...args: unknown[]) {
      const name = typeof args[0] === 'object' ? (args[0] as { name?: string }).name || undefined : undefined;
      seen.push({ text: statementText(args[0]), params: Array.isArray(args[1]) ? args[1] : [], name });
      return original.apply(this, args);
    };

  if (database.kind === 'pglite') {
    // PGlite runs a transaction's BEGIN and COMMIT itself and hands the callback its own handle
    const pglite = database.pglite as unknown as { query: Method; exec: Method; transaction: Method };
    const { query, exec, transaction } = pglite;
    pglite.query = recording(query);
    pglite.exec = recording(exec);
    pglite.transaction = function (this: unknown, callback: unknown) {
      mark('BEGIN');
      const inside = (tx: { query: Method; exec: Method }) => {
        tx.query = recording(tx.query);
        tx.exec = recording(tx.exec);
        return (callback as Method)(tx);
      };
      return (transaction.call(this, inside) as Promise<unknown>).then(
        (result) => {
          mark('COMMIT');
          return result;
        },
        (error: unknown) => {
          mark('ROLLBACK');
          throw error;
        },
      );
    };
    try {
      await run();
    } finally {
      Object.assign(pglite, { query, exec, transaction });
    }
    return seen;
  }

  // pg: a transaction checks a client out with `await pool.connect()` and sends BEGIN/COMMIT on it
  const pool = database.pool as unknown as { query: Method; connect: Method };
  const { query, connect } = pool;
  const checkedOut = new Map<PoolClient, { query: Method; release: Method }>();
  const giveBack = (client: PoolClient) => {
    const originals = checkedOut.get(client);
    if (originals) Object.assign(client, originals);
    checkedOut.delete(client);
  };
  // Pool.query checks a client out through this.connect(callback): its statement is already counted
  let insideQuery = false;
  const recordQuery = recording(query);
  pool.query = function (this: unknown, ...args: unknown[]) {
    insideQuery = true;
    try {
      return recordQuery.apply(this, args);
    } finally {
      insideQuery = false;
    }
  };
  // a checked-out client records until it is released: back in the pool, Pool.query may reuse it
  pool.connect = function (this: unknown, ...args: unknown[]) {
    if (insideQuery || args.length) return connect.apply(this, args);
    return (connect.apply(this, args) as Promise<PoolClient>).then((client) => {
      const originals = { query: client.query, release: client.release };
      checkedOut.set(client, originals);
      client.query = recording(originals.query);
      client.release = function (this: unknown, ...releaseArgs: unknown[]) {
        giveBack(client);
        return originals.release.apply(this, releaseArgs);
      };
      return client;
    });
  };
  try {
    await run();
  } finally {
    Object.assign(pool, { query, connect });
    for (const client of [...checkedOut.keys()]) giveBack(client);
  }
  return seen;
}

/**
 * A diagnostic case: the statements one read request sent (recordStatements),
 * replayed in order on the raw driver. The route against this plus bare-hono
 * is what the app costs on top of its own SQL; this against a baseline is what
 * its SQL costs over the baseline's.
 */
export function replayCase({ raw }: BenchContext, name: string, statements: Statement[]): Case {
  const write = statements.find((statement) => !/^\s*select\b/i.test(statement.text));
  if (write) throw new Error(`${name}: only reads can be replayed, got ${write.text}`);
  return {
    name,
    queries: statements.length,
    call: async () => {
      // named as the app named them: the same prepared statement, so the same (generic) plan
      for (const statement of statements) await raw(statement.text, statement.params, statement.name);
    },
  };
}

/**
 * A diagnostic case for a write: its one recorded statement replayed raw,
 * with `vary` giving each call's parameters (a new entity name, say), so it
 * inserts anew every time instead of conflicting.
 */
export function replayWriteCase({ raw }: BenchContext, name: string, statement: Statement, vary: (params: unknown[], i: number) => unknown[]): Case {
  return {
    name,
    queries: 1,
    call: async (i) => {
      await raw(statement.text, vary(statement.params, i), statement.name);
    },
  };
}

export interface Case {
  name: string;
  /** Baselines have no probe: their query count is what they are. */
  queries?: number;
  /** `i` counts calls from 0; a probe call gets -1. */
  call(i: number): Promise<void>;
}

export interface Result {
  name: string;
  p50: number;
  p99: number;
  mean: number;
  /** Driver statements one call sends. */
  statements: string[];
}

export type Results = Map<string, Result>;

export const ROUNDS = 10;

const quantile = (sorted: Float64Array, q: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;

/**
 * Warm-up for every case, then `iterations` timed calls per case spread over
 * ROUNDS rounds, the case order rotating each round. Samples are microseconds.
 */
export async function measureAll(cases: Case[], options: { warmup: number; iterations: number }): Promise<Map<string, Float64Array>> {
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

export function summarize(name: string, samples: Float64Array, statements: string[]): Result {
  let total = 0;
  for (const sample of samples) total += sample;
  const sorted = Float64Array.from(samples).sort();
  return { name, p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), mean: total / sorted.length, statements };
}

/**
 * The whole measurement of one benchmark: a probe call (i = -1) per case
 * without a declared query count, to count its statements outside the
 * timing, then every case timed, interleaved.
 */
export async function measureCases({ database, iterations, warmup }: BenchContext, cases: Case[]): Promise<Results> {
  const probes = new Map<string, string[]>();
  for (const c of cases) {
    if (c.queries === undefined) probes.set(c.name, await statementsDuring(database, () => c.call(-1)));
  }
  const samples = await measureAll(cases, { warmup, iterations });
  return new Map(
    cases.map((c) => [c.name, summarize(c.name, samples.get(c.name)!, probes.get(c.name) ?? Array<string>(c.queries ?? 0).fill(''))]),
  );
}

export const us = (value: number) => value.toFixed(1);
export const pad = (text: string, width: number) => text.padStart(width);

export function printHeader(title: string, { label, iterations, warmup }: BenchContext, notes: string[] = []): void {
  console.log(title);
  console.log(`  host:       ${label}`);
  console.log(`  node:       ${process.version} (${process.platform}/${process.arch})`);
  console.log(
    `  iterations: ${iterations} per case after ${warmup} warm-up calls, interleaved in ${ROUNDS} rounds; one request at a time, in-process app.request()`,
  );
  for (const note of notes) console.log(`  ${note}`);
  console.log('');
}

export function printTable(results: Results): void {
  const width = Math.max(22, ...[...results.keys()].map((name) => name.length + 2));
  const header = `${'case'.padEnd(width)}${pad('p50 µs', 10)}${pad('p99 µs', 10)}${pad('mean µs', 10)}${pad('ops/s', 10)}${pad('queries', 9)}`;
  console.log(header);
  console.log('-'.repeat(header.length));
  for (const r of results.values()) {
    console.log(
      `${r.name.padEnd(width)}${pad(us(r.p50), 10)}${pad(us(r.p99), 10)}${pad(us(r.mean), 10)}${pad(Math.round(1e6 / r.mean).toString(), 10)}${pad(String(r.statements.length), 9)}`,
    );
  }
}

export interface Ratio {
  p50: number;
  mean: number;
}

/** `subject` over the sum of `against`, at p50 and on the mean. */
export function ratio(results: Results, subject: string, against: string[]): Ratio {
  const get = (name: string) => {
    const result = results.get(name);
    if (!result) throw new Error(`no result named "${name}"`);
    return result;
  };
  const s = get(subject);
  return {
    p50: s.p50 / against.reduce((sum, b) => sum + get(b).p50, 0),
    mean: s.mean / against.reduce((sum, b) => sum + get(b).mean, 0),
  };
}

export const formatRatio = (r: Ratio) => `${r.p50.toFixed(2)}x at p50, ${r.mean.toFixed(2)}x on mean`;

/** A target from an issue, judged at p50 and on the mean separately, so neither hides the other. */
export function formatTarget(r: Ratio, max: number): string {
  const verdict = (value: number) => (value <= max ? 'PASS' : 'MISS');
  return `target <= ${max}x: p50 ${verdict(r.p50)}, mean ${verdict(r.mean)}`;
}

/**
 * The per-query floor of a route: bare-hono plus one raw round trip for each
 * statement it sends, writes counting one `write` baseline among them.
 */
export function perQueryFloor(results: Results, subject: string, read: string, write?: string): string[] {
  const count = results.get(subject)!.statements.length;
  return ['bare-hono', ...Array<string>(Math.max(0, write ? count - 1 : count)).fill(read), ...(write ? [write] : [])];
}

/** With BENCH_VERBOSE set, the SQL each probed case sent. */
export function printStatements(results: Results): void {
  if (!process.env.BENCH_VERBOSE) return;
  console.log('\nStatements per request:');
  for (const r of results.values()) {
    if (!r.statements.some((statement) => statement.length)) continue;
    console.log(`  ${r.name}`);
    for (const statement of r.statements) console.log(`    ${statement}`);
  }
}
