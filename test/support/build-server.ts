import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * vitest globalSetup: builds `npm start`'s server (scripts/build-server.mjs)
 * once before any test file runs, so the tests that start the host as a
 * process (test/support/node-process.ts) run what `npm start` runs.
 */
export default function setup(): void {
  execFileSync(process.execPath, ['scripts/build-server.mjs'], { cwd: fileURLToPath(new URL('../..', import.meta.url)), stdio: 'inherit' });
}
