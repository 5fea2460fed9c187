import { defineConfig } from 'vitest/config';

/**
 * Two projects: `node` runs the API in-process on PGlite (or on the Postgres
 * of TEST_DATABASE_URL); `workers` runs the Worker entry inside workerd,
 * reaching the database through the Neon driver (test/workers/vitest.config.ts).
 */
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'node',
          include: ['test/node/**/*.test.ts'],
          environment: 'node',
          // `npm start`'s build, for the tests that start the host as a process
          globalSetup: ['test/support/build-server.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      'test/workers/vitest.config.ts',
    ],
  },
});
