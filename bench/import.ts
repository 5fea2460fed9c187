/**
 * The Terraform import (issue 13, Benchmarks), on the real path: a
 * generated state of BENCH_IMPORT_RESOURCES managed instances (default
 * 100,000, with dependencies) imported by `importTerraform` through the SDK
 * against the app served over HTTP on 127.0.0.1, so every entity crosses
 * JSON, HTTP, validation and `POST ENV/batch` as a user's import does.
 *
 * - import: entity types, relationship types, entities and relationships,
 *   timed end to end: entities per second;
 * - re-import of the unchanged state: timed, and it must write nothing (the
 *   environment's change_seq and its entities' max(updated_at) stay put);
 * - baseline, same run, same database: the same entity rows (read back from
 *   the import) inserted into a second, fresh environment of the project by
 *   raw multi-row INSERTs of 1000 rows each on the raw driver: rows per second.
 *
 * Targets (issue 13): import ÷ baseline >= 0.5x, and >= 50x Backstage's
 * catalog ingest on this machine (156 entities/s). See bench/README.md.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { serve, type ServerType } from '@hono/node-server';
import pg from 'pg';
import { generateState } from '../src/cli/terraform/generate';
import { importTerraform, type ImportPhase, type ImportReport } from '../src/cli/terraform/run';
import { readState } from '../src/cli/terraform/state';
import { sdkTarget } from '../src/cli/terraform/target';
import type { NodeDatabase } from '../src/node/database';
import { createClient } from '../src/sdk';
import { createBenchTenant, expectStatus, json, positiveInteger, type BenchContext, type Benchmark } from './harness';

/** Backstage's catalog ingest on this machine, entities per second (issue 13: 120–156; the higher is the bar). */
const BACKSTAGE_ENTITIES_PER_SECOND = 156;
const RATIO_TARGET = 0.5;
const BACKSTAGE_TARGET = 50;
/** Rows per baseline statement (the import's own chunk size, MAX_ENTITIES_PER_REQUEST). */
const BASELINE_CHUNK = 1000;
const PHASES: ImportPhase[] = ['read', 'scan', 'entity-types', 'relationship-types', 'entities', 'relationships', 'deletes'];

// --- where the time goes: statements and requests, by import phase -------------------

interface Tally {
  count: number;
  /** Summed durations: with requests in flight together, sums can exceed the wall time. */
  ms: number;
}

const add = (tallies: Map<string, Tally>, key: string, ms: number) => {
  const tally = tallies.get(key) ?? { count: 0, ms: 0 };
  tally.count += 1;
  tally.ms += ms;
  tallies.set(key, tally);
};

