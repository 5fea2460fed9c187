/**
 * The API over real HTTP (issue 14): `npm start` as a child process, loaded
 * by autocannon from this process, each measure beside a floor measured in
 * the same run (bench/README.md, "http"):
 *
 * - GET ENV/entities/{name} at 10 clients, req/s, vs a bare node:http + pg
 *   server running the same select (bench/http/bare.ts): ≥ 0.7×;
 * - the same at 1 client, p50 latency: ≤ 1.5×;
 * - POST ENV/relationships vs POST ENV/entities at 10 clients, req/s: ≥ 0.9×;
 * - for every list filter, the deepest page's p50 vs the first page's: ≤ 1.2×;
 *   the label-filtered first page vs its SQL sent raw through pg: ≤ 2×;
 * - a sustained mixed load at 20 clients on Postgres and on PGlite: no
 *   failed request, and the child's RSS at the end within 10 % of its RSS
 *   after the warm-up;
 * - then the run engine's deliveries (bench/http/deliveries.ts) and the
 *   change stream's cost per frame (bench/http/stream-cost.ts).
 *
 * Beside the GET rows, not targets: Hono alone with the bare select, the
 * GET's least work, Hono with the app's own token-checked statements, and
 * that least work kept whole, with the per-request guarantees (request id,
 * log line, rate limit, validation) each in its least form
 * (bench/http/bare.ts); then the app, the same build started after the seed
 * (which, like the floors, never served it), that least work kept whole and
 * the bare server in the same slices of time, with the CPU a GET costs each
 * of them, Postgres and the load (bench/http/slices.ts). Beside the PGlite RSS
 * row: what PGlite's own query path promotes to V8's old generation
 * (bench/http/promotion.ts).
 *
 * 100,000 entities and 200,000 relationships are seeded through POST
 * ENV/batch. BENCH_HTTP_SECONDS (10), BENCH_HTTP_LOAD_SECONDS (60),
 * BENCH_HTTP_ENTITIES (100,000), BENCH_HTTP_PGLITE_ENTITIES and
 * BENCH_HTTP_PROFILE=<dir> are read; BENCH_DATABASE_URL names the Postgres
 * server (default postgres://postgres@127.0.0.1:5432/test).
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { analyze, openPglite } from '../src/node/database';
import { positiveInteger, type Benchmark } from './harness';
import { SERVER_ARGS } from '../scripts/build-server.mjs';
import { measureDeliveries } from './http/deliveries';
import { measurePromotion } from './http/promotion';
import { describeOutcome, fire, interleaved, merge, p50, perSecond, quantile, sustained, type Case, type Send } from './http/load';
import { inSameSlices, printSlices } from './http/slices';
import { measureStreamCost } from './http/stream-cost';
import {
  bootstrap,
  DEFAULT_ADMIN_URL,
  freshPostgres,
  pgliteDirectory,
  seed,
  startApp,
  startBare,
  startLeastWork,
  type ListFilter,
  type Seeded,
} from './http/server';
import { atLeast, atMost, NOT_A_TARGET, printColumns, type HttpTarget, type Row } from './http/target';

/** Of this run alone: two runs at once (a second terminal, a helper) must not drop each other's database. */
const DATABASE_NAME = `cellplane_bench_http_${process.pid}`;
const PAGE = 100;
/** The list's largest page (DECISIONS §3): the walk to the deepest page goes in these. */
const WALK = 1000;
const MIXED_CLIENTS = 20;
/** The sustained load's mix: the rest, 25 %, are creates. */
const MIXED_SHARES = { get: 0.6, list: 0.15 };
const MIXED_WARMUP_SECONDS = 10;
/** The GET's servers side by side (bench/http/slices.ts): 8 rounds of 2 s each, 48 s in all. */
const SLICE_ROUNDS = 8;
const SLICE_SECONDS = 2;
/** Of the reads and lists, once, before anything on them is timed. */
const FIRST_WARMUP_SECONDS = 10;

