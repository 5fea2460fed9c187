import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, loadConfig, SECRET_VARIABLES } from '../src/config';
import { migrateDatabase, openPglite, openPostgres, servePgliteOverTcp } from '../src/node/database';
import { loadOrCreateLocalSecrets } from '../src/node/local-secrets';
import { startWsProxy } from '../src/node/ws-proxy';

/**
 * `npm run dev`: the real Worker entry in workerd (`wrangler dev`), offline,
 * on http://127.0.0.1:$PORT (default 8787).
 *
 * Database: without DATABASE_URL, the embedded PGlite of the Node host
 * (CELLPLANE_DATA_DIR, default `.cellplane`) served over TCP by
 * pglite-socket; with it, that Postgres, migrated first. Either way a local
 * WebSocket→TCP proxy stands in for Neon's, since the Worker reaches
 * Postgres through the Neon driver.
 *
 * Secrets reach the Worker through a temporary env file (0600, removed on
 * exit), never `--var`: wrangler prints `--var` values in its bindings table,
 * while env-file values are bound as secrets and shown as hidden.
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Server configuration passed through to the Worker when set here (QUEUE_DRIVER is wrangler.toml's). */
const PASSED_THROUGH = [
  'SERVICE_DEPLOYMENT',
  'LOG_LEVEL',
  'AUTH_URL',
  'API_BASE_URL',
  'TRUSTED_ORIGINS',
  'SERVICE_UI_BASE_URL',
  'CODEHOST_APP_ID',
  'CODEHOST_APP_NAME',
  'CODEHOST_APP_PRIVATE_KEY',
  'CODEHOST_APP_WEBHOOK_SECRET',
  // GitHub Enterprise Server, or a local GitHub test server (docs/codehost.md)
  'CODEHOST_API_URL',
  'OUTBOUND_ALLOWED_HOSTS',
  'SUPER_ADMIN_EMAILS',
  'RATE_LIMIT_PER_MINUTE',
] as const;

const log = (message: string) => console.log(`cellplane dev: ${message}`);

/** A problem the user can fix: its message is printed as is. */
class DevError extends Error {}
const fail = (message: string): never => {
  throw new DevError(message);
};

/** Error text may quote a connection string; configured secret values and URL passwords are masked. */
function scrub(text: string): string {
  let out = text;
  for (const name of SECRET_VARIABLES) {
    const value = process.env[name];
    if (value && value.length >= 4) out = out.split(value).join('[redacted]');
  }
  return out.replace(/(postgres(?:ql)?:\/\/[^:/@\s]+:)[^@\s]+@/g, '$1[redacted]@');
}

type Cleanup = () => Promise<void> | void;

