#!/usr/bin/env node
// The `cellplane` command (docs/cli.md): TypeScript sources run through tsx,
// with this package's own tsconfig whatever the working directory holds.
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
const { main } = await import('../src/cli/main.ts');

// a reader that stops early (`cellplane … | head`) is not an error
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error) => {
    if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw error;
  });
}

const code = await main({ argv: process.argv.slice(2), env: process.env, cwd: process.cwd(), stdout: process.stdout, stderr: process.stderr });
// flush what is buffered, then exit: an idle keep-alive socket or the local database must not hold the process open
await new Promise((resolve) => process.stdout.write('', resolve));
await new Promise((resolve) => process.stderr.write('', resolve));
process.exit(code);