/** A statement's shape, for grouping: its first words, whitespace folded, quoted names unquoted. */
const shapeOf = (text: string) => {
  const folded = text.replace(/\s+/g, ' ').replace(/"/g, '').trim();
  return folded.length > 72 ? `${folded.slice(0, 69)}...` : folded;
};

type Method = (...args: unknown[]) => unknown;

/** PGlite runs BEGIN and COMMIT itself: its transactions are timed whole, under this name. */
const WHOLE_TRANSACTION = '(PGlite transaction, whole)';

/**
 * Times every statement the driver runs while installed (BEGIN and COMMIT
 * included), keyed by `phase()` at its start and by its shape. On Postgres
 * it wraps pg.Client's query, under the pool and drizzle alike; on PGlite,
 * the instance's query and exec and a transaction's handle, as
 * recordStatements does (harness.ts). The cost is one closure and two clock
 * reads per statement, a few hundred statements per 100,000 entities.
 */
function profileStatements(database: NodeDatabase, phase: () => string) {
  const byPhase = new Map<string, Map<string, Tally>>();
  const record = (text: string, ms: number) => {
    const current = phase();
    const tallies = byPhase.get(current) ?? new Map<string, Tally>();
    byPhase.set(current, tallies);
    add(tallies, shapeOf(text), ms);
  };
  const timed = (original: Method): Method =>
    function (this: unknown, ...args: unknown[]) {
      const first = args[0];
      const text = typeof first === 'string' ? first : String((first as { text?: string } | undefined)?.text ?? '?');
      const start = performance.now();
      const last = args.length - 1;
      // Pool.query hands its client a callback; drizzle awaits the returned promise
      if (typeof args[last] === 'function') {
        const callback = args[last] as Method;
        args[last] = function (this: unknown, ...results: unknown[]) {
          record(text, performance.now() - start);
          return callback.apply(this, results);
        };
        return original.apply(this, args);
      }
      const result = original.apply(this, args);
      if (result && typeof (result as Promise<unknown>).then === 'function') {
        return (result as Promise<unknown>).then(
          (value) => {
            record(text, performance.now() - start);
            return value;
          },
          (error: unknown) => {
            record(text, performance.now() - start);
            throw error;
          },
        );
      }
      return result;
    };

  if (database.kind === 'postgres') {
    const prototype = pg.Client.prototype as unknown as { query: Method };
    const original = prototype.query;
    prototype.query = timed(original);
    return {
      byPhase,
      stop: () => {
        prototype.query = original;
      },
    };
  }
  const pglite = database.pglite as unknown as { query: Method; exec: Method; transaction: Method };
  const { query, exec, transaction } = pglite;
  pglite.query = timed(query);
  pglite.exec = timed(exec);
  pglite.transaction = function (this: unknown, callback: unknown) {
    const start = performance.now();
    return (transaction.call(this, (tx: { query: Method; exec: Method }) => {
      tx.query = timed(tx.query);
      tx.exec = timed(tx.exec);
      return (callback as Method)(tx);
    }) as Promise<unknown>).finally(() => record(WHOLE_TRANSACTION, performance.now() - start));
  };
  return {
    byPhase,
    stop: () => {
      Object.assign(pglite, { query, exec, transaction });
    },
  };
}

/** Phase boundaries from the engine's onProgress: a phase lasts from its first report to the next phase's first. */
function phaseClock() {
  const started = new Map<string, number>();
  let current = 'setup';
  return {
    current: () => current,
    onProgress: (phase: ImportPhase) => {
      if (phase === current) return;
      current = phase;
      if (!started.has(phase)) started.set(phase, performance.now());
    },
    /** Milliseconds per phase, in the engine's order, the last one ending at `end`. */
    durations(end: number): [string, number][] {
      const seen = PHASES.filter((phase) => started.has(phase));
      return seen.map((phase, i) => [phase, (i + 1 < seen.length ? started.get(seen[i + 1]!)! : end) - started.get(phase)!]);
    },
  };
}

/** The SDK's fetch, timing each request by method and route (client side: server and wire together). */
function timedFetch(phase: () => string) {
  const byPhase = new Map<string, Map<string, Tally>>();
  const fetch = async (request: Request) => {
    const start = performance.now();
    const response = await globalThis.fetch(request);
    // the body is read by the SDK after this returns: buffer it here so the time includes it
    const body = await response.arrayBuffer();
    const route = new URL(request.url).pathname.replace(/^\/[^/]+\/[^/]+/, '/{o}/{p}').replace(/\/envs\/[^/]+/, '/envs/{env}');
    const tallies = byPhase.get(phase()) ?? new Map<string, Tally>();
    byPhase.set(phase(), tallies);
    add(tallies, `${request.method} ${route}`, performance.now() - start);
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  return { fetch, byPhase };
}

/**
 * With BENCH_CPU_PROFILE=<dir>, a V8 CPU profile of this process (client and
 * server) around `work` only, written to <dir>/<name>.cpuprofile (open it in
 * Chrome DevTools or speedscope). The sampling costs a few per cent.
 */
async function cpuProfiled<T>(name: string, work: () => Promise<T>): Promise<T> {
  const dir = process.env.BENCH_CPU_PROFILE;
  if (!dir) return work();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await work();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    session.disconnect();
    await writeFile(join(dir, `${name}.cpuprofile`), JSON.stringify(profile));
  }
}

/** Clock ticks per second in /proc/<pid>/stat (USER_HZ: 100 on Linux, whatever the kernel's HZ). */
const USER_HZ = 100;

/**
 * CPU seconds (user + system) the Postgres backends of this database have
 * used, read from /proc: only when the server runs on this machine and its
 * processes are visible (undefined otherwise). Backends that exit between two
 * readings are missed; the pool keeps its connections through a run.
 */
async function backendCpu({ database, raw }: BenchContext): Promise<Map<number, number> | undefined> {
  if (database.kind !== 'postgres') return undefined;
  const { rows } = await raw('select pid from pg_stat_activity where datname = current_database()', []);
  const usage = new Map<number, number>();
  for (const { pid } of rows as { pid: number }[]) {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      // the fields after the command name (which may hold spaces), from field 3 on: utime is field 14, stime 15
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      usage.set(pid, (Number(fields[11]) + Number(fields[12])) / USER_HZ);
    } catch {
      return undefined;
    }
  }
  return usage;
}

