import { describe, expect, it } from 'vitest';
import { createNodePlatform } from '../../src/node/platform';
import { TEST_SECRETS } from '../support/node-app';
import { createDatabaseUrl, usingPostgres } from '../support/node-database';

describe('the Node host platform', () => {
  it('names prepared statements on a real Postgres server only, not on PGlite served over a socket', async () => {
    const database = await createDatabaseUrl();
    try {
      const node = await createNodePlatform({ ...TEST_SECRETS, DATABASE_URL: database.url }, { logSink: () => {} });
      try {
        // createDatabaseUrl is a fresh database on TEST_DATABASE_URL's server, or PGlite behind pglite-socket
        expect(node.platform.namedStatements).toBe(usingPostgres());
      } finally {
        await node.close();
      }
    } finally {
      await database.close();
    }
  });
});
