import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_JOB_RUNNER_OPTIONS } from '../../src/node/job-runner';
import { createTestDatabase, usingPostgres } from '../support/node-database';
import { freePort, startServerProcess } from '../support/node-process';
import { startReceiver, type Receiver } from '../support/receiver';
import { eventually } from '../support/eventually';

/**
 * The outbox under a crash: the real server process is SIGKILLed with a
 * delivery in flight, or right after its 202s, and started again on the same
 * database. Every accepted run is delivered (at least once, under its
 * `webhook-id`); none is lost. And under a clean stop: SIGTERM to `npm start`
 * ends the server within its grace period though a receiver hangs and an
 * upload is half sent, or though every delivery slot is held with more runs
 * queued; the aborted attempts are made again after the restart.
 * Embedded PGlite in a data directory by default; with TEST_DATABASE_URL, a
 * fresh database on that server.
 */

const SECRETS = {
  ENCRYPTION_KEY: '5eed'.repeat(16),
  AUTH_SECRET: 'restart-test-auth-secret-0123456789abcdef',
};

interface Session {
  env: Record<string, string>;
  cleanup(): Promise<void>;
}

/** The environment of every process of one test: the same database and port, a 1 s attempt timeout, a 2 s lease. */
async function newSession(receivers: Receiver[]): Promise<Session> {
  // one port for every process of the session, so that API_BASE_URL is right for each
  const port = await freePort();
  const tuning = {
    ...SECRETS,
    PORT: String(port),
    API_BASE_URL: `http://127.0.0.1:${port}`,
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

async function call(host: Pick<Host, 'url'>, token: string | undefined, method: string, path: string, body?: unknown): Promise<any> {
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

function client(host: Pick<Host, 'url'>, token: string) {
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

interface Host {
  url: string;
  /** SIGKILL: no shutdown hook runs, nothing is flushed or recorded. */
  kill(): Promise<void>;
  output(): string;
}

/** The server entry as one process (`npm start`'s command), SIGKILLed by `kill`. */
async function startHost(env: Record<string, string>): Promise<Host> {
  const server = await startServerProcess(env);
  return {
    url: server.url,
    output: server.output,
    kill: async () => {
      await server.stop('SIGKILL');
    },
  };
}

/** Rejects when `promise` has not settled within `ms`: a bounded wait, for what must happen and otherwise hangs. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)));
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

/**
 * An entity create whose body never finishes: the headers announce 200
 * bytes, 12 are sent, and the socket stays open. Resolves once the server
 * has the request (a request on another connection was answered since).
 */
async function halfSentUpload(url: string, token: string): Promise<{ closed: Promise<void> }> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  socket.write(
    `POST /acme/p/envs/default/entities HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${token}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{"kind":"Ent',
  );
  expect((await fetch(`${url}/healthz`)).status).toBe(200);
  return { closed };
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

  /** The stop tests' grace period. */
  const graceMs = 2000;
  /**
   * The current process killed, and `npm start` in its place for a clean stop: a 10 s attempt
   * timeout and a 60 s lease, so only the abort can end a held attempt in time, and only a lease
   * handed back lets the restart take it up soon.
   */
  const startUnderNpm = async () => {
    await host?.kill();
    host = undefined;
    return startServerProcess(
      { ...session.env, DELIVERY_ATTEMPT_TIMEOUT_SECONDS: '10', DELIVERY_LEASE_SECONDS: '60', SHUTDOWN_GRACE_SECONDS: String(graceMs / 1000) },
      { npm: true },
    );
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
    }, { timeoutMs: 20_000 });
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
    }, { timeoutMs: 20_000 });
    expect(runs.map((run) => run.status)).toEqual(runIds.map(() => 'running'));
    const ids = answering.requests.slice(before).map((request) => request.headers['webhook-id']);
    // every run at least once, and nothing under another name
    expect(new Set(ids)).toEqual(new Set(runIds));
  });

  it(
    'SIGTERM to `npm start` with a delivery held and an upload half sent: the server exits 0 within its grace period; after a restart the aborted attempt is made again, same webhook-id, still attempt 1',
    { timeout: 90_000 },
    async () => {
      const server = await startUnderNpm();
      holding.script({ hang: true }, { status: 200 });
      const before = holding.requests.length;
      const runId = await client(server, token).trigger('term-1', 'hold');
      await holding.waitForRequests(before + 1);
      const upload = await halfSentUpload(server.url, token);

      // to npm, not to the server: npm has to relay it
      const code = await within(server.stop('SIGTERM'), graceMs + 6000, 'the server exit after SIGTERM');
      expect(code, server.output()).toBe(0);
      await within(upload.closed, 1000, 'the upload connection closing');
      expect(server.output()).toContain('"msg":"stopped","abortedAttempts":1');
      expect(server.output()).not.toContain('"outcome":"retry"');

      host = await startHost(session.env);
      const api = client(host, token);
      const run = await eventually(async () => {
        const current = await api.run(runId);
        return current.status === 'pending' ? undefined : current;
      }, { timeoutMs: 20_000 });
      expect(run).toMatchObject({ status: 'running', error: null });
      // the aborted attempt was not recorded: it did not count against maxAttempts
      expect(run.attempts).toMatchObject([{ attempt: 1, outcome: 'delivered', httpStatus: 200 }]);
      const sent = holding.requests.slice(before);
      expect(sent.map((request) => request.headers['webhook-id'])).toEqual([runId, runId]);
      // the upload never completed: nothing was created
      expect((await call(host, token, 'GET', '/acme/p/envs/default/entities/Ent')).status).toBe(404);
    },
  );

  it(
    'SIGTERM to `npm start` with every delivery slot held and more runs queued behind them: exit 0 in the grace period, every held attempt aborted, and after a restart every run delivered, the aborted ones still at attempt 1',
    { timeout: 90_000 },
    async () => {
      const server = await startUnderNpm();
      // the runner's slots take the first runs and hang; 4 more wait in the job table
      const SLOTS = DEFAULT_JOB_RUNNER_OPTIONS.concurrency;
      holding.script(...Array.from({ length: SLOTS }, () => ({ hang: true }) as const), { status: 200 });
      const before = holding.requests.length;
      const runIds: string[] = [];
      for (let i = 0; i < SLOTS + 4; i++) runIds.push(await client(server, token).trigger(`full-${i}`, 'hold'));
      await holding.waitForRequests(before + SLOTS);

      const code = await within(server.stop('SIGTERM'), graceMs + 6000, 'the server exit after SIGTERM');
      expect(code, server.output()).toBe(0);
      expect(server.output()).toContain(`"msg":"stopped","abortedAttempts":${SLOTS}`);
      // nothing recorded for an aborted attempt, and the queued ones were never taken
      expect(server.output()).not.toContain('"msg":"delivery attempt"');
      expect(holding.requests.length - before).toBe(SLOTS);

      host = await startHost(session.env);
      const api = client(host, token);
      // the leases were handed back: the restart takes them up at once, not after the 60 s lease
      const runs = await eventually(async () => {
        const current = await Promise.all(runIds.map((id) => api.run(id)));
        return current.every((run) => run.status !== 'pending') ? current : undefined;
      }, { timeoutMs: 20_000 });
      expect(runs.map((run) => run.status)).toEqual(runIds.map(() => 'running'));
      for (const run of runs) expect(run.attempts).toMatchObject([{ attempt: 1, outcome: 'delivered', httpStatus: 200 }]);
      const delivered = holding.requests.slice(before + SLOTS).map((request) => request.headers['webhook-id']);
      expect(new Set(delivered)).toEqual(new Set(runIds));
    },
  );
});