/** The parts of the run, in order; BENCH_HTTP_ONLY names a subset (comma-separated) to run alone. */
const SECTIONS = ['reads', 'lists', 'writes', 'load', 'deliveries', 'stream', 'pglite'] as const;
type Section = (typeof SECTIONS)[number];

interface Settings {
  sections: Set<Section>;
  seconds: number;
  loadSeconds: number;
  entities: number;
  pgliteEntities: number;
  adminUrl: string;
}

function readSettings(): Settings {
  const entities = positiveInteger('BENCH_HTTP_ENTITIES', 100_000);
  const only = (process.env.BENCH_HTTP_ONLY ?? '').split(',').map((name) => name.trim()).filter(Boolean);
  const unknown = only.filter((name) => !(SECTIONS as readonly string[]).includes(name));
  if (unknown.length) throw new Error(`BENCH_HTTP_ONLY: unknown part ${unknown.join(', ')}; known: ${SECTIONS.join(', ')}`);
  return {
    sections: new Set(only.length ? (only as Section[]) : SECTIONS),
    seconds: positiveInteger('BENCH_HTTP_SECONDS', 10),
    loadSeconds: positiveInteger('BENCH_HTTP_LOAD_SECONDS', 60),
    entities,
    pgliteEntities: positiveInteger('BENCH_HTTP_PGLITE_ENTITIES', entities),
    adminUrl: process.env.BENCH_DATABASE_URL || DEFAULT_ADMIN_URL,
  };
}

// --- printing ------------------------------------------------------------------------

const figure = (value: number) =>
  Number.isInteger(value) || Math.abs(value) >= 100 ? value.toFixed(0) : Math.abs(value) >= 10 ? value.toFixed(1) : value.toFixed(2);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** A table of rows: measure, app, floor, ratio, target, met; each row's note under it. */
function printRows(title: string, rows: Row[]): void {
  const cells = rows.map((row) => [
    row.measure,
    `${figure(row.value)} ${row.unit}`,
    `${figure(row.floor)} ${row.unit}`,
    `${row.ratio.toFixed(2)}×`,
    row.target,
    row.target === NOT_A_TARGET ? NOT_A_TARGET : row.met ? 'PASS' : 'MISS',
  ]);
  printColumns(title, ['measure', 'app', 'floor', 'ratio', 'target', 'met'], cells, rows.map((row) => row.note));
}

// --- requests ------------------------------------------------------------------------

const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)]!;
const entityPath = (target: HttpTarget, name: string) => `${target.env}/entities/${encodeURIComponent(name)}`;
const listPath = (target: HttpTarget, query: Record<string, string>, cursor?: string) =>
  `${target.env}/entities?${new URLSearchParams({ ...query, limit: String(PAGE), ...(cursor ? { cursor } : {}) })}`;

/** A create body of a new `service`; `name` must be new. */
const entityBody = (name: string) =>
  JSON.stringify({ kind: 'Entity', entityType: 'service', name, properties: { owner: 'team-bench', region: 'eu-west-1' }, labels: { zone: 'zone-1' } });

/** A case of autocannon load against `url`. */
const load = (url: string, token: string | undefined, connections: number, next: () => Send): Case => (s) => fire({ url, token, connections, seconds: s, next });

/**
 * A create case whose every request, warm-up included, must answer 201: a
 * write that failed would make the comparison one of errors.
 */
const allCreated =
  (what: string, create: Case): Case =>
  async (s) => {
    const trial = await create(s);
    if (trial.non2xx || trial.errors || [...trial.statuses.keys()].some((status) => status !== 201)) {
      throw new Error(`${what}: every request must create a row, got ${describeOutcome(trial)}`);
    }
    return trial;
  };

// --- lists ---------------------------------------------------------------------------

