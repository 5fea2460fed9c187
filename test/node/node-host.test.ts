import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SERVER_ARGS } from '../../scripts/build-server.mjs';
import { createDatabaseUrl } from '../support/node-database';
import { runFailingStart, startServerProcess, type ServerProcess } from '../support/node-process';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'cellplane-host-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

const SECRETS = {
  ENCRYPTION_KEY: 'c0ffee00'.repeat(8),
  AUTH_SECRET: 'auth-secret-that-must-never-be-logged-0123456789',
  CODEHOST_APP_ID: '4242',
  CODEHOST_APP_NAME: 'cellplane-test',
  CODEHOST_APP_PRIVATE_KEY: '-----BEGIN PRIVATE KEY-----\nMIIprivatekeymaterialneverlogged\n-----END PRIVATE KEY-----',
  CODEHOST_APP_WEBHOOK_SECRET: 'webhook-secret-value',
};

async function json(response: Response) {
  return { status: response.status, body: (await response.json()) as any };
}

/** A session of requests touching every path that logs: success, 4xx, mint, revoke. */
async function exercise(server: ServerProcess): Promise<string[]> {
  const post = (path: string, body: unknown, token?: string) =>
    fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    });
  expect((await json(await post('/orgs', { name: 'Acme', slug: 'acme' }))).status).toBe(201);
  expect((await json(await post('/orgs/acme/projects', { name: 'P', slug: 'p' }))).status).toBe(201);
  const minted = await json(await post('/orgs/acme/projects/p/tokens', { name: 'root', role: 'owner' }));
  expect(minted.status).toBe(201);
  const token: string = minted.body.token;
  expect((await fetch(`${server.url}/orgs/acme`)).status).toBe(401);
  expect((await fetch(`${server.url}/orgs/acme`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
  const second = await json(await post('/orgs/acme/projects/p/tokens', { name: 'ci' }, token));
  await fetch(`${server.url}/orgs/acme/projects/p/tokens/${second.body.id}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${token}` },
  });
  await fetch(`${server.url}/orgs/acme`, { headers: { authorization: `Bearer ${second.body.token}` } });
  expect((await post('/orgs', { bad: true }, token)).status).toBe(400);
  return [token, second.body.token];
}

function expectNoSecrets(output: string, extra: string[]): void {
  for (const value of [...Object.values(SECRETS).filter((v) => v.length > 12), 'MIIprivatekeymaterialneverlogged', ...extra]) {
    expect(output, `log output leaks a secret`).not.toContain(value);
  }
}

/** A request whose body never finishes arriving: the server's stop waits its grace period for it. */
async function unfinishedUpload(server: ServerProcess): Promise<Socket> {
  const upload = connect(Number(new URL(server.url).port), '127.0.0.1');
  await new Promise((resolve) => upload.once('connect', resolve));
  upload.on('error', () => {});
  upload.write('POST /orgs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"na');
  return upload;
}

/** package.json's scripts, as npm reads them. */
const packageScripts = () =>
  (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }).scripts;