const cpuBetween = (before: Map<number, number> | undefined, after: Map<number, number> | undefined) =>
  before && after ? [...after].reduce((sum, [pid, seconds]) => sum + seconds - (before.get(pid) ?? 0), 0) : undefined;

/**
 * Raw multi-row INSERTs into `into` ("table (columns)"), BASELINE_CHUNK rows
 * per statement, one statement at a time, each its own transaction: `shared`
 * are the first parameters of every row ($1, $2, ...), then each row's own.
 * The statements are built before the clock starts.
 */
async function timedInserts(context: BenchContext, into: string, shared: unknown[], rows: unknown[][]) {
  const statements: { text: string; params: unknown[] }[] = [];
  const sharedRefs = shared.map((_, i) => `$${i + 1}`);
  for (let offset = 0; offset < rows.length; offset += BASELINE_CHUNK) {
    const params: unknown[] = [...shared];
    const tuples = rows.slice(offset, offset + BASELINE_CHUNK).map((row) => {
      const own = row.map((value) => {
        params.push(value);
        return `$${params.length}`;
      });
      return `(${[...sharedRefs, ...own].join(', ')})`;
    });
    statements.push({ text: `insert into ${into} values ${tuples.join(', ')}`, params });
  }
  const postgresBefore = await backendCpu(context);
  const nodeBefore = process.cpuUsage();
  const start = performance.now();
  for (const statement of statements) await context.raw(statement.text, statement.params);
  const ms = performance.now() - start;
  const nodeCpu = process.cpuUsage(nodeBefore);
  return { ms, nodeCpu, postgresCpu: cpuBetween(postgresBefore, await backendCpu(context)) };
}

// --- the run -------------------------------------------------------------------------

interface Timed {
  report: ImportReport;
  ms: number;
  cpu: NodeJS.CpuUsage;
  /** CPU seconds of the database's backends, when readable. */
  postgresCpu: number | undefined;
  phases: [string, number][];
  statements: Map<string, Map<string, Tally>>;
  requests: Map<string, Map<string, Tally>>;
}