async function main(): Promise<void> {
  const env = process.env;
  const port = Number(env.PORT || 8787);
  if (!Number.isInteger(port) || port < 1 || port > 65535) fail('PORT expects an integer port between 1 and 65535');

  // run newest first; draining (not a done flag) also catches what a signal during start-up left behind
  const cleanups: Cleanup[] = [];
  const cleanUp = async () => {
    for (let cleanup = cleanups.pop(); cleanup; cleanup = cleanups.pop()) {
      try {
        await cleanup();
      } catch (error) {
        console.error(`cellplane dev: cleanup failed: ${scrub(error instanceof Error ? error.message : String(error))}`);
      }
    }
  };

  let child: ChildProcess | undefined;
  let stopping = false;
  const stop = async (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: stopping`);
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((done) => child!.once('exit', () => done()));
      child.kill(signal);
      const force = setTimeout(() => child?.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(force);
    }
    await cleanUp();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));

  try {
    const workerVars: Record<string, string> = {};
    for (const name of PASSED_THROUGH) if (env[name]) workerVars[name] = env[name]!;
    // the Worker requires it; locally the API is reached where wrangler dev listens
    workerVars.API_BASE_URL ??= `http://127.0.0.1:${port}`;

    let target: string;
    let embedded = false;
    if (!env.DATABASE_URL) {
      const dataDir = resolve(env.CELLPLANE_DATA_DIR || '.cellplane');
      const local = loadOrCreateLocalSecrets(dataDir);
      const database = await openPglite(join(dataDir, 'db'));
      cleanups.push(() => database.close());
      if (database.kind !== 'pglite') throw new Error('expected the embedded PGlite');
      await migrateDatabase(database);
      const served = await servePgliteOverTcp(database.pglite);
      cleanups.push(() => served.stop());
      target = served.address;
      embedded = true;
      workerVars.DATABASE_URL = served.url;
      workerVars.ENCRYPTION_KEY = env.ENCRYPTION_KEY || local.ENCRYPTION_KEY;
      workerVars.AUTH_SECRET = env.AUTH_SECRET || local.AUTH_SECRET;
      log(`database: embedded PGlite in ${dataDir}, served on ${target}`);
    } else {
      if (!/^postgres(ql)?:\/\//.test(env.DATABASE_URL)) fail('DATABASE_URL expects a postgres:// or postgresql:// connection string');
      const url = new URL(env.DATABASE_URL);
      target = `${url.hostname}:${url.port || '5432'}`;
      const database = openPostgres(env.DATABASE_URL, { max: 1 });
      try {
        await migrateDatabase(database);
      } finally {
        await database.close();
      }
      workerVars.DATABASE_URL = env.DATABASE_URL;
      if (env.ENCRYPTION_KEY) workerVars.ENCRYPTION_KEY = env.ENCRYPTION_KEY;
      if (env.AUTH_SECRET) workerVars.AUTH_SECRET = env.AUTH_SECRET;
      log(`database: DATABASE_URL (postgres at ${target}), migrated`);
    }

    // PGlite is one session: connections take turns at the proxy (src/node/ws-proxy.ts)
    const proxy = await startWsProxy({ allow: [target], oneSessionAtATime: embedded });
    cleanups.push(() => proxy.close());
    workerVars.NEON_LOCAL_WS_PROXY = proxy.address;
    log(`WebSocket proxy for the Neon driver on ${proxy.address}`);

    // the Worker would refuse these on its first request; say so before starting wrangler
    try {
      loadConfig({ ...workerVars, QUEUE_DRIVER: 'cloudflare' });
    } catch (error) {
      if (error instanceof ConfigError) fail(`the Worker would refuse this configuration: ${error.message}`);
      throw error;
    }

    const envDir = mkdtempSync(join(tmpdir(), 'cellplane-dev-'));
    const removeEnvDir = () => rmSync(envDir, { recursive: true, force: true });
    cleanups.push(removeEnvDir);
    // also on an exit that skips the cleanups (an uncaught error): the file holds secrets
    process.on('exit', removeEnvDir);
    const envFile = join(envDir, 'worker.env');
    writeFileSync(envFile, toEnvFile(workerVars), { mode: 0o600 });

    const inspectorPort = await freePort();
    const wranglerCli = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'wrangler-dist', 'cli.js');
    const childEnv: NodeJS.ProcessEnv = { ...env };
    // the Worker's values travel in the env file only
    for (const name of [...PASSED_THROUGH, 'DATABASE_URL', 'ENCRYPTION_KEY', 'AUTH_SECRET']) delete childEnv[name];
    Object.assign(childEnv, {
      WRANGLER_SEND_METRICS: 'false',
      CLOUDFLARE_CF_FETCH_ENABLED: 'false',
      WRANGLER_HIDE_BANNER: 'true',
      CLOUDFLARE_INCLUDE_PROCESS_ENV: 'false',
      CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: 'true',
    });
    if (stopping) return; // a signal arrived during start-up; stop() cleans up
    log(`starting wrangler dev on http://127.0.0.1:${port} (inspector on 127.0.0.1:${inspectorPort})`);
    // cli.js directly rather than bin/wrangler.js, which would not pass our signals on
    child = spawn(
      process.execPath,
      [
        '--no-warnings',
        '--experimental-vm-modules',
        wranglerCli,
        'dev',
        '--config', join(ROOT, 'wrangler.toml'),
        '--local',
        '--ip', '127.0.0.1',
        '--port', String(port),
        '--inspector-ip', '127.0.0.1',
        '--inspector-port', String(inspectorPort),
        '--env-file', envFile,
      ],
      { cwd: ROOT, env: childEnv, stdio: 'inherit' },
    );
    child.once('exit', (code, signal) => {
      if (stopping) return;
      stopping = true;
      log(`wrangler exited (${signal ?? `code ${code}`})`);
      void cleanUp().then(() => process.exit(code ?? 1));
    });
  } catch (error) {
    await cleanUp();
    throw error;
  }
}

/**
 * A dotenv line wrangler reads back unchanged: dotenv keeps single- and
 * backtick-quoted text literally (newlines included), and dotenv-expand,
 * which wrangler runs next, leaves `\$` as `$`.
 */
function toEnvFile(vars: Record<string, string>): string {
  return Object.entries(vars)
    .map(([name, value]) => {
      const escaped = value.replace(/\$/g, '\\$');
      const quote = ["'", '`'].find((q) => !escaped.includes(q));
      if (!quote) throw new Error(`${name} contains both ' and \`, which cannot be passed to wrangler dev`);
      return `${name}=${quote}${escaped}${quote}\n`;
    })
    .join('');
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

main().catch((error: unknown) => {
  // a ConfigError names variables, never values
  const message = error instanceof DevError || error instanceof ConfigError ? error.message : `failed to start: ${error instanceof Error ? error.message : String(error)}`;
  console.error(`cellplane dev: ${scrub(message)}`);
  process.exit(1);
});
