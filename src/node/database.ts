import { sql } from 'drizzle-orm';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Db } from '../db/client';
import * as schema from '../db/schema';

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../migrations', import.meta.url));

/** Any number: an application-wide key so concurrent starts migrate one at a time. */
const MIGRATION_LOCK_KEY = 7_262_001;

export type NodeDatabase =
  | { kind: 'pglite'; db: Db; pglite: PGlite; close(): Promise<void> }
  | { kind: 'postgres'; db: Db; pool: pg.Pool; close(): Promise<void> };

/** PGlite in `dataDir` (in memory when `dataDir` is undefined). */
export async function openPglite(dataDir: string | undefined): Promise<NodeDatabase> {
  const pglite = dataDir === undefined ? new PGlite() : new PGlite(dataDir);
  await pglite.waitReady;
  const db = drizzlePglite(pglite, { schema }) as unknown as Db;
  return { kind: 'pglite', db, pglite, close: () => pglite.close() };
}

export function openPostgres(connectionString: string, options: { max?: number } = {}): NodeDatabase {
  const pool = new pg.Pool({ connectionString, max: options.max ?? 10 });
  // an idle client losing its server must not crash the process; the pool replaces it
  pool.on('error', () => {});
  const db = drizzlePg(pool, { schema }) as unknown as Db;
  return { kind: 'postgres', db, pool, close: () => pool.end() };
}

/**
 * Applies pending migrations. On Postgres a session advisory lock makes
 * concurrent starts (several processes, a deploy beside a running server)
 * apply them once.
 */
export async function migrateDatabase(database: NodeDatabase): Promise<void> {
  if (database.kind === 'pglite') {
    await migratePglite(drizzlePglite(database.pglite), { migrationsFolder: MIGRATIONS_FOLDER });
    return;
  }
  const client = await database.pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await migratePg(drizzlePg(client), { migrationsFolder: MIGRATIONS_FOLDER });
    } finally {
      await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    client.release();
  }
}

/** How often the embedded database's planner statistics are refreshed (keepStatistics). */
export const ANALYZE_INTERVAL_MS = 10 * 60 * 1000;

/**
 * PGlite has no autovacuum, so its tables are never analyzed: without
 * statistics the planner takes every equality at a default selectivity and,
 * at tens of thousands of rows, can probe a short prefix of the wrong index
 * for each of thousands of keys (bench/README.md, import). The Node host
 * therefore runs ANALYZE itself on the embedded database every
 * ANALYZE_INTERVAL_MS while it runs (a Postgres server has its own
 * autovacuum for this). An ANALYZE holds PGlite's one session for its
 * duration (tens to hundreds of milliseconds at 100,000 rows).
 */
export function keepStatistics(
  database: NodeDatabase,
  onError: (error: unknown) => void,
  intervalMs = ANALYZE_INTERVAL_MS,
): { stop(): Promise<void> } {
  if (database.kind !== 'pglite') return { stop: async () => {} };
  let running: Promise<unknown> | undefined;
  const timer = setInterval(() => {
    running ??= analyze(database)
      .catch(onError)
      .finally(() => (running = undefined));
  }, intervalMs);
  timer.unref();
  return {
    // an ANALYZE under way finishes before the database closes
    stop: async () => {
      clearInterval(timer);
      await running;
    },
  };
}

/** One ANALYZE of every table. */
export async function analyze(database: NodeDatabase): Promise<void> {
  await database.db.execute(sql`analyze`);
}

/**
 * How many connections the served PGlite holds open at once. Under `npm run
 * dev` the Worker opens one per request in flight (more for a request whose
 * queries run side by side), each through the WebSocket proxy; PGlite runs
 * their queries one at a time whatever their number, and a connection costs
 * three file descriptors in the dev process (proxy, client, server side).
 * pglite-socket refuses one past the limit ("Too many connections"), which
 * the Worker's request answers with a 500: at 64, the value until
 * 2026-11-27, the 65th request in flight failed (docs/decisions.md, "Local
 * Worker").
 */
const PGLITE_TCP_MAX_CONNECTIONS = 1024;

/**
 * Serves an open PGlite over the Postgres wire protocol on a free loopback
 * port, for clients that speak TCP (the `pg` driver, or the Neon driver
 * through the local WebSocket proxy). Development and tests only.
 */
export async function servePgliteOverTcp(pglite: PGlite): Promise<{ address: string; url: string; stop(): Promise<void> }> {
  const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket');
  const server = new PGLiteSocketServer({ db: pglite, host: '127.0.0.1', port: 0, maxConnections: PGLITE_TCP_MAX_CONNECTIONS });
  await server.start();
  const address = server.getServerConn();
  return { address, url: `postgres://postgres:postgres@${address}/postgres`, stop: () => server.stop() };
}