async function listen(app: BenchContext['app']): Promise<{ url: string; close(): Promise<void> }> {
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function environmentId({ raw }: BenchContext, projectId: string, name: string): Promise<string> {
  const { rows } = await raw('select id from environments where project_id = $1 and name = $2', [projectId, name]);
  const row = rows[0] as { id: string } | undefined;
  if (!row) throw new Error(`no environment "${name}" in the bench project`);
  return row.id;
}

/** What a re-import must leave as it found it. */
async function writeMarks({ raw }: BenchContext, envId: string) {
  const { rows } = await raw(
    `select e.change_seq::text as change_seq,
            (select max(updated_at)::text from entities where env_id = $1) as updated_at,
            (select count(*)::int from entities where env_id = $1) as entities,
            (select count(*)::int from relationships where env_id = $1) as relationships
     from environments e where e.id = $1`,
    [envId],
  );
  return rows[0] as { change_seq: string; updated_at: string | null; entities: number; relationships: number };
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const perSecond = (count: number, ms: number) => (count / ms) * 1000;
const fixed = (value: number, digits = 0) => value.toFixed(digits).padStart(10);

export const importBench: Benchmark = {
  name: 'import',
  async run(context) {
    const { app, database, raw, label } = context;
    const resources = positiveInteger('BENCH_IMPORT_RESOURCES', 100_000);
    const { org, projects } = await createBenchTenant(context, 'bench-import', ['terrantula']);
    const project = projects.terrantula!;
    await expectStatus(app.request(`/${org.slug}/${project.slug}/envs`, json('POST', { name: 'baseline' }, project.token)), 201, 'create baseline env');
    const importEnv = await environmentId(context, project.id, 'default');
    const baselineEnv = await environmentId(context, project.id, 'baseline');

    // the state, generated and read untimed: the import times what it does with a state it has
    const generateStart = performance.now();
    const state = readState(generateState({ resources }), 'the generated state');
    const generateMs = performance.now() - generateStart;

    const server = await listen(app);
    const run = async (name: string): Promise<Timed> => {
      const phases = phaseClock();
      const requests = timedFetch(phases.current);
      const client = createClient({ baseUrl: server.url, token: project.token, fetch: requests.fetch });
      const target = sdkTarget(client, { org: org.slug, project: project.slug, env: 'default' });
      const postgresBefore = await backendCpu(context);
      const statements = profileStatements(database, phases.current);
      const cpuStart = process.cpuUsage();
      const start = performance.now();
      let report: ImportReport;
      let end: number;
      let cpu: NodeJS.CpuUsage;
      try {
        report = await cpuProfiled(name, () => importTerraform({}, { target, state, onProgress: phases.onProgress }));
        end = performance.now();
        cpu = process.cpuUsage(cpuStart);
      } finally {
        statements.stop();
      }
      const postgresCpu = cpuBetween(postgresBefore, await backendCpu(context));
      return { report, ms: end - start, cpu, postgresCpu, phases: phases.durations(end), statements: statements.byPhase, requests: requests.byPhase };
    };

    let first: Timed;
    let again: Timed;
    let before: Awaited<ReturnType<typeof writeMarks>>;
    let after: Awaited<ReturnType<typeof writeMarks>>;
    try {
      // 1. the import
      first = await run('import');
      const instances = first.report.instances;
      if (first.report.entities.created.length !== instances || first.report.entities.invalid.length || first.report.entities.conflicts.length) {
        throw new Error(
          `import: expected ${instances} entities created, got ${first.report.entities.created.length} (${first.report.entities.invalid.length} invalid, ${first.report.entities.conflicts.length} conflicts)`,
        );
      }
      before = await writeMarks(context, importEnv);
      if (before.entities !== instances || before.relationships !== first.report.relationships.created) {
        throw new Error(`import: the environment holds ${before.entities} entities and ${before.relationships} relationships, the report says ${instances} and ${first.report.relationships.created}`);
      }

      // 2. the same state again: nothing to write
      again = await run('re-import');
      after = await writeMarks(context, importEnv);
      const r = again.report;
      if (r.entities.created.length || r.entities.updated.length || r.entities.deleted.length || r.relationships.created || r.relationships.updated || r.relationships.deleted) {
        throw new Error(`re-import of an unchanged state wrote: ${JSON.stringify({ entities: r.entities, relationships: r.relationships }).slice(0, 500)}`);
      }
      if (after.change_seq !== before.change_seq || after.updated_at !== before.updated_at || after.entities !== before.entities || after.relationships !== before.relationships) {
        throw new Error(`re-import of an unchanged state wrote: before ${JSON.stringify(before)}, after ${JSON.stringify(after)}`);
      }
    } finally {
      await server.close();
    }

    // 3. the baseline: the same entity rows, read back (untimed), inserted raw into a fresh environment
    const { rows: storedEntities } = await raw(
      `select entity_type_name, name, state, properties::text as properties, labels::text as labels, sync_source, last_synced_at::text as last_synced_at
       from entities where env_id = $1 order by name`,
      [importEnv],
    );
    const entityRows = (storedEntities as Record<string, string>[]).map((row) => [
      row.entity_type_name,
      row.name,
      row.state,
      row.properties,
      row.labels,
      row.sync_source,
      row.last_synced_at,
    ]);
    const baseline = await timedInserts(
      context,
      'entities (org_id, project_id, env_id, entity_type_name, name, state, properties, labels, sync_source, last_synced_at)',
      [org.id, project.id, baselineEnv],
      entityRows,
    );
    const copied = (await raw('select count(*)::int as n from entities where env_id = $1', [baselineEnv])).rows[0] as { n: number };
    if (copied.n !== entityRows.length) throw new Error(`baseline: inserted ${copied.n} rows, expected ${entityRows.length}`);

    // diagnostic: the import's relationships too, raw, between the baseline's entities (what they cost at the floor)
    const { rows: storedRelationships } = await raw(
      `select r.relationship_type_name, b_from.id as from_id, b_to.id as to_id, r.state, r.properties::text as properties, r.labels::text as labels
       from relationships r
       join entities f on f.id = r.from_entity_id
       join entities t on t.id = r.to_entity_id
       join entities b_from on b_from.env_id = $2 and b_from.name = f.name
       join entities b_to on b_to.env_id = $2 and b_to.name = t.name
       where r.env_id = $1 order by r.relationship_type_name, b_from.id, b_to.id`,
      [importEnv, baselineEnv],
    );
    const relationshipRows = (storedRelationships as Record<string, string>[]).map((row) => [
      row.relationship_type_name,
      row.from_id,
      row.to_id,
      row.state,
      row.properties,
      row.labels,
    ]);
    const relationshipBaseline = await timedInserts(
      context,
      'relationships (org_id, project_id, env_id, relationship_type_name, from_entity_id, to_entity_id, state, properties, labels)',
      [org.id, project.id, baselineEnv],
      relationshipRows,
    );

    // --- print --------------------------------------------------------------------------
    const report = first.report;
    const importRate = perSecond(report.instances, first.ms);
    const baselineRate = perSecond(entityRows.length, baseline.ms);
    const ratioValue = importRate / baselineRate;
    const backstage = importRate / BACKSTAGE_ENTITIES_PER_SECOND;
    const everything = (baseline.ms + relationshipBaseline.ms) / first.ms;
    const verdict = (ok: boolean) => (ok ? 'PASS' : 'MISS');

    console.log('Cellplane benchmark: Terraform import');
    console.log(`  host:       ${label}`);
    if (database.kind === 'pglite') {
      console.log("              (PGlite: the issue's figures are for Postgres; run with BENCH_DATABASE_URL for them)");
    }
    console.log(`  node:       ${process.version} (${process.platform}/${process.arch})`);
    console.log(
      `  state:      ${report.instances} managed instances of ${report.resources} resources, ${report.dataSourceInstancesSkipped} data-source instance(s) skipped, ` +
        `${report.entityTypes.created.length} entity types, ${report.relationshipTypes.created.length} relationship types, ` +
        `${report.relationships.created} dependsOn relationships (generated and read in ${seconds(generateMs)}, untimed)`,
    );
    console.log(`  import:     importTerraform through the SDK, app served by @hono/node-server on ${server.url} (client and server in this one process)`);
    console.log(`  baseline:   the same ${entityRows.length} entity rows, raw multi-row INSERT of ${BASELINE_CHUNK} rows per statement, one at a time, into a fresh environment`);
    console.log('');
    // CPU (user + system): this process holds the import's client and the server; the backends are Postgres's side
    console.log(`${'case'.padEnd(30)}${'time'.padStart(10)}${'rows/s'.padStart(10)}${'node cpu'.padStart(11)}${'postgres cpu'.padStart(14)}`);
    console.log('-'.repeat(75));
    const cpu = (usage: NodeJS.CpuUsage) => seconds((usage.user + usage.system) / 1000).padStart(11);
    const pgCpu = (value: number | undefined) => (value === undefined ? 'n/a' : seconds(value * 1000)).padStart(14);
    const line = (name: string, ms: number, rows: number, node: NodeJS.CpuUsage, postgres: number | undefined) =>
      console.log(`${name.padEnd(30)}${seconds(ms).padStart(10)}${fixed(perSecond(rows, ms))}${cpu(node)}${pgCpu(postgres)}`);
    line('import', first.ms, report.instances, first.cpu, first.postgresCpu);
    line('re-import, unchanged', again.ms, report.instances, again.cpu, again.postgresCpu);
    line('baseline raw INSERT', baseline.ms, entityRows.length, baseline.nodeCpu, baseline.postgresCpu);
    line('  diagnostic: relationships', relationshipBaseline.ms, relationshipRows.length, relationshipBaseline.nodeCpu, relationshipBaseline.postgresCpu);
    console.log('');
    console.log('Ratios:');
    console.log(`  import vs raw INSERT of the same rows: ${ratioValue.toFixed(2)}x; target >= ${RATIO_TARGET}x: ${verdict(ratioValue >= RATIO_TARGET)}`);
    console.log(`  import vs Backstage (${BACKSTAGE_ENTITIES_PER_SECOND} entities/s):   ${backstage.toFixed(0)}x; target >= ${BACKSTAGE_TARGET}x: ${verdict(backstage >= BACKSTAGE_TARGET)}`);
    console.log(
      `  re-import, unchanged: ${seconds(again.ms)}, ${(again.ms / first.ms).toFixed(2)}x the import; wrote nothing (change_seq ${after.change_seq}, max(updated_at) ${after.updated_at}: as before it)`,
    );
    console.log(
      `  diagnostic: import vs raw INSERT of its entities and its relationships (no change rows): ${everything.toFixed(2)}x (informational)`,
    );

    for (const [name, timed] of [
      ['import', first],
      ['re-import', again],
    ] as const) {
      console.log(`\nWhere the time goes, ${name} (per phase: wall time; requests and statements with their summed time, ${'two batch requests are in flight at once'}):`);
      for (const [phase, ms] of timed.phases) {
        console.log(`  ${phase.padEnd(20)} ${seconds(ms).padStart(9)}`);
        for (const [route, tally] of timed.requests.get(phase) ?? []) {
          console.log(`      ${String(tally.count).padStart(6)} x ${route.padEnd(46)} ${seconds(tally.ms).padStart(9)}  (${(tally.ms / tally.count).toFixed(1)} ms each)`);
        }
        const statements = [...(timed.statements.get(phase) ?? new Map<string, Tally>())].sort(([, a], [, b]) => b.ms - a.ms);
        // PGlite's whole transactions are listed, but their statements are already counted one by one
        const counted = statements.filter(([shape]) => shape !== WHOLE_TRANSACTION);
        const total = counted.reduce((sum, [, tally]) => sum + tally.ms, 0);
        const count = counted.reduce((sum, [, tally]) => sum + tally.count, 0);
        const requestCount = [...(timed.requests.get(phase)?.values() ?? [])].reduce((sum, tally) => sum + tally.count, 0);
        const perRequest = requestCount ? ` (${(count / requestCount).toFixed(1)} per request)` : '';
        if (count) console.log(`      ${String(count).padStart(6)} statements${perRequest}, ${seconds(total)} summed:`);
        for (const [shape, tally] of statements.slice(0, process.env.BENCH_VERBOSE ? undefined : 8)) {
          console.log(`        ${String(tally.count).padStart(6)} x ${seconds(tally.ms).padStart(9)}  ${shape}`);
        }
      }
    }
  },
};
