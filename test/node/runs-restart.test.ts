import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, usingPostgres } from '../support/node-database';
import { freePort } from '../support/node-process';
import { startReceiver, type Receiver } from '../support/receiver';

/**
 * The outbox under a crash: the real server process is SIGKILLed with a
 * delivery in flight, or right after its 202s, and started again on the same
 * database. Every accepted run is delivered (at least once, under its
 * `webhook-id`); none is lost. Embedded PGlite in a data directory by
 * default; with TEST_DATABASE_URL, a fresh database on that server.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const SECRETS = {
  ENCRYPTION_KEY: '5eed'.repeat(16),
  AUTH_SECRET: 'restart-test-auth-secret-0123456789abcdef',
};

interface Session {
  env: Record<string, string>;
  cleanup(): Promise<void>;
}

/** The environment of every process of one test: the same database, a 1 s attempt timeout, a 2 s lease. */
async function newSession(receivers: Receiver[]): Promise<Session> {
  const tuning = {
    ...SECRETS,
    OUTBOUND_ALLOWED_HOSTS: receivers.map((receiver) => receiver.host).join(','),
    DELIVERY_ATTEMPT_TIMEOUT_SECONDS: '1',
    DELIVERY_LEASE_SECONDS: '2',
  };
  if (usingPostgres()) {
    const database = await createTestDatabase();
    return { env: { ...tuning, DATABASE_URL: database.url! }, cleanup: () => database.drop() };
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'cellplane-restart-'));
  return { env: { ...tuning, CELLPLANE_DATA_DIR: dataDir }, cleanup: async () => rmSync(dataDir, { recursive: true, force: true }) };
}

async function call(host: Host, token: string | undefined, method: string, path: string, body?: unknown): Promise<any> {
  const response = await fetch(`${host.url}${path}`, {
    method,
    headers: {
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const parsed = await response.json();
  return { status: response.status, body: parsed };
}

async function expectStatus(status: number, pending: Promise<{ status: number; body: any }>): Promise<any> {
  const response = await pending;
  expect(response.status, JSON.stringify(response.body)).toBe(status);
  return response.body;
}

/** A tenant (bootstrap), an entity type, and one webhook action per receiver; returns an owner token. */
async function setUp(host: Host, actions: Record<string, Receiver>): Promise<string> {
  await expectStatus(201, call(host, undefined, 'POST', '/orgs', { name: 'Acme', slug: 'acme' }));
  await expectStatus(201, call(host, undefined, 'POST', '/orgs/acme/projects', { name: 'P', slug: 'p' }));
  const { token } = await expectStatus(201, call(host, undefined, 'POST', '/orgs/acme/projects/p/tokens', { name: 'root', role: 'owner' }));
  const type = { kind: 'EntityType', name: 'vm', states: ['new', 'up'], initialState: 'new' };
  await expectStatus(201, call(host, token, 'POST', '/acme/p/entity-types', type));
  for (const [name, receiver] of Object.entries(actions)) {
    await expectStatus(
      201,
      call(host, token, 'POST', '/acme/p/actions', {
        kind: 'Action',
        name,
        entityType: 'vm',
        trigger: {
          type: 'webhook',
          url: `${receiver.url}/${name}`,
          payload: { entity: '{{ entity.name }}' },
          retry: { maxAttempts: 5, initialDelayMs: 0 },
        },
      }),
    );
  }
  return token;
}

function client(host: Host, token: string) {
  const createEntity = (name: string) =>
    expectStatus(201, call(host, token, 'POST', '/acme/p/envs/default/entities', { kind: 'Entity', entityType: 'vm', name }));
  return {
    createEntity,
    async trigger(entity: string, action: string, options: { create?: boolean } = {}): Promise<string> {
      if (options.create !== false) await createEntity(entity);
      return (await expectStatus(202, call(host, token, 'POST', `/acme/p/envs/default/entities/${entity}/actions/${action}`))).id;
    },
    run: (id: string) => expectStatus(200, call(host, token, 'GET', `/acme/p/envs/default/action-runs/${id}`)),
  };
}

/** Polls until `check` returns a value: for a state another process reaches on its own schedule. */
async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`condition not reached within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

interface Host {
  url: string;
  /** SIGKILL: no shutdown hook runs, nothing is flushed or recorded. */
  kill(): Promise<void>;
  output(): string;
}

/**
 * The server entry as ONE process (`node --import tsx`), so that SIGKILL
 * reaches the server itself: startServerProcess spawns the tsx CLI, which
 * runs the server as a child and cannot relay a SIGKILL to it.
 */
async function startHost(env: Record<string, string>): Promise<Host> {
  const port = String(await freePort());
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/node/server.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env, PORT: port },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await eventually(async () => {
    if (child.exitCode !== null) throw new Error(`the server exited at start (${child.exitCode}):\n${output}`);
    return output.includes('cellplane listening') ? true : undefined;
  }, 90_000);
  return {
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

describe('runs across a SIGKILL of the Node host', () => {
  let holding: Receiver;
  let answering: Receiver;
  let session: Session;
  let host: Host | undefined;
  let token: string;

  /** Kills the current process and starts another on the same database. */
  const restart = async () => {
    await host?.kill();
    host = await startHost(session.env);
    return client(host, token);
  };

  beforeAll(async () => {
    holding = await startReceiver();
    answering = await startReceiver({ status: 200 });
    session = await newSession([holding, answering]);
    host = await startHost(session.env);
    token = await setUp(host, { hold: holding, deploy: answering });
  }, 120_000);
  afterAll(async () => {
    await host?.kill();
    await session?.cleanup();
    await holding?.close();
    await answering?.close();
  });

  it('a delivery held when the process dies is sent again, same webhook-id, once its lease runs out', { timeout: 60_000 }, async () => {
    holding.script({ hang: true }, { status: 200 });
    const before = holding.requests.length;
    const runId = await client(host!, token).trigger('held-1', 'hold');
    // the receiver holds the request: the attempt is in flight, its outcome not recorded
    await holding.waitForRequests(before + 1);
    const api = await restart();

    const run = await eventually(async () => {
      const current = await api.run(runId);
      return current.status === 'pending' ? undefined : current;
    });
    expect(run).toMatchObject({ status: 'running', error: null });
    // the attempt the dead process never recorded is attempt 1 again, not a retry of it
    expect(run.attempts).toMatchObject([{ attempt: 1, outcome: 'delivered', httpStatus: 200 }]);
    const sent = holding.requests.slice(before);
    expect(sent).toHaveLength(2);
    expect(sent.map((request) => request.headers['webhook-id'])).toEqual([runId, runId]);
  });

  it('runs accepted just before the kill are all delivered after the restart, each under its own webhook-id', { timeout: 60_000 }, async () => {
    const before = answering.requests.length;
    const api = client(host!, token);
    const entities = ['burst-1', 'burst-2', 'burst-3', 'burst-4', 'burst-5'];
    for (const name of entities) await api.createEntity(name);
    const runIds = await Promise.all(entities.map((name) => api.trigger(name, 'deploy', { create: false })));
    const again = await restart();

    const runs = await eventually(async () => {
      const current = await Promise.all(runIds.map((id) => again.run(id)));
      return current.every((run) => run.status !== 'pending') ? current : undefined;
    });
    expect(runs.map((run) => run.status)).toEqual(runIds.map(() => 'running'));
    const ids = answering.requests.slice(before).map((request) => request.headers['webhook-id']);
    // every run at least once, and nothing under another name
    expect(new Set(ids)).toEqual(new Set(runIds));
  });
});
