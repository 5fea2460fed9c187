import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { analyze, keepStatistics, openPglite, openPostgres, type NodeDatabase } from '../../src/node/database';

/**
 * PGlite has no autovacuum: the Node host refreshes the embedded database's
 * planner statistics itself (src/node/database.ts, keepStatistics).
 */
describe('planner statistics of the embedded database', () => {
  let database: NodeDatabase;
  const reltuples = async () => {
    const result = (await database.db.execute(sql`select reltuples from pg_class where relname = 'stats_probe'`)) as unknown as {
      rows: { reltuples: number | string }[];
    };
    return Number(result.rows[0]!.reltuples);
  };

  beforeAll(async () => {
    database = await openPglite(undefined);
    await database.db.execute(sql`create table stats_probe (n int)`);
    await database.db.execute(sql`insert into stats_probe select generate_series(1, 500)`);
  });
  afterAll(async () => {
    await database?.close();
  });

  it('are absent until an ANALYZE, which the host schedules on an interval and stops with the database', async () => {
    // -1: never analyzed (Postgres 14+), the planner guesses
    expect(await reltuples()).toBe(-1);
    const errors: unknown[] = [];
    const statistics = keepStatistics(database, (error) => errors.push(error), 20);
    await vi.waitFor(async () => expect(await reltuples()).toBe(500), { timeout: 5000, interval: 25 });
    await statistics.stop();
    expect(errors).toEqual([]);
    await database.db.execute(sql`insert into stats_probe select generate_series(1, 500)`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    // stopped: nothing refreshes them any more
    expect(await reltuples()).toBe(500);
    await analyze(database);
    expect(await reltuples()).toBe(1000);
  });

  it('leaves a Postgres server to its own autovacuum', async () => {
    // nothing listens there: an ANALYZE would fail, and report it
    const server = openPostgres('postgres://nobody@127.0.0.1:1/none');
    const errors: unknown[] = [];
    const statistics = keepStatistics(server, (error) => errors.push(error), 5);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await statistics.stop();
    await server.close();
    expect(errors).toEqual([]);
  });
});
