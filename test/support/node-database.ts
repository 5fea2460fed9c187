import pg from 'pg';
import { migrateDatabase, openPglite, openPostgres, type NodeDatabase } from '../../src/node/database';

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
  const name = `cellplane_t_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const database = openPostgres(url.toString(), { max: 20 });
  await migrateDatabase(database);
  return {
    database,
    url: url.toString(),
    drop: async () => {
      await database.close();
      const cleanup = new pg.Client({ connectionString: adminUrl });
      await cleanup.connect();
      await cleanup.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await cleanup.end();
    },
  };
}
