// `npm start`'s first step: the Node host (src/node/server.ts) compiled to
// build/node/server.mjs by esbuild, in well under a second. Only this
// project's sources go in the bundle; packages stay in node_modules, where
// they resolve as they always do (PGlite finds its wasm beside itself).
// Names are not kept: tsx's on-the-fly transpiling keeps them by wrapping
// every named function in __name(), a call per closure made per request
// (bench/README.md, "2026-11-26, fourth"). The bundle sits two directories
// below the root, as src/node/ does, so paths taken from import.meta.url
// (the migrations folder) resolve to the same place.
//
// Run, it builds; imported (the tests' globalSetup, the HTTP bench), it
// offers the build and the command that runs what it built.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** node's arguments for the built server, from the project root: what package.json's `start` runs after the build. */
export const SERVER_ARGS = ['--enable-source-maps', 'build/node/server.mjs'];

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
