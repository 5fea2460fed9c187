/**
 * What a database driver leaves for V8's old generation, per query, without
 * the app: the PGlite mixed-load RSS row (bench/http.ts) rises between full
 * collections, and this says how much of that rise the embedded database's
 * own query path makes.
 *
 * Each driver runs in a child process of its own under `node
 * --trace-gc-nvp`, which prints one line per collection with the bytes
 * allocated since the last one and the bytes it promoted to the old
 * generation. The child makes a table of 10,000 rows, warms up, then sends
 * QUERIES selects of one row by a unique key, one at a time, as the app's
 * GET does; the parent sums the scavenges between the child's BEGIN and END
 * lines. The same loop runs on embedded PGlite (in memory) and on
 * node-postgres against the bench's Postgres server, whose promotion is the
 * floor: what a driver of the same API with the database out of process
 * leaves.
 *
 * Run as a child: `node --trace-gc-nvp --import tsx bench/http/promotion.ts
 * pglite|postgres` (DATABASE_URL for postgres).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { informs, type Row } from './target';

const ROWS = 10_000;
const WARMUP = 2_000;
const QUERIES = 20_000;
const SCRIPT = fileURLToPath(import.meta.url);

type Driver = 'pglite' | 'postgres';
const SELECT = 'select * from promotion where name = $1';

/** A driver's two calls: a statement run once, and the select by name the loop repeats. */
interface Connection {
  exec(text: string): Promise<unknown>;
  select(name: string): Promise<unknown>;
  close(): Promise<void>;
}

async function connect(driver: Driver): Promise<Connection> {
  if (driver === 'pglite') {
    const db = new PGlite();
    return { exec: (text) => db.exec(text), select: (name) => db.query(SELECT, [name]), close: () => db.close() };
  }
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  return {
    exec: (text) => client.query(text),
    // named, as the app's statements are on Postgres (Platform.namedStatements)
    select: (name) => client.query({ name: 'promotion_by_name', text: SELECT, values: [name] }),
    close: () => client.end(),
  };
}

async function child(driver: Driver): Promise<void> {
  const db = await connect(driver);
  // temporary: on a shared Postgres server nothing is left behind
  await db.exec('create temporary table promotion (id serial primary key, name text unique, properties jsonb, created_at timestamptz default now())');
  await db.exec(
    `insert into promotion (name, properties) select 'row-' || g, jsonb_build_object('owner', 'team-' || g % 10, 'region', 'eu-west-1') from generate_series(1, ${ROWS}) g`,
  );
  const name = (i: number) => `row-${1 + ((i * 7919) % ROWS)}`;
  for (let i = 0; i < WARMUP; i++) await db.select(name(i));
  console.log('BEGIN');
  for (let i = 0; i < QUERIES; i++) await db.select(name(i));
  console.log('END');
  await db.close();
}

/** Bytes allocated and promoted by the scavenges between BEGIN and END in --trace-gc-nvp output. */
function sumScavenges(output: string): { allocated: number; promoted: number; scavenges: number } {
  const lines = output.split('\n');
  const from = lines.indexOf('BEGIN');
  const to = lines.indexOf('END');
  if (from < 0 || to < from) throw new Error(`promotion: no BEGIN/END in the child's output:\n${output.slice(-2000)}`);
  let allocated = 0;
  let promoted = 0;
  let scavenges = 0;
  for (const line of lines.slice(from, to)) {
    if (!/\bgc=s\b/.test(line)) continue;
    scavenges++;
    allocated += Number(/\ballocated=(\d+)/.exec(line)?.[1] ?? 0);
    promoted += Number(/\bpromoted=(\d+)/.exec(line)?.[1] ?? 0);
  }
  return { allocated, promoted, scavenges };
}

function runChild(driver: Driver, databaseUrl: string): Promise<ReturnType<typeof sumScavenges>> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--trace-gc-nvp', '--import', 'tsx', SCRIPT, driver], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: databaseUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let errors = '';
    proc.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`promotion child (${driver}) exited ${code}:\n${errors.slice(-2000)}`));
      try {
        resolve(sumScavenges(output));
      } catch (error) {
        reject(error);
      }
    });
  });
}

/**
 * PGlite's own promotion per query against node-postgres's, both measured
 * here: not a target, the evidence under the PGlite RSS row.
 */
export async function measurePromotion(databaseUrl: string): Promise<Row[]> {
  const embedded = await runChild('pglite', databaseUrl);
  const server = await runChild('postgres', databaseUrl);
  const kib = (bytes: number) => bytes / QUERIES / 1024;
  const describe = (what: string, m: ReturnType<typeof sumScavenges>) =>
    `${what}: ${kib(m.allocated).toFixed(1)} KiB allocated and ${kib(m.promoted).toFixed(2)} KiB promoted a query, ${m.scavenges} scavenges`;
  return [
    informs(
      '  PGlite alone: promoted to the old generation, per query',
      kib(embedded.promoted),
      kib(server.promoted),
      'KiB',
      `not a target: ${QUERIES} one-row selects by key, one at a time, no app (bench/http/promotion.ts); ` +
        `${describe('PGlite in memory', embedded)}; ${describe('floor, node-postgres to the Postgres server', server)}`,
    ),
  ];
}

if (process.argv[1] === SCRIPT) {
  const driver = process.argv[2];
  if (driver !== 'pglite' && driver !== 'postgres') throw new Error(`promotion: expected pglite or postgres, got ${driver}`);
  await child(driver);
}
