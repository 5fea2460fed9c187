/**
 * The child processes of `npm run bench -- http` and the data they serve:
 * `npm start` on a fresh Postgres database or an embedded PGlite directory,
 * bootstrapped through the API (an organization, a project, an owner token)
 * and seeded through the API's own write path, `POST ENV/batch`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { readdir, rename, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getTableColumns, is, Param, Placeholder } from 'drizzle-orm';
import { PgJsonb } from 'drizzle-orm/pg-core';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { buildServer, SERVER_ARGS } from '../../scripts/build-server.mjs';
import type { Queryable } from '../../src/db/client';
import * as schema from '../../src/db/schema';
import { rememberedTriggerReadQuery, runInsertQuery } from '../../src/modules/action-runs/fast-path';
import { entityReadQuery, rememberedEntityReadQuery } from '../../src/modules/entities/fast-paths';
import { BENCH_RATE_LIMIT } from '../harness';
import type { LeastWorkStatements } from './bare';
import type { TriggerStatements } from './least-trigger';
import { callApi, type HttpTarget, type LeastWorkStatement } from './target';

const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

export const DEFAULT_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** A port nothing listens on now: the server's PORT must be a real one (src/config.ts refuses 0). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/** The database `name` on the server of `adminUrl`, dropped first if an earlier run left it behind. */
export async function freshPostgres(adminUrl: string, name: string): Promise<{ url: string; drop(): Promise<void> }> {
  const admin = async (statement: string) => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

export interface Child {
  url: string;
  pid: number;
  /** SIGTERM, and SIGKILL if it has not exited within `graceMs` plus 10 s. */
  stop(): Promise<void>;
}

/** Children still running: killed if this process exits without stopping them (an uncaught error, say). */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

const tail = (file: string) => {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-20).join('\n');
  } catch {
    return '(no log)';
  }
};

/**
 * `node <args>` (a TypeScript script: `--import tsx <script>`), without npm
 * in between, so that `pid` is the server's own (its RSS is read from
 * /proc/<pid>/status). Its output goes to `logFile`. With
 * BENCH_HTTP_PROFILE=<dir> it runs under `--cpu-prof`, written to
 * <dir>/<name>.cpuprofile when it exits: the main thread's profile (tsx's
 * loader runs in a worker thread that writes one of its own, which a fixed
 * --cpu-prof-name would let overwrite it). BENCH_HTTP_NODE_FLAGS (node's own
 * flags, space-separated) go before the rest of its arguments. Ready once
 * `readyPath` answers 200.
 */
