import { env } from 'cloudflare:workers';
import type { Db } from '../../src/db/client';
import { createWorkerPlatform } from '../../src/worker-platform';

/** The Worker's platform on the test bindings, for tests that read its config or its database directly. */
export const platform = createWorkerPlatform(env);

/** The database, on a connection of its own released at once (PGlite takes one session at a time). */
export async function withDb<T>(work: (db: Db) => Promise<T>): Promise<T> {
  const lease = platform.openDatabase();
  try {
    return await work(lease.db);
  } finally {
    await lease.release();
  }
}