async function getPage(target: HttpTarget, path: string): Promise<{ names: string[]; next: string | null }> {
  const res = await fetch(`${target.url}${path}`, { headers: { authorization: `Bearer ${target.token}` } });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET ${path}: expected 200, got ${res.status}: ${text}`);
  return { names: (JSON.parse(text) as { name: string }[]).map((entity) => entity.name), next: res.headers.get('x-next-cursor') };
}

/**
 * The filter's matches counted by walking its list once, untimed, in pages
 * of WALK, and the cursor after all but the last PAGE of them: the cursor is
 * opaque, so it is reached through the API (a keyset cursor marks a row,
 * whatever the page size that reached it). Both timed pages are checked to
 * hold PAGE rows, the deepest one ending the list.
 */
async function walk(target: HttpTarget, filter: ListFilter): Promise<{ matches: number; first: string; deepest?: string }> {
  const after: string[] = [];
  let matches = 0;
  for (let cursor: string | undefined; ; ) {
    const page = await getPage(target, `${target.env}/entities?${new URLSearchParams({ ...filter.query, limit: String(WALK), ...(cursor ? { cursor } : {}) })}`);
    matches += page.names.length;
    if (!page.next) break;
    after.push(page.next);
    cursor = page.next;
  }
  if (filter.expected !== undefined && matches !== filter.expected) {
    throw new Error(`list ${filter.label}: found ${matches} entities, the seed has ${filter.expected}`);
  }
  const first = listPath(target, filter.query);
  if (matches < 2 * PAGE) return { matches, first };
  const skipped = matches - PAGE;
  const walked = Math.floor(skipped / WALK);
  let cursor = walked ? after[walked - 1] : undefined;
  const rest = skipped - walked * WALK;
  if (rest) {
    const page = await getPage(target, `${target.env}/entities?${new URLSearchParams({ ...filter.query, limit: String(rest), ...(cursor ? { cursor } : {}) })}`);
    cursor = page.next!;
  }
  const deepest = listPath(target, filter.query, cursor);
  const [firstPage, deepestPage] = [await getPage(target, first), await getPage(target, deepest)];
  if (firstPage.names.length !== PAGE || deepestPage.names.length !== PAGE || deepestPage.next) {
    throw new Error(`list ${filter.label}: the first page holds ${firstPage.names.length}, the deepest ${deepestPage.names.length} rows${deepestPage.next ? ' and is not the last' : ''}`);
  }
  return { matches, first, deepest };
}

/** `text` sent through `pool` back to back for `seconds`, one at a time. */
function rawCase(pool: pg.Pool, text: string, params: unknown[]): Case {
  return async (s) => {
    const latencies: number[] = [];
    const start = performance.now();
    const end = start + s * 1000;
    while (performance.now() < end) {
      const sent = performance.now();
      await pool.query(text, params);
      latencies.push(performance.now() - sent);
    }
    return { latencies, ok: latencies.length, non2xx: 0, errors: 0, statuses: new Map(), ms: performance.now() - start };
  };
}

// --- the sustained mixed load ----------------------------------------------------------

/**
 * Requests in the shares given: a GET of a random seeded entity, a list's
 * first page (the filters in turn, and none), and for the rest a create.
 */
function mixedRequests(target: HttpTarget, seeded: Seeded, shares: { get: number; list: number }): () => Send {
  const names = seeded.entities.map((entity) => entity.name);
  const lists = [{}, ...seeded.filters.map((filter) => filter.query)].map((query) => listPath(target, query));
  let created = 0;
  let listed = 0;
  return () => {
    const draw = Math.random();
    if (draw < shares.get) return { method: 'GET', path: entityPath(target, pick(names)) };
    if (draw < shares.get + shares.list) return { method: 'GET', path: lists[listed++ % lists.length]! };
    return { method: 'POST', path: `${target.env}/entities`, body: entityBody(`mix-${String(created++).padStart(7, '0')}`) };
  };
}

async function mixedLoad(target: HttpTarget, seeded: Seeded, settings: Settings): Promise<Row[]> {
  const { trial, footprint } = await sustained({
    url: target.url,
    token: target.token,
    pid: target.pid,
    connections: MIXED_CLIENTS,
    warmupSeconds: MIXED_WARMUP_SECONDS,
    seconds: settings.loadSeconds,
    next: mixedRequests(target, seeded, MIXED_SHARES),
  });
  const failed = trial.non2xx + trial.errors;
  const sent = trial.ok + failed;
  const where = `${target.database}, ${seeded.entities.length} entities`;
  return [
    {
      measure: `mixed load, ${MIXED_CLIENTS} clients (${where}): failed requests`,
      value: failed,
      floor: sent,
      unit: 'req',
      ratio: failed / sent,
      target: '= 0',
      met: failed === 0,
      note:
        `${MIXED_WARMUP_SECONDS} s warm-up + ${settings.loadSeconds} s: ${describeOutcome(trial)}; ${perSecond(trial).toFixed(0)} req/s, ` +
        `p50 ${quantile(trial.latencies, 0.5).toFixed(2)} ms, p99 ${quantile(trial.latencies, 0.99).toFixed(2)} ms (floor column: requests sent)`,
    },
    atMost(
      `mixed load, ${MIXED_CLIENTS} clients (${where}): RSS end vs start`,
      footprint.end,
      footprint.start,
      'MiB',
      1.1,
      `VmRSS of pid ${target.pid} each second: ${footprint.start.toFixed(0)} MiB after the warm-up, max ${footprint.max.toFixed(0)} MiB, ` +
        `${footprint.end.toFixed(0)} MiB at the end (${footprint.samples} samples)`,
    ),
  ];
}

// --- the benchmark ------------------------------------------------------------------------

/**
 * The database as a quiet server's would be before a section: what the
 * sections before it wrote vacuumed and analyzed, and its dirty pages
 * written out, so that the section times its own work, not autovacuum or a
 * checkpoint catching up with another section's.
 */
async function settle(pool: pg.Pool): Promise<void> {
  await pool.query('vacuum analyze');
  await pool.query('checkpoint');
}

function describeSeed(seeded: Seeded, analyzeMs: number): string {
  const total = seeded.entityMs + seeded.relationshipMs;
  return (
    `seed:       ${seeded.entities.length} entities in ${seconds(seeded.entityMs)} (${((seeded.entities.length / seeded.entityMs) * 1000).toFixed(0)}/s), ` +
    `${seeded.relationships} relationships in ${seconds(seeded.relationshipMs)} (${((seeded.relationships / seeded.relationshipMs) * 1000).toFixed(0)}/s): ` +
    `${seconds(total)} through ${seeded.requests} POST ENV/batch requests, 2 in flight; ANALYZE ${seconds(analyzeMs)}`
  );
}

export const httpBench: Benchmark = {
  name: 'http',
  async run() {
    const settings = readSettings();
    const { seconds: caseSeconds, sections } = settings;
    const scratch = await mkdtemp(join(tmpdir(), 'cellplane-bench-http-'));
    const profileDir = process.env.BENCH_HTTP_PROFILE;
    if (profileDir) await mkdir(profileDir, { recursive: true });
    // undone in reverse, whether the run finished or not: children stopped, pool closed, database dropped
    const undo: (() => Promise<unknown>)[] = [];
    let finished = false;
    try {
      console.log('Cellplane benchmark: the API over HTTP');
      const postgres = await freshPostgres(settings.adminUrl, DATABASE_NAME);
      undo.push(postgres.drop);
      const pool = new pg.Pool({ connectionString: postgres.url, max: 1 });
      undo.push(() => pool.end());
      const app = await startApp({ kind: 'postgres', url: postgres.url }, join(scratch, 'app-postgres.log'), 'app-postgres');
      undo.push(app.stop);
      const target = await bootstrap(app, 'postgres');
      const seeded = await seed(target, settings.entities);
      const analyzeStart = performance.now();
      await pool.query('analyze');
      const analyzeMs = performance.now() - analyzeStart;
      const version = ((await pool.query('show server_version')).rows[0] as { server_version: string }).server_version;
      const { rows: envRows } = await pool.query(
        `select e.id from environments e join projects p on p.id = e.project_id join orgs o on o.id = p.org_id
         where o.slug = $1 and p.slug = $2 and e.name = 'default'`,
        [target.org, target.project],
      );
      const envId = (envRows[0] as { id: string }).id;
      console.log(`  host:       Postgres ${version} at ${new URL(postgres.url).host}, database ${DATABASE_NAME}; app: node ${SERVER_ARGS.join(' ')} at ${app.url} (pid ${app.pid})`);
      console.log(`  node:       ${process.version} (${process.platform}/${process.arch}); load: autocannon in this process, keep-alive`);
      console.log(
        `  timing:     ${caseSeconds} s per case after a warm-up, compared cases timed in halves a, b, b, a; ` +
          `mixed load ${MIXED_WARMUP_SECONDS} s + ${settings.loadSeconds} s; children's logs in ${scratch} (kept only if the run fails)`,
      );
      console.log(`  ${describeSeed(seeded, analyzeMs)}`);

      const names = seeded.entities.map((entity) => entity.name);
      // a fresh process runs cold code (tsx-compiled, not yet optimized by V8): the reads and lists warm up first
      const warmUpApp = (url: string) => load(url, target.token, 10, mixedRequests(target, seeded, { get: 0.75, list: 0.25 }))(FIRST_WARMUP_SECONDS);
      if (sections.has('reads') || sections.has('lists')) await warmUpApp(target.url);

      // --- reads, beside the bare server -------------------------------------------------
      if (sections.has('reads')) {
        const bare = await startBare(postgres.url, envId, names[0]!, join(scratch, 'bare.log'));
        undo.push(bare.stop);
        const bareHono = await startBare(postgres.url, envId, names[0]!, join(scratch, 'bare-hono.log'), 'hono');
        undo.push(bareHono.stop);
        const leastGetServer = await startLeastWork(postgres.url, join(scratch, 'least-work-get.log'));
        undo.push(leastGetServer.stop);
        const guardedGetServer = await startLeastWork(postgres.url, join(scratch, 'least-work-guarded.log'), 'all');
        undo.push(guardedGetServer.stop);
        // the same build started after the seed: the floors never served the seed's 300,000 writes, and neither has this one
        const unseededApp = await startApp({ kind: 'postgres', url: postgres.url }, join(scratch, 'app-postgres-unseeded.log'), 'app-postgres-unseeded');
        undo.push(unseededApp.stop);
        await warmUpApp(unseededApp.url);
        // the app and its least work take the app's paths and token; the two floors take /entities/{name} and none
        const entityGet = (url: string) => (connections: number) =>
          load(url, target.token, connections, () => ({ method: 'GET', path: entityPath(target, pick(names)) }));
        const appGet = entityGet(target.url);
        const floorGet = (child: { url: string }) => (connections: number) =>
          load(child.url, undefined, connections, () => ({ method: 'GET', path: `/entities/${encodeURIComponent(pick(names))}` }));
        const bareGet = floorGet(bare);
        const honoGet = floorGet(bareHono);
        const leastGet = entityGet(leastGetServer.url);
        const guardedGet = entityGet(guardedGetServer.url);
        await bareGet(10)(FIRST_WARMUP_SECONDS);
        await honoGet(10)(FIRST_WARMUP_SECONDS);
        await leastGet(10)(FIRST_WARMUP_SECONDS);
        await guardedGet(10)(FIRST_WARMUP_SECONDS);
        const [app10, bare10] = await interleaved(appGet(10), bareGet(10), caseSeconds);
        const [app1, bare1] = await interleaved(appGet(1), bareGet(1), caseSeconds);
        // the architecture's floor, each against the bare server in a pairing of its own
        const [hono10, bareForHono10] = await interleaved(honoGet(10), bareGet(10), caseSeconds);
        const [hono1, bareForHono1] = await interleaved(honoGet(1), bareGet(1), caseSeconds);
        const [least10, bareForLeast10] = await interleaved(leastGet(10), bareGet(10), caseSeconds);
        const [least1, bareForLeast1] = await interleaved(leastGet(1), bareGet(1), caseSeconds);
        const [guarded10, bareForGuarded10] = await interleaved(guardedGet(10), bareGet(10), caseSeconds);
        const [guarded1, bareForGuarded1] = await interleaved(guardedGet(1), bareGet(1), caseSeconds);
        // the same three beside each other in the same minutes, with the CPU a GET costs each part of the machine
        const slices = await inSameSlices(
          [
            { name: 'the app', pid: app.pid, load: appGet(10) },
            { name: 'the app, unseeded', pid: unseededApp.pid, load: entityGet(unseededApp.url)(10) },
            { name: 'least work kept whole', pid: guardedGetServer.pid, load: guardedGet(10) },
            { name: 'bare node:http + pg', pid: bare.pid, load: bareGet(10) },
          ],
          { rounds: SLICE_ROUNDS, seconds: SLICE_SECONDS, database: DATABASE_NAME },
        );
        await Promise.all([bare.stop(), bareHono.stop(), leastGetServer.stop(), guardedGetServer.stop(), unseededApp.stop()]);
        const trials = {
          app10,
          bare10,
          app1,
          bare1,
          hono10,
          bareForHono10,
          hono1,
          bareForHono1,
          least10,
          bareForLeast10,
          least1,
          bareForLeast1,
          guarded10,
          bareForGuarded10,
          guarded1,
          bareForGuarded1,
        };
        for (const [what, trial] of Object.entries(trials)) {
          if (trial.non2xx || trial.errors) throw new Error(`GET ${what}: ${describeOutcome(trial)}`);
        }
        const floorNote = `floor: bare node:http + pg Pool(10), one named select by (env_id, name), the row as JSON; names drawn at random from the ${names.length}`;
        const honoNote = 'not a target: Hono on @hono/node-server with that select as its one route and no middleware, vs the bare server in the same run';
        const leastNote =
          "not a target: Hono alone, its one route running the app's own statements (the token, tenancy and grants checked in the entity's read, then the remembered answer's access epoch beside it) with the token hashed, vs the bare server in the same run";
        const guardedNote =
          'not a target: that least work with the per-request guarantees each in its least form (a request id, one log line, a rate-limit count and its headers, the path validated by zod), vs the bare server in the same run';
        printRows('Reads (Postgres)', [
          atLeast('GET ENV/entities/{name}, 10 clients', perSecond(app10), perSecond(bare10), 'req/s', 0.7, `${floorNote}; app p50 ${p50(app10).toFixed(2)} ms, floor ${p50(bare10).toFixed(2)} ms`),
          atMost('GET ENV/entities/{name}, 1 client, p50', p50(app1), p50(bare1), 'ms', 1.5, `${app1.ok} and ${bare1.ok} requests; p99 ${quantile(app1.latencies, 0.99).toFixed(2)} vs ${quantile(bare1.latencies, 0.99).toFixed(2)} ms`),
          atLeast('  Hono alone: GET, 10 clients', perSecond(hono10), perSecond(bareForHono10), 'req/s', 0.7, honoNote),
          atMost('  Hono alone: GET, 1 client, p50', p50(hono1), p50(bareForHono1), 'ms', 1.5, honoNote),
          atLeast('  least work: GET, 10 clients', perSecond(least10), perSecond(bareForLeast10), 'req/s', 0.7, leastNote),
          atMost('  least work: GET, 1 client, p50', p50(least1), p50(bareForLeast1), 'ms', 1.5, leastNote),
          atLeast('  least work kept whole: GET, 10 clients', perSecond(guarded10), perSecond(bareForGuarded10), 'req/s', 0.7, guardedNote),
          atMost('  least work kept whole: GET, 1 client, p50', p50(guarded1), p50(bareForGuarded1), 'ms', 1.5, guardedNote),
        ]);
        printSlices(
          `The GET at 10 clients in the same slices (not a target): ${SLICE_ROUNDS} rounds of a ${SLICE_SECONDS}-s slice each, the order reversed every round; µs of CPU a GET. ` +
            '"the app" took the seed; "the app, unseeded" is the same build started after it, warmed up alike',
          slices,
        );
      }

      // --- lists: the deepest page against the first, for every filter --------------------
      if (sections.has('lists')) {
        const listRows: Row[] = [];
        let labelFirstPage: string | undefined;
        for (const filter of seeded.filters) {
          const pages = await walk(target, filter);
          if (filter.query.label === 'tier:gold') labelFirstPage = pages.first;
          if (!pages.deepest) {
            console.log(`  (list ${filter.label}: ${pages.matches} matches, fewer than two pages: no deepest page to time)`);
            continue;
          }
          const page = (path: string) => load(target.url, target.token, 1, () => ({ method: 'GET', path }));
          const [first, deepest] = await interleaved(page(pages.first), page(pages.deepest), caseSeconds);
          if (first.non2xx + first.errors + deepest.non2xx + deepest.errors) throw new Error(`list ${filter.label}: ${describeOutcome(merge([first, deepest]))}`);
          listRows.push(
            atMost(`list ${filter.label}: deepest ÷ first page, p50`, p50(deepest), p50(first), 'ms', 1.2, `${pages.matches} matches, pages of ${PAGE}, 1 client; floor column: the first page`),
          );
      }
      if (!labelFirstPage) throw new Error('the seed has no label=tier:gold filter');
      // what the list sends for it (src/modules/entities/service.ts listEntities), unnamed as drizzle sends it
      const labelSql = 'select * from entities where env_id = $1 and labels @> $2::jsonb order by name limit $3';
      const [appLabel, rawLabel] = await interleaved(
        load(target.url, target.token, 1, () => ({ method: 'GET', path: labelFirstPage })),
        rawCase(pool, labelSql, [envId, JSON.stringify({ tier: 'gold' }), PAGE + 1]),
        caseSeconds,
      );
      listRows.push(
        atMost('list label=tier:gold first page p50 vs its SQL raw', p50(appLabel), p50(rawLabel), 'ms', 2, `floor: "${labelSql}" through pg from this process, one at a time`),
      );
      printRows(`Lists (Postgres, ${names.length} entities)`, listRows);
      }

      // --- writes ---------------------------------------------------------------------------
      if (sections.has('writes')) {
        const services = seeded.services;
        if (services.length <= 200) throw new Error('the relationship creates need more than 200 services: raise BENCH_HTTP_ENTITIES');
        let createdEntities = 0;
        let createdRelationships = 0;
        const createEntity = load(target.url, target.token, 10, () => ({
          method: 'POST',
          path: `${target.env}/entities`,
          body: entityBody(`w-${String(createdEntities++).padStart(7, '0')}`),
        }));
        // a new (from, to) pair each call: the seed linked each service to the next and the seventh, these skip 100 and more
        const createRelationship = load(target.url, target.token, 10, () => {
          const n = createdRelationships++;
          const from = n % services.length;
          const to = (from + 100 + Math.floor(n / services.length)) % services.length;
          return { method: 'POST', path: `${target.env}/relationships`, body: JSON.stringify({ relationshipType: 'depends-on', from: services[from], to: services[to] }) };
        });
        const countRows = async () =>
          ((await pool.query('select (select count(*) from entities)::int as entities, (select count(*) from relationships)::int as relationships')).rows[0] as {
            entities: number;
            relationships: number;
          });
        const before = await countRows();
        const [relationshipTrial, entityTrial] = await interleaved(
          allCreated('POST ENV/relationships', createRelationship),
          allCreated('POST ENV/entities', createEntity),
          caseSeconds,
        );
        const after = await countRows();
        // a request cut off when a run ends may still commit, so there may be more rows than 201s, never fewer
        if (after.relationships - before.relationships < relationshipTrial.ok || after.entities - before.entities < entityTrial.ok) {
          throw new Error(`creates answered 201 but their rows are not there: ${JSON.stringify({ before, after, relationships: relationshipTrial.ok, entities: entityTrial.ok })}`);
      }
      printRows('Writes (Postgres)', [
        atLeast(
          'POST ENV/relationships vs POST ENV/entities, 10 clients',
          perSecond(relationshipTrial),
          perSecond(entityTrial),
          'req/s',
          0.9,
          `every request a new row (201 only): ${relationshipTrial.ok} relationships, ${entityTrial.ok} entities timed; ` +
            `p50 ${p50(relationshipTrial).toFixed(2)} vs ${p50(entityTrial).toFixed(2)} ms`,
        ),
      ]);

      }

      if (sections.has('load')) printRows('Sustained mixed load (Postgres)', await mixedLoad(target, seeded, settings));
      if (sections.has('deliveries')) {
        // the writes and the mixed load before leave tens of thousands of rows for autovacuum, which would run during the drain
        await settle(pool);
        printRows('Deliveries (Postgres)', await measureDeliveries(target, postgres.url, envId));
      }
      if (sections.has('stream')) {
        await settle(pool);
        printRows('Change stream cost (Postgres)', await measureStreamCost(target));
      }
      await app.stop();
      if (!sections.has('pglite')) {
        finished = true;
        return;
      }

      // --- PGlite: seeded, analyzed with the server stopped, then loaded --------------------
      const dataDir = join(scratch, 'pglite');
      const seeding = await startApp({ kind: 'pglite', dataDir }, join(scratch, 'app-pglite-seed.log'), 'app-pglite-seed');
      undo.push(seeding.stop);
      const pgliteSeedTarget = await bootstrap(seeding, 'pglite');
      const pgliteSeeded = await seed(pgliteSeedTarget, settings.pgliteEntities);
      await seeding.stop();
      // the Node host analyzes its embedded database only every 10 minutes (keepStatistics): here, once, as on Postgres
      const analyzePgliteStart = performance.now();
      const embedded = await openPglite(pgliteDirectory(dataDir));
      try {
        await analyze(embedded);
      } finally {
        await embedded.close();
      }
      const analyzePgliteMs = performance.now() - analyzePgliteStart;
      const pglite = await startApp({ kind: 'pglite', dataDir }, join(scratch, 'app-pglite.log'), 'app-pglite');
      undo.push(pglite.stop);
      const pgliteTarget: HttpTarget = { ...pgliteSeedTarget, url: pglite.url, pid: pglite.pid };
      console.log(`\nPGlite (embedded in the child, data in ${dataDir}), pid ${pglite.pid} after a restart:`);
      console.log(`  ${describeSeed(pgliteSeeded, analyzePgliteMs)}`);
      const pgliteLoad = await mixedLoad(pgliteTarget, pgliteSeeded, settings);
      await pglite.stop();
      // the evidence under the RSS row: what PGlite's own query path promotes, with no app around it
      printRows('Sustained mixed load (PGlite)', [...pgliteLoad, ...(await measurePromotion(postgres.url))]);
      finished = true;
    } finally {
      for (const step of undo.reverse()) {
        await step().catch((error: unknown) => console.error('cleanup:', error));
      }
      if (finished) await rm(scratch, { recursive: true, force: true });
      else console.error(`http bench: the children's logs are kept in ${scratch}`);
    }
  },
};
