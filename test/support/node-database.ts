import pg from 'pg';
import { migrateDatabase, openPglite, openPostgres, servePgliteOverTcp, type NodeDatabase } from '../../src/node/database';

/**
 * A fresh, migrated database for one test file: an in-memory PGlite by
 * default, or a new database on the server of TEST_DATABASE_URL (dropped
 * again by `drop`).
 */
export interface TestDatabase {
  database: NodeDatabase;
  /** The connection string of the fresh database (Postgres only). */
  url?: string;
  drop(): Promise<void>;
}

export const usingPostgres = () => Boolean(process.env.TEST_DATABASE_URL);

export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = process.env.TEST_DATABASE_URL;
  if (!adminUrl) {
    const database = await openPglite(undefined);
    await migrateDatabase(database);
    return { database, drop: () => database.close() };
  }
  return createThrowawayPostgres(adminUrl, 'cellplane_t', 20);
}

/** A new, migrated database on the server of `adminUrl`; `drop` closes and removes it. */
export async function createThrowawayPostgres(adminUrl: string, prefix: string, max = 10): Promise<TestDatabase & { name: string }> {
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const database = openPostgres(url.toString(), { max });
  const drop = async () => {
    await database.close();
    const cleanup = new pg.Client({ connectionString: adminUrl });
    await cleanup.connect();
    await cleanup.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await cleanup.end();
  };
  try {
    await migrateDatabase(database);
  } catch (error) {
    await drop();
    throw error;
  }
  return { database, name, url: url.toString(), drop };
}

/**
 * A connection string to a fresh, empty database: a new database on the
 * TEST_DATABASE_URL server, or else an in-memory PGlite served over TCP by
 * pglite-socket, so the `pg` code path is exercised without a server.
 */
export async function createDatabaseUrl(): Promise<{ url: string; close(): Promise<void> }> {
  if (usingPostgres()) {
    // the harness's own pool stays idle; drop closes it and removes the database
    const testDatabase = await createTestDatabase();
    return { url: testDatabase.url!, close: () => testDatabase.drop() };
  }
  const database = await openPglite(undefined);
  if (database.kind !== 'pglite') throw new Error('expected an embedded PGlite');
  const served = await servePgliteOverTcp(database.pglite);
  return {
    url: served.url,
    close: async () => {
      await served.stop();
      await database.close();
    },
  };
}
