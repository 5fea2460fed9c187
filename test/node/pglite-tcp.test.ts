import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPglite, servePgliteOverTcp } from '../../src/node/database';

/**
 * The embedded PGlite served over TCP (`npm run dev`, the workers tests):
 * the Worker opens a connection per request in flight, so the served
 * database must take far more at once than it once did (64), each query
 * answered in turn.
 */
describe('the embedded PGlite over TCP', () => {
  let served: Awaited<ReturnType<typeof servePgliteOverTcp>>;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const database = await openPglite(undefined);
    if (database.kind !== 'pglite') throw new Error('expected an embedded PGlite');
    served = await servePgliteOverTcp(database.pglite);
    close = async () => {
      await served.stop();
      await database.close();
    };
  });
  afterAll(() => close());

  it('answers 200 connections open at once, each its own query, as a burst of Worker requests holds them', async () => {
    const clients = Array.from({ length: 200 }, () => new pg.Client({ connectionString: served.url }));
    try {
      // every connection is open before any query runs: what 200 requests in flight hold
      await Promise.all(clients.map((client) => client.connect()));
      const answers = await Promise.all(clients.map(async (client, i) => (await client.query('select $1::int as n', [i])).rows[0].n));
      expect(answers).toEqual(clients.map((_, i) => i));
    } finally {
      await Promise.all(clients.map((client) => client.end().catch(() => {})));
    }
  });
});
