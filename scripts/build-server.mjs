// `npm start`'s first step: the Node host (src/node/server.ts) compiled to
// build/node/server.mjs by esbuild, in well under a second. Only this
// project's sources go in the bundle; packages stay in node_modules, where
// they resolve as they always do (PGlite finds its wasm beside itself).
// Names are not kept: tsx's on-the-fly transpiling keeps them by wrapping
// every named function in __name(), a call per closure made per request
// (bench/http-results.md, "2026-11-26, fourth"). The bundle sits two directories
// below the root, as src/node/ does, so paths taken from import.meta.url
// (the migrations folder) resolve to the same place.
//
// Run, it builds; imported (the tests' globalSetup, the HTTP bench), it
// offers the build and the command that runs what it built.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/**
 * node's arguments for the built server, from the project root: what
 * package.json's `start` runs after the build (test/node/node-host.test.ts
 * holds the two to each other).
 *
 * `--no-allocation-site-pretenuring`: V8 otherwise learns, from code that
 * keeps many objects alive for a while (a 1,000-entity batch, a Terraform
 * import), to allocate straight into the old generation at every site that
 * code shares with the request path (drizzle, pg, zod, JSON), and it keeps
 * doing so afterwards. Each request's short-lived objects then land in the
 * old generation: scavenges took 3-5 ms instead of about 1, every one moved
 * 1.3 MB more into old space, and a GET cost 10-20 % more CPU for the rest of
 * the process's life (bench/http-results.md, "2026-11-27, sixth"; docs/decisions.md,
 * "The Node host's V8 flags").
 *
 * `--no-parallel-scavenge`: each scavenge of the young generation runs on the
 * main thread alone. In parallel, its helper threads compete for the same
 * cores as the requests, Postgres and the clients; on this project's 2-core
 * machines a GET spent 4-13 % less CPU without them, and the median scavenge
 * took 1.0 ms instead of 1.8 (bench/http-results.md, "2026-11-28, later").
 *
 * `--heap-growing-percent=20`: the next full collection comes once the old
 * generation has grown by a fifth of what the last one kept, where V8 would
 * pick a factor of its own between 1.1 and 4. Garbage promoted to the old
 * generation is freed only by a full collection, and the embedded database's
 * query path promotes about 2 KiB a query (bench/http/promotion.ts): under
 * sustained load the process's memory rose by a quarter before V8 collected
 * it, and now stays within a few per cent (docs/decisions.md, "Embedded
 * database memory").
 */
export const SERVER_ARGS = [
  '--enable-source-maps',
  '--no-allocation-site-pretenuring',
  '--no-parallel-scavenge',
  '--heap-growing-percent=20',
  'build/node/server.mjs',
];

export async function buildServer() {
  await build({
    absWorkingDir: root,
    entryPoints: ['src/node/server.ts'],
    outfile: 'build/node/server.mjs',
    bundle: true,
    packages: 'external',
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: true,
    logLevel: 'warning',
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildServer();