describe('npm start (the Node host as a process)', () => {
  it("runs, after its build, node with exactly the arguments the tests and the bench start it with (V8's flags included)", () => {
    const scripts = packageScripts();
    expect(scripts.start).toBe(`node scripts/build-server.mjs && exec node ${SERVER_ARGS.join(' ')}`);
    expect(SERVER_ARGS).toContain('--no-allocation-site-pretenuring');
    expect(SERVER_ARGS).toContain('--no-parallel-scavenge');
    expect(SERVER_ARGS).toContain('--heap-growing-percent=20');
  });

  it("`npm run deno` gives V8 the same flags as `npm start` (its --v8-flags is a copy of SERVER_ARGS's V8 flags)", () => {
    const scripts = packageScripts();
    // --enable-source-maps is node's own, not V8's; deno maps its sources without being asked
    const v8Flags = SERVER_ARGS.filter((arg) => arg.startsWith('--') && arg !== '--enable-source-maps');
    expect(v8Flags.length).toBeGreaterThan(0);
    expect(scripts.deno).toContain(` --v8-flags=${v8Flags.join(',')} `);
  });

  it('`npm start` serves from an embedded database with generated local secrets, and stops cleanly on SIGTERM sent to npm', async () => {
    const dataDir = tempDir();
    const server = await startServerProcess({ CELLPLANE_DATA_DIR: dataDir }, { npm: true });
    const health = await json(await fetch(`${server.url}/healthz`));
    expect(health).toEqual({ status: 200, body: { status: 'ok', version: '0.1.0' } });
    const tokens = await exercise(server);
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(server.output()).toContain('"msg":"stopped"');

    const secretsFile = join(dataDir, 'secrets.json');
    expect(statSync(secretsFile).mode & 0o777).toBe(0o600);
    const generated = JSON.parse(readFileSync(secretsFile, 'utf8'));
    expect(generated.ENCRYPTION_KEY).toMatch(/^[0-9a-f]{64}$/);
    expect(new TextEncoder().encode(generated.AUTH_SECRET).length).toBeGreaterThanOrEqual(32);
    expectNoSecrets(server.output(), [...tokens, generated.ENCRYPTION_KEY, generated.AUTH_SECRET]);

    // a restart reuses the data and the secrets: bootstrap stays closed
    const again = await startServerProcess({ CELLPLANE_DATA_DIR: dataDir });
    expect((await fetch(`${again.url}/orgs/acme`)).status).toBe(401);
    expect((await fetch(`${again.url}/orgs/acme`, { headers: { authorization: `Bearer ${tokens[0]}` } })).status).toBe(200);
    expect(await again.stop('SIGINT')).toBe(0);
    expect(JSON.parse(readFileSync(secretsFile, 'utf8'))).toEqual(generated);
  });

  it('a SIGTERM to the whole process group of `npm start` (a supervisor\'s way: it reaches the server twice, directly and through npm) is one stop, given its grace period', async () => {
    const server = await startServerProcess({ CELLPLANE_DATA_DIR: tempDir(), SHUTDOWN_GRACE_SECONDS: '2' }, { npm: true });
    await exercise(server);
    // an upload that never finishes holds the stop for its grace period, while npm's relay of the signal arrives
    const upload = await unfinishedUpload(server);
    const asked = Date.now();
    expect(await server.stop('SIGTERM', { group: true })).toBe(0);
    expect(Date.now() - asked).toBeGreaterThanOrEqual(2_000);
    expect(server.output().match(/"msg":"shutting down"/g)).toHaveLength(1);
    expect(server.output()).toMatch(/"msg":"stopped","abortedAttempts":0,"closedConnections":1/);
    upload.destroy();
  });

  it('a signal sent again once the stop is under way kills at once, without waiting out the grace period', async () => {
    const server = await startServerProcess({ CELLPLANE_DATA_DIR: tempDir(), SHUTDOWN_GRACE_SECONDS: '60' });
    // an upload that never finishes holds the stop for its grace period
    const upload = await unfinishedUpload(server);
    server.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(server.child.exitCode).toBeNull();
    expect(server.output()).toContain('"msg":"shutting down"');
    const asked = Date.now();
    expect(await server.stop('SIGTERM')).toBeNull();
    expect(server.child.signalCode).toBe('SIGTERM');
    expect(Date.now() - asked).toBeLessThan(10_000);
    upload.destroy();
  });

  it('never logs the configured secrets', async () => {
    const server = await startServerProcess({ CELLPLANE_DATA_DIR: tempDir(), ...SECRETS, LOG_LEVEL: 'debug' });
    const tokens = await exercise(server);
    expect(await server.stop()).toBe(0);
    expect(server.output().length).toBeGreaterThan(0);
    expectNoSecrets(server.output(), tokens);
  });

  it('uses DATABASE_URL when set, without logging it', async () => {
    const database = await createDatabaseUrl();
    const url = new URL(database.url);
    // trust authentication ignores the password; the logs must not show it either way
    url.password = 'database-password-never-logged';
    try {
      // with DATABASE_URL, API_BASE_URL is required (docs/decisions.md, Outbound URLs and the callback base)
      const server = await startServerProcess({ DATABASE_URL: url.toString(), API_BASE_URL: 'https://cellplane.example.com', ...SECRETS });
      expect(server.output()).toContain('postgres (DATABASE_URL)');
      const tokens = await exercise(server);
      expect(await server.stop()).toBe(0);
      expectNoSecrets(server.output(), [...tokens, 'database-password-never-logged', url.toString()]);
    } finally {
      await database.close();
    }
  });

  it('fails to start on an unreachable DATABASE_URL without printing it', async () => {
    const { code, output } = await runFailingStart({
      DATABASE_URL: 'postgres://cellplane:unreachable-db-password@127.0.0.1:9/cellplane',
      API_BASE_URL: 'https://cellplane.example.com',
      ...SECRETS,
    });
    expect(code).toBe(1);
    expect(output).toContain('failed to start');
    expectNoSecrets(output, ['unreachable-db-password']);
  });

  it('fails to start on a bad variable, naming it and what it expects, not its value', async () => {
    const { code, output } = await runFailingStart({
      CELLPLANE_DATA_DIR: tempDir(),
      ENCRYPTION_KEY: 'not-hex-secret-material',
      AUTH_SECRET: 'too-short-secret',
      QUEUE_DRIVER: 'sqs',
    });
    expect(code).toBe(1);
    expect(output).toContain('ENCRYPTION_KEY: expects 32 bytes as 64 hexadecimal characters');
    expect(output).toContain('AUTH_SECRET: expects a string of at least 32 bytes');
    expect(output).toContain('QUEUE_DRIVER');
    expect(output).not.toContain('not-hex-secret-material');
    expect(output).not.toContain('too-short-secret');
  });

  it('fails to start on a bad SHUTDOWN_GRACE_SECONDS, naming it and what it expects', async () => {
    const { code, output } = await runFailingStart({ CELLPLANE_DATA_DIR: tempDir(), SHUTDOWN_GRACE_SECONDS: 'soon' });
    expect(code).toBe(1);
    expect(output).toContain('SHUTDOWN_GRACE_SECONDS: expects a number of seconds from 0 to 300');
  });
});
