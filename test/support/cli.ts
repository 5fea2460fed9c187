import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The `cellplane` command run as users run it: `node bin/cellplane.mjs …`
 * in a child process, with a clean environment (PATH, a temporary HOME and
 * XDG_CONFIG_HOME, and only the variables the test gives), so nothing of
 * the developer's own config or SERVICE_* variables leaks in. stdout and
 * stderr are pipes, so the CLI sees no terminal (no colour unless forced).
 */

export const CLI_BIN = fileURLToPath(new URL('../../bin/cellplane.mjs', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A temporary user: HOME, XDG_CONFIG_HOME and a working directory of its own. */
export interface CliHome {
  root: string;
  home: string;
  configHome: string;
  /** `$XDG_CONFIG_HOME/cellplane/config.yaml`. */
  configPath: string;
  /** The working directory commands run in. */
  cwd: string;
  remove(): void;
}

export function createCliHome(): CliHome {
  const root = mkdtempSync(join(tmpdir(), 'cellplane-cli-'));
  const home = join(root, 'home');
  const configHome = join(root, 'xdg');
  const cwd = join(root, 'work');
  for (const directory of [home, configHome, cwd]) mkdirSync(directory, { recursive: true });
  return {
    root,
    home,
    configHome,
    configPath: join(configHome, 'cellplane', 'config.yaml'),
    cwd,
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
}

export interface CliOptions {
  home: CliHome;
  /** Added to the clean environment; `undefined` removes a variable (XDG_CONFIG_HOME, say). */
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** Written to stdin, which is then closed. */
  input?: string;
  /** The process is killed after this long (default 60 s) and the result says so. */
  timeoutMs?: number;
}

function cliEnvironment(options: CliOptions): Record<string, string> {
  const env: Record<string, string | undefined> = {
    PATH: process.env.PATH,
    HOME: options.home.home,
    XDG_CONFIG_HOME: options.home.configHome,
    // tsx keeps its compile cache here: shared between runs, so each start stays fast
    TMPDIR: process.env.TMPDIR,
    ...options.env,
  };
  return Object.fromEntries(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

export interface RunningCli {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves when stdout (or stderr) matches, with its text so far; rejects if the process exits first or after timeoutMs. */
  waitFor(stream: 'stdout' | 'stderr', pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<CliResult>;
}

export function startCli(args: string[], options: CliOptions): RunningCli {
  const child = spawn(process.execPath, [CLI_BIN, ...args], {
    cwd: options.cwd ?? options.home.cwd,
    env: cliEnvironment(options),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  const notify = () => listeners.forEach((listener) => listener());
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => ((stdout += chunk), notify()));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => ((stderr += chunk), notify()));
  if (options.input !== undefined) child.stdin!.end(options.input);
  else child.stdin!.end();
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
  let done = false;
  const exited = new Promise<CliResult>((resolve) =>
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      done = true;
      notify();
      resolve({ code: code ?? (signal ? -1 : null), stdout, stderr });
    }),
  );
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    waitFor(stream, pattern, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const text = stream === 'stdout' ? stdout : stderr;
          if (pattern.test(text)) return finish(() => resolve(text));
          if (done) finish(() => reject(new Error(`cellplane ${args.join(' ')} exited before ${stream} matched ${pattern}:\nstdout: ${stdout}\nstderr: ${stderr}`)));
        };
        const deadline = setTimeout(
          () => finish(() => reject(new Error(`timed out waiting for ${stream} to match ${pattern}:\nstdout: ${stdout}\nstderr: ${stderr}`))),
          timeoutMs,
        );
        const finish = (settle: () => void) => {
          clearTimeout(deadline);
          listeners.delete(check);
          settle();
        };
        listeners.add(check);
        check();
      });
    },
  };
}

/** Runs one command to its end. */
export function runCli(args: string[], options: CliOptions): Promise<CliResult> {
  return startCli(args, options).exited;
}

/** The flags that point a command at a server and a tenant. */
export function target(url: string, token: string, tenant: { org: { slug: string }; project: { slug: string } }, env = 'default'): string[] {
  return ['--base-url', url, '--token', token, '--org', tenant.org.slug, '--project', tenant.project.slug, '--env', env];
}
