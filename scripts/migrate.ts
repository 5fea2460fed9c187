import { SECRET_VARIABLES } from '../src/config';
import { createLogger } from '../src/logger';
import { migrateDatabase, openPostgres } from '../src/node/database';
import { Secret } from '../src/secret';

/**
 * `npm run db:migrate`: applies pending migrations to the Postgres of
 * DATABASE_URL (Neon for the Worker host; the Worker never migrates, the
 * drizzle migrator reads files). Safe beside a running server: migrations
 * take an advisory lock. The URL is never printed; errors are scrubbed of it.
 */
async function main(): Promise<number> {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('db:migrate: DATABASE_URL is required: the postgres:// connection string of the database to migrate');
    return 1;
  }
  if (!/^postgres(ql)?:\/\//.test(url)) {
    console.error('db:migrate: DATABASE_URL expects a postgres:// or postgresql:// connection string');
    return 1;
  }
  const database = openPostgres(url, { max: 1 });
  try {
    await migrateDatabase(database);
    console.log('db:migrate: the database is up to date');
    return 0;
  } catch (error) {
    const secrets = SECRET_VARIABLES.map((name) => process.env[name])
      .filter((value): value is string => Boolean(value))
      .map((value) => new Secret(value));
    createLogger({ secrets }).error('db:migrate failed', { error });
    return 1;
  } finally {
    await database.close();
  }
}

main().then((code) => process.exit(code));
