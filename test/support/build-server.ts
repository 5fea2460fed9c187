import { buildServer } from '../../scripts/build-server.mjs';

/**
 * vitest globalSetup: builds `npm start`'s server (scripts/build-server.mjs)
 * once before any test file runs, so the tests that start the host as a
 * process (test/support/node-process.ts) run what `npm start` runs.
 */
export default async function setup(): Promise<void> {
  await buildServer();
}
