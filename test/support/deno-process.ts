import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { freePort, type ServerProcess } from './node-process';
import { assertNoSecretsIn } from './secret-scan';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** `npm run deno`'s command, read from package.json so the test runs exactly what users run. */
const SCRIPT: string = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).scripts.deno;

/**
 * Runs the Deno host (`npm run deno`'s command, through `sh -c`: its `exec`
 * leaves the deno binary itself as the child) with exactly `env` (plus
 * PATH); with `npm: true`, `npm run deno` itself, so that `stop` signals npm
 * and npm has to relay it. As startServerProcess (node-process.ts): with
 * DATABASE_URL, API_BASE_URL defaults to the host's own address, and `stop`
 * scans the output for secrets.
 */
export async function startDenoProcess(env: Record<string, string>, options: { npm?: boolean } = {}): Promise<ServerProcess> {
  const port = env.PORT ?? String(await freePort());
  const [command, args] = options.npm ? ['npm', ['run', 'deno', '--silent']] : ['sh', ['-c', SCRIPT]];
  const child = spawn(command, args, {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      ...(env.DATABASE_URL ? { API_BASE_URL: `http://127.0.0.1:${port}` } : {}),
      ...env,
      PORT: port,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const deadline = Date.now() + 60_000;
  while (!output.includes('cellplane listening')) {
    if (child.exitCode !== null) throw new Error(`deno host exited early (${child.exitCode}):\n${output}`);
    if (Date.now() > deadline) {
      process.kill(-child.pid!, 'SIGKILL');
      throw new Error(`deno host did not start in 60 s:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    child,
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    stop: async (signal = 'SIGTERM', options = {}) => {
      if (child.exitCode === null) {
        if (signal === 'SIGKILL' || options.group) process.kill(-child.pid!, signal);
        else child.kill(signal);
      }
      const code = await exited;
      assertNoSecretsIn(output, env, 'the output of the deno host');
      return code;
    },
  };
}

/**
 * `deno check src/deno/server.ts`: the Deno host, and the whole core it
 * imports, type-checked by Deno's TypeScript against Deno's own types
 * (tsconfig.json leaves src/deno out: tsc has no `Deno`). Offline, like the
 * host. Resolves with the exit code and output, never rejects.
 */
export async function denoCheck(): Promise<{ code: number | null; output: string }> {
  // the binary itself, as `npm run deno` finds it (package.json)
  const binary: string = createRequire(import.meta.url)('deno/install_api.cjs').runInstall();
  const child = spawn(binary, ['check', '--no-remote', '--cached-only', 'src/deno/server.ts'], {
    cwd: ROOT,
    env: { ...process.env, DENO_NO_UPDATE_CHECK: '1', NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  return new Promise((resolve) => {
    child.once('error', (error) => resolve({ code: null, output: String(error) }));
    child.once('exit', (code) => resolve({ code, output }));
  });
}