export async function startNode(options: {
  name: string;
  args: string[];
  env: Record<string, string>;
  port: number;
  logFile: string;
  readyPath: string;
  graceMs?: number;
}): Promise<Child> {
  const profileDir = process.env.BENCH_HTTP_PROFILE;
  // node names each thread's profile CPU.<date>.<time>.<pid>.<tid>.<seq>.cpuprofile; the main thread's tid is 0
  const threadProfiles = profileDir ? join(profileDir, `${options.name}.threads`) : undefined;
  const profile = threadProfiles ? ['--cpu-prof', `--cpu-prof-dir=${threadProfiles}`] : [];
  const flags = (process.env.BENCH_HTTP_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  const log = openSync(options.logFile, 'a');
  // only what node and tsx need from this environment: a DATABASE_URL or PORT of the caller's shell must not leak in
  const inherited = Object.fromEntries(['PATH', 'HOME', 'TMPDIR'].flatMap((key) => (process.env[key] ? [[key, process.env[key]!]] : [])));
  const child = spawn(process.execPath, [...flags, ...profile, ...options.args], {
    cwd: REPO_ROOT,
    env: { ...inherited, PORT: String(options.port), ...options.env },
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  running.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve())).then(async () => {
    if (!threadProfiles || !profileDir) return;
    const main = (await readdir(threadProfiles).catch(() => [])).find((file) => file.endsWith(`.${child.pid}.0.001.cpuprofile`));
    if (main) await rename(join(threadProfiles, main), join(profileDir, `${options.name}.cpuprofile`));
    await rm(threadProfiles, { recursive: true, force: true });
  });
  child.once('exit', () => running.delete(child));
  const url = `http://127.0.0.1:${options.port}`;

  const deadline = Date.now() + 180_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${options.name} exited before it was ready (${child.exitCode ?? child.signalCode}); its log, ${options.logFile}:\n${tail(options.logFile)}`);
    }
    const ready = await fetch(`${url}${options.readyPath}`).then(
      async (res) => {
        await res.arrayBuffer();
        return res.status === 200;
      },
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${options.name} did not answer ${options.readyPath} within 180 s; its log, ${options.logFile}:\n${tail(options.logFile)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  return {
    url,
    pid: child.pid!,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), (options.graceMs ?? 5000) + 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

export type AppDatabase = { kind: 'postgres'; url: string } | { kind: 'pglite'; dataDir: string };

/**
 * `npm start` (src/node/server.ts, built as npm start builds it) on `database`. The rate limit is out of
 * reach (harness.ts, BENCH_RATE_LIMIT); the outbound guard lets deliveries
 * reach a receiver on 127.0.0.1 (bench/http/deliveries.ts).
 */
export async function startApp(database: AppDatabase, logFile: string, name: string): Promise<Child> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    AUTH_SECRET: randomBytes(32).toString('hex'),
    OUTBOUND_ALLOWED_HOSTS: '127.0.0.1',
    ...BENCH_RATE_LIMIT,
    ...(database.kind === 'postgres' ? { DATABASE_URL: database.url, API_BASE_URL: url } : { CELLPLANE_DATA_DIR: database.dataDir }),
  };
  // what `npm start` runs: its build step, then the built server
  await buildServer();
  return startNode({ name, args: SERVER_ARGS, env, port, logFile, readyPath: '/healthz' });
}

/**
 * The bare floor (bench/http/bare.ts) as a child process on the database at
 * `databaseUrl`, answering the entities of `envId`; ready once it answers
 * `probeName`. `framework` 'hono' serves it through a Hono app on
 * @hono/node-server instead of node:http alone: the architecture's floor.
 */
export async function startBare(databaseUrl: string, envId: string, probeName: string, logFile: string, framework: 'node' | 'hono' = 'node'): Promise<Child> {
  const env = { DATABASE_URL: databaseUrl, BARE_ENV_ID: envId, BARE_FRAMEWORK: framework };
  return startBareChild(framework === 'hono' ? 'bare-hono' : 'bare', env, `/entities/${encodeURIComponent(probeName)}`, logFile);
}

/**
 * The least work of the app's GET (bench/http/bare.ts, BARE_STATEMENT): Hono
 * and the app's own statement, for a path naming its organization and project
 * by slug (as the bench's paths do), on the database at `databaseUrl`. With
 * `guarantees` (BARE_GUARANTEES: `all`, or some of id, log, limit and
 * validation) it keeps those per-request guarantees too, each in its least form.
 */
export async function startLeastWork(databaseUrl: string, logFile: string, guarantees = ''): Promise<Child> {
  const env = { DATABASE_URL: databaseUrl, BARE_STATEMENT: JSON.stringify(leastWorkStatements()), BARE_GUARANTEES: guarantees, ...BENCH_RATE_LIMIT };
  return startBareChild(guarantees ? `least-work-get-${guarantees.replaceAll(',', '-')}` : 'least-work-get', env, '/healthz', logFile);
}

/**
 * The trigger's least work (bench/http/least-trigger.ts) as a child process
 * on the database at `databaseUrl`: it reads `entityName` of `envId` and
 * sends its webhooks to `receiverUrl`.
 */
export async function startLeastTrigger(options: {
  databaseUrl: string;
  envId: string;
  entityName: string;
  actionName: string;
  receiverUrl: string;
  logFile: string;
}): Promise<Child> {
  const env = {
    DATABASE_URL: options.databaseUrl,
    LEAST_ENV_ID: options.envId,
    LEAST_ENTITY: options.entityName,
    LEAST_ACTION: options.actionName,
    LEAST_RECEIVER_URL: options.receiverUrl,
    LEAST_STATEMENTS: JSON.stringify(triggerStatements()),
  };
  return startNode({ name: 'least-work-trigger', args: ['--import', 'tsx', 'bench/http/least-trigger.ts'], env, port: await freePort(), logFile: options.logFile, readyPath: '/healthz' });
}

/** bench/http/bare.ts as a child process on a free port, in the mode `env` chooses. */
async function startBareChild(name: string, env: Record<string, string>, readyPath: string, logFile: string): Promise<Child> {
  return startNode({ name, args: ['--import', 'tsx', 'bench/http/bare.ts'], env, port: await freePort(), logFile, readyPath });
}

/** The app's statements, built without a database: their SQL is the app's own. */
const mock = () => drizzle.mock({ schema }) as unknown as Queryable;

/**
 * A statement as text and parameters: a value, or the name of a placeholder
 * the bare server fills, marked where its column is jsonb (an insert's
 * placeholders come wrapped in the column's Param).
 */
function statementOf({ sql: text, params }: { sql: string; params: unknown[] }): LeastWorkStatement {
  return {
    text,
    params: params.map((param) => {
      const value = is(param, Param) ? param.value : param;
      if (!is(value, Placeholder)) return { value };
      return { placeholder: value.name!, json: is(param, Param) && is(param.encoder, PgJsonb) };
    }),
  };
}

/** The GET's two statements (src/modules/entities/fast-paths.ts). */
function leastWorkStatements(): LeastWorkStatements {
  const db = mock();
  return {
    inFull: statementOf(entityReadQuery(db, { orgById: false, projectById: false }).toSQL()),
    remembered: statementOf(rememberedEntityReadQuery(db).toSQL()),
  };
}

/**
 * The trigger's two statements (src/modules/action-runs/fast-path.ts): the
 * remembered caller's read, its row's columns named in the order it returns
 * them, and the run with its job.
 */
function triggerStatements(): TriggerStatements {
  const db = mock();
  return {
    read: {
      ...statementOf(rememberedTriggerReadQuery(db).toSQL()),
      entityColumns: Object.keys(getTableColumns(schema.entities)),
      actionColumns: Object.keys(getTableColumns(schema.actions)),
    },
    insert: statementOf(runInsertQuery(db).toSQL()),
  };
}

const ORG = 'bench-http';
const PROJECT = 'catalog';

async function expectCreated(url: string, path: string, body: unknown): Promise<unknown> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`bootstrap: POST ${path}: expected 201, got ${res.status}: ${text}`);
  return JSON.parse(text);
}

/**
 * An organization, a project and its owner token through the API in
 * bootstrap mode, as README's quickstart does; minting the token closes
 * bootstrap mode.
 */
export async function bootstrap(child: Child, database: HttpTarget['database']): Promise<HttpTarget> {
  await expectCreated(child.url, '/orgs', { name: 'Bench HTTP', slug: ORG });
  await expectCreated(child.url, `/orgs/${ORG}/projects`, { name: 'Catalog', slug: PROJECT });
  const { token } = (await expectCreated(child.url, `/orgs/${ORG}/projects/${PROJECT}/tokens`, { name: 'bench', role: 'owner' })) as { token: string };
  return { url: child.url, pid: child.pid, token, org: ORG, project: PROJECT, env: `/${ORG}/${PROJECT}/envs/default`, database };
}

// --- the seed -----------------------------------------------------------------------

/** The POST ENV/batch limits (src/modules/batch/schemas.ts): entities per request; relationships go 2 per entity. */
const ENTITIES_PER_BATCH = 1000;
/** Batches in flight at once, as `cellplane import terraform` sends them. */
const BATCHES_IN_FLIGHT = 2;

const STATES = ['active', 'degraded', 'retired'];
const entityTypes = ['service', 'database'].map((name) => ({
  kind: 'EntityType',
  name,
  states: STATES,
  initialState: 'active',
  properties: [
    { name: 'owner', type: 'string' },
    { name: 'region', type: 'string' },
  ],
}));
const relationshipTypes = [
  { kind: 'RelationshipType', name: 'depends-on', from: 'service', to: 'service', cardinality: 'many-to-many', states: ['active'] },
  { kind: 'RelationshipType', name: 'backs', from: 'database', to: 'service', cardinality: 'many-to-many', states: ['active'] },
];
/** A derived cell: the services labelled zone-3, for the list's `cell` filter. */
const CELL = 'zone-3';
const cell = {
  kind: 'Cell',
  name: CELL,
  entityType: 'service',
  membership: { mode: 'derived', derivedFrom: { selector: { labels: { zone: 'zone-3' } } } },
};
/** Most batches are sent by one source, one in ten (the fifth of each ten) by another: `syncSource` then selects about 10 %. */
const MAIN_SOURCE = 'seed-main';
const MINOR_SOURCE = 'seed-minor';

interface SeedEntity {
  entityType: string;
  name: string;
  state: string;
  properties: { owner: string; region: string };
  labels: Record<string, string>;
}

/** mulberry32: the same seed, the same data, run after run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One list filter of the bench: its query string, and how many entities it should find (unknown for updatedSince). */
export interface ListFilter {
  label: string;
  query: Record<string, string>;
  expected?: number;
}

export interface Seeded {
  entities: SeedEntity[];
  /** Names of the `service` entities, the ends of `depends-on`. */
  services: string[];
  relationships: number;
  filters: ListFilter[];
  entityMs: number;
  relationshipMs: number;
  requests: number;
}

async function inFlight<T>(items: T[], width: number, work: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        await work(items[index]!, index);
      }
    }),
  );
}

type BatchResult = {
  entities: { created: string[]; conflicts: unknown[] };
  relationships: { created: number; conflicts: unknown[] };
};

/**
 * `count` entities named seed-000001 … (zero-padded, so name order is
 * number order): one in ten a `database`, the rest `service`s; state degraded 5 %,
 * retired 15 %; label tier=gold on 25 %, tier=platinum on 1 %; label
 * zone=zone-0 … zone-9 on all. Each entity has two outgoing relationships:
 * a service `depends-on` two services, a database `backs` two. Entities are
 * sent in a shuffled order, so the order of writing (updatedAt, the source)
 * is not the order of names, then the relationships, all through
 * POST ENV/batch. The filters' expected counts are computed from the same data.
 */
export async function seed(target: HttpTarget, count: number): Promise<Seeded> {
  for (const type of entityTypes) await callApi(target, 'POST', `/${target.org}/${target.project}/entity-types`, 201, type);
  for (const type of relationshipTypes) await callApi(target, 'POST', `/${target.org}/${target.project}/relationship-types`, 201, type);
  await callApi(target, 'POST', `/${target.org}/${target.project}/cells`, 201, cell);

  const draw = random(14);
  const width = Math.max(6, String(count).length);
  const entities: SeedEntity[] = Array.from({ length: count }, (_, i) => {
    const stateDraw = draw();
    const tierDraw = draw();
    const labels: Record<string, string> = { zone: `zone-${Math.floor(draw() * 10)}` };
    if (tierDraw < 0.25) labels.tier = 'gold';
    else if (tierDraw < 0.26) labels.tier = 'platinum';
    return {
      entityType: i % 10 === 9 ? 'database' : 'service',
      name: `seed-${String(i + 1).padStart(width, '0')}`,
      state: stateDraw < 0.05 ? 'degraded' : stateDraw < 0.2 ? 'retired' : 'active',
      properties: { owner: `team-${i % 50}`, region: ['eu-west-1', 'us-east-1', 'ap-south-1'][i % 3]! },
      labels,
    };
  });
  const services = entities.filter((e) => e.entityType === 'service').map((e) => e.name);
  if (services.length < 8) throw new Error('the seed needs at least 8 services: raise BENCH_HTTP_ENTITIES');

  // a shuffled order of writing (Fisher–Yates), cut into batches
  const order = entities.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(draw() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const batches: { source: string; members: SeedEntity[] }[] = [];
  for (let offset = 0, b = 0; offset < order.length; offset += ENTITIES_PER_BATCH, b++) {
    batches.push({ source: b % 10 === 4 ? MINOR_SOURCE : MAIN_SOURCE, members: order.slice(offset, offset + ENTITIES_PER_BATCH).map((i) => entities[i]!) });
  }

  const batchPath = `${target.env}/batch`;
  let requests = 0;
  let updatedSince = '';
  const entityStart = performance.now();
  await inFlight(batches, BATCHES_IN_FLIGHT, async (batch, index) => {
    // entities written from here on are the ones `updatedSince` finds: about half
    if (index === Math.floor(batches.length / 2)) updatedSince = new Date().toISOString();
    const result = (await callApi(target, 'POST', batchPath, 200, { source: batch.source, entities: batch.members })) as BatchResult;
    requests++;
    if (result.entities.created.length !== batch.members.length || result.entities.conflicts.length) {
      throw new Error(`seed: a batch of ${batch.members.length} entities created ${result.entities.created.length}: ${JSON.stringify(result.entities.conflicts).slice(0, 300)}`);
    }
  });
  const entityMs = performance.now() - entityStart;

  // each batch's entities' relationships, sent by the source that owns their `from` end
  const serviceIndex = new Map(services.map((name, i) => [name, i]));
  const relationshipStart = performance.now();
  let relationships = 0;
  await inFlight(batches, BATCHES_IN_FLIGHT, async (batch) => {
    const items = batch.members.flatMap((entity, i) => {
      const k = serviceIndex.get(entity.name);
      const ends = k === undefined ? [(i * 3) % services.length, (i * 3 + 1) % services.length] : [(k + 1) % services.length, (k + 7) % services.length];
      const relationshipType = k === undefined ? 'backs' : 'depends-on';
      return ends.map((end) => ({ relationshipType, from: entity.name, to: services[end]! }));
    });
    const result = (await callApi(target, 'POST', batchPath, 200, { source: batch.source, relationships: items })) as BatchResult;
    requests++;
    if (result.relationships.created !== items.length || result.relationships.conflicts.length) {
      throw new Error(`seed: a batch of ${items.length} relationships created ${result.relationships.created}: ${JSON.stringify(result.relationships.conflicts).slice(0, 300)}`);
    }
    relationships += items.length;
  });
  const relationshipMs = performance.now() - relationshipStart;

  const counted = (test: (entity: SeedEntity) => boolean) => entities.filter(test).length;
  const share = (matches: number) => `${Math.round((matches / count) * 100)} %`;
  const prefix = sharedNamePrefix(entities.map((e) => e.name));
  const minorSources = new Set(batches.filter((b) => b.source === MINOR_SOURCE).flatMap((b) => b.members.map((e) => e.name)));
  const filters: ListFilter[] = [
    { label: 'label=tier:gold (25 %)', query: { label: 'tier:gold' }, expected: counted((e) => e.labels.tier === 'gold') },
    { label: 'label=tier:platinum (1 %)', query: { label: 'tier:platinum' }, expected: counted((e) => e.labels.tier === 'platinum') },
    { label: 'entityType=database (10 %)', query: { entityType: 'database' }, expected: counted((e) => e.entityType === 'database') },
    { label: 'state=degraded (5 %)', query: { state: 'degraded' }, expected: counted((e) => e.state === 'degraded') },
    {
      label: `cell=${CELL} (derived, ~9 %)`,
      query: { cell: CELL },
      expected: counted((e) => e.entityType === 'service' && e.labels.zone === 'zone-3'),
    },
    { label: `namePrefix=${prefix.prefix} (${share(prefix.count)})`, query: { namePrefix: prefix.prefix }, expected: prefix.count },
    { label: `syncSource=${MINOR_SOURCE} (${share(minorSources.size)})`, query: { syncSource: MINOR_SOURCE }, expected: minorSources.size },
    { label: 'updatedSince=<mid-seed> (~50 %)', query: { updatedSince } },
  ];
  return { entities, services, relationships, filters, entityMs, relationshipMs, requests };
}

/** The longest prefix of the middle name that at least a twentieth of the names share (names are seed-NNNNNN). */
function sharedNamePrefix(names: string[]): { prefix: string; count: number } {
  const middle = names[Math.floor(names.length / 2)]!;
  for (let length = middle.length; length > 0; length--) {
    const prefix = middle.slice(0, length);
    const count = names.filter((name) => name.startsWith(prefix)).length;
    if (count >= names.length / 20) return { prefix, count };
  }
  return { prefix: middle, count: 1 };
}

/** Where an embedded database's files live under CELLPLANE_DATA_DIR (src/node/platform.ts). */
export const pgliteDirectory = (dataDir: string) => join(dataDir, 'db');
