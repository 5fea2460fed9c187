import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { SERVER_ARGS } from '../../scripts/build-server.mjs';
import { assertNoSecretsIn } from './secret-scan';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /**
   * Sends the signal and resolves with the exit code (null when a signal
   * ended it). `group`: to the whole process group, npm and the server under
   * `npm start`, as a supervisor such as systemd does.
   */
  stop(signal?: NodeJS.Signals, options?: { group?: boolean }): Promise<number | null>;
}

/**
 * Runs `npm start`'s command (`node --enable-source-maps build/node/server.mjs`) with
 * exactly `env` (plus PATH); with `npm: true`, `npm start` itself, so that
 * `stop` signals npm and the signal has to be relayed to the server.
 */
export async function startServerProcess(env: Record<string, string>, options: { npm?: boolean } = {}): Promise<ServerProcess> {
  const port = env.PORT ?? String(await freePort());
  const [command, args] = options.npm ? ['npm', ['start', '--silent']] : [process.execPath, SERVER_ARGS];
  const child = spawn(command, args, {
    cwd: ROOT,
    // with DATABASE_URL the host requires API_BASE_URL: its own address, unless the test says otherwise ('' = unset)
    env: { PATH: process.env.PATH ?? '', ...(env.DATABASE_URL ? { API_BASE_URL: `http://127.0.0.1:${port}` } : {}), ...env, PORT: port },
    stdio: ['ignore', 'pipe', 'pipe'],
    // its own process group, so a SIGKILL reaches the server under npm too (npm relays only SIGINT and SIGTERM)
    detached: true,
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => {
    if (child.exitCode !== null) throw new Error(`server exited early (${child.exitCode}):\n${output}`);
    return output.includes('cellplane listening');
  }, 60_000);
  const server: ServerProcess = {
    child,
    url,
    output: () => output,
    stop: async (signal = 'SIGTERM', options = {}) => {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      if (signal !== 'SIGKILL') {
        if (options.group) process.kill(-child.pid!, signal);
        else child.kill(signal);
        return exited;
      }
      process.kill(-child.pid!, 'SIGKILL');
      const code = await exited;
      // under npm the server is npm's child: wait (bounded) for the whole group to be gone, its port and files with it
      await waitFor(async () => {
        try {
          process.kill(-child.pid!, 0);
          return false;
        } catch {
          return true;
        }
      }, 5_000).catch(() => {});
      return code;
    },
  };
  // the secret scan: whatever the test, the process never printed a configured secret, a token or a JWT
  const stop = server.stop;
  server.stop = async (signal, options) => {
    const code = await stop(signal, options);
    assertNoSecretsIn(output, env, 'the output of the server process');
    return code;
  };
  return server;
}

/** Runs the entry expecting it to fail at start; resolves with its exit code and output. */
export async function runFailingStart(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, SERVER_ARGS, {
    cwd: ROOT,
    // API_BASE_URL defaults with DATABASE_URL as in startServerProcess, so a start fails on what the test means it to
    env: { PATH: process.env.PATH ?? '', PORT: String(await freePort()), ...(env.DATABASE_URL ? { API_BASE_URL: 'http://127.0.0.1' } : {}), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  assertNoSecretsIn(output, env, 'the output of a failed start');
  return { code, output };
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('timed out waiting for the server');
}
