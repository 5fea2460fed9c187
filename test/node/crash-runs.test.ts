import { createServer, type Server } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, usingPostgres } from '../support/node-database';
import { freePort, startServerProcess, type ServerProcess } from '../support/node-process';
import { eventually } from '../support/eventually';

/**
 * Crash runs: `npm start` is SIGKILLed (its whole process group) in the
 * middle of a burst of triggers, deliveries, callbacks and entity writes,
 * three times at different moments, and started again on the same database
 * (ARCHITECTURE: "a crash at any point loses no committed run, delivery or
 * event"). Then:
 *
 * - every run answered 202 is delivered at least once (its webhook-id reached
 *   the receiver), and ends in exactly one terminal state: at most one
 *   callback was accepted, and the run shows that one; its attempt log has at
 *   most one delivered attempt;
 * - every entity write answered 2xx is in the change log exactly once, and a
 *   write that got no answer at most once.
 *
 * The embedded PGlite in a data folder by default (it must reopen after the
 * kill), a fresh Postgres database with TEST_DATABASE_URL.
 */

const SECRETS = {
  ENCRYPTION_KEY: 'c7a5'.repeat(16),
  AUTH_SECRET: 'crash-runs-auth-secret-0123456789abcdef',
};

/** How many writes or triggers are answered before each round's kill: early, midway, late in the burst. */
const KILL_AFTER = [4, 30, 90];

type Json = any;

interface Answer {
  status: number;
  body: Json;
}

async function call(base: string, token: string | undefined, method: string, path: string, body?: unknown): Promise<Answer> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function expectStatus(status: number, pending: Promise<Answer>): Promise<Json> {
  const answer = await pending;
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  return answer.body;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The external workflow: answers each webhook 200 after 100 to 500 ms
 * (under the 1 s attempt timeout; so that several are in flight at a kill), then reports the run's result
 * through its callback, retrying while the server is down. The first
 * delivery of a run reports one result; any later delivery of it the other,
 * so a run that could be completed twice would show it.
 */
interface Workflow {
  host: string;
  /** Every webhook-id received, in order, repeats included. */
  received: string[];
  /** What the first delivery of each run reported. */
  reported: Map<string, 'succeeded' | 'failed'>;
  /** Every callback answer per run: the result sent and the HTTP status (0: no answer). */
  callbacks: Map<string, { sent: 'succeeded' | 'failed'; status: number }[]>;
  /** Webhooks received and not answered yet: deliveries in flight. */
  answering(): number;
  /** Callbacks still being retried. */
  busy(): number;
  close(): Promise<void>;
}

async function startWorkflow(): Promise<Workflow> {
  const received: string[] = [];
  const reported = new Map<string, 'succeeded' | 'failed'>();
  const callbacks = new Map<string, { sent: 'succeeded' | 'failed'; status: number }[]>();
  let busy = 0;
  let answering = 0;
  let closed = false;
  const complete = async (runId: string, url: string, token: string, result: 'succeeded' | 'failed') => {
    busy += 1;
    const answers = callbacks.get(runId) ?? [];
    callbacks.set(runId, answers);
    const deadline = Date.now() + 90_000;
    try {
      while (!closed && Date.now() < deadline) {
        let status = 0;
        try {
          const body = result === 'succeeded' ? { status: 'succeeded' } : { status: 'failed', error: 'the workflow failed' };
          const response = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(10_000),
          });
          await response.body?.cancel();
          status = response.status;
        } catch {
          // the server is down: try again
        }
        answers.push({ sent: result, status });
        if (status !== 0 && status < 500) return;
        await sleep(200);
      }
    } finally {
      busy -= 1;
    }
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const runId = String(req.headers['webhook-id']);
      received.push(runId);
      const { callbackUrl, callbackToken } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const first = reported.get(runId);
      const result = first === undefined ? (parseInt(runId.slice(-1), 16) % 2 === 0 ? 'succeeded' : 'failed') : first === 'succeeded' ? 'failed' : 'succeeded';
      if (first === undefined) reported.set(runId, result);
      answering += 1;
      setTimeout(() => {
        answering -= 1;
        res.writeHead(200);
        res.end();
        void complete(runId, callbackUrl, callbackToken, result);
      }, 100 + Math.floor(Math.random() * 400));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    host: `127.0.0.1:${port}`,
    received,
    reported,
    callbacks,
    answering: () => answering,
    busy: () => busy,
    close: async () => {
      closed = true;
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Write {
  op: 'create' | 'update' | 'delete';
  name: string;
  /** Identifies the write's change in the log: the `w` property it set, or the deleted name. */
  key: string;
  /** 2xx: acknowledged; 0: no answer (the server died under it); anything else: refused. */
  status: number;
}

interface Trigger {
  status: number;
  runId?: string;
}

const ENV = '/acme/p/envs/default';

/**
 * One burst until the server dies: `lanes` writers each create an entity,
 * update it twice and delete it, over and over; `triggerLanes` trigger the
 * action over and over. Every request's answer is recorded; a lane stops at
 * its first request without an answer.
 */
function burst(server: ServerProcess, token: string, round: number, writes: Write[], triggers: Trigger[]): Promise<void> {
  const writer = async (lane: number) => {
    for (let i = 0; ; i += 1) {
      const name = `d${round}-${lane}-${i}`;
      const steps: { op: Write['op']; key: string; send: () => Promise<Answer> }[] = [
        { op: 'create', key: `${name}.0`, send: () => call(server.url, token, 'POST', `${ENV}/entities`, { kind: 'Entity', entityType: 'disk', name, properties: { w: `${name}.0` } }) },
        { op: 'update', key: `${name}.1`, send: () => call(server.url, token, 'PUT', `${ENV}/entities/${name}`, { properties: { w: `${name}.1` } }) },
        { op: 'update', key: `${name}.2`, send: () => call(server.url, token, 'PUT', `${ENV}/entities/${name}`, { properties: { w: `${name}.2` } }) },
        { op: 'delete', key: `deleted ${name}`, send: () => call(server.url, token, 'DELETE', `${ENV}/entities/${name}`) },
      ];
      for (const step of steps) {
        let status = 0;
        try {
          status = (await step.send()).status;
        } catch {
          // no answer
        }
        writes.push({ op: step.op, name, key: step.key, status });
        if (status === 0) return;
        expect(status, `${step.op} ${name}`).toBeLessThan(300);
      }
    }
  };
  const triggerer = async () => {
    for (;;) {
      let answer: Answer | undefined;
      try {
        answer = await call(server.url, token, 'POST', `${ENV}/entities/t${round}/actions/deploy`);
      } catch {
        // no answer
      }
      triggers.push({ status: answer?.status ?? 0, runId: answer?.status === 202 ? answer.body.id : undefined });
      if (!answer) return;
      expect(answer.status, JSON.stringify(answer.body)).toBe(202);
    }
  };
  return Promise.all([...[0, 1, 2, 3].map(writer), triggerer(), triggerer()]).then(() => {});
}

/** Every change of `disk` entities in the log, through the JSON catch-up. */
async function changeLog(base: string, token: string): Promise<Json[]> {
  const changes: Json[] = [];
  let after = 0;
  for (;;) {
    const page = await expectStatus(200, call(base, token, 'GET', `${ENV}/changes?after=${after}&limit=1000&entityType=disk`));
    changes.push(...page.changes);
    if (page.next === after) return changes;
    after = page.next;
  }
}

const changeKey = (change: Json): string =>
  change.type === 'entity.deleted' ? `deleted ${change.entity.name}` : String(change.entity.properties?.w);

describe('crash runs: SIGKILL of `npm start` mid-burst, three times', () => {
  let workflow: Workflow;
  let env: Record<string, string>;
  let cleanup: () => Promise<void> = async () => {};
  let server: ServerProcess | undefined;
  let token: string;

  beforeAll(async () => {
    workflow = await startWorkflow();
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    env = {
      ...SECRETS,
      PORT: String(port),
      API_BASE_URL: base,
      OUTBOUND_ALLOWED_HOSTS: workflow.host,
      DELIVERY_ATTEMPT_TIMEOUT_SECONDS: '1',
      DELIVERY_LEASE_SECONDS: '2',
      RATE_LIMIT_PER_MINUTE: '1000000',
    };
    if (usingPostgres()) {
      const database = await createTestDatabase();
      env.DATABASE_URL = database.url!;
      cleanup = () => database.drop();
    } else {
      const dataDir = mkdtempSync(join(tmpdir(), 'cellplane-crash-'));
      env.CELLPLANE_DATA_DIR = dataDir;
      cleanup = async () => rmSync(dataDir, { recursive: true, force: true });
    }
    server = await startServerProcess(env, { npm: true });
    await expectStatus(201, call(base, undefined, 'POST', '/orgs', { name: 'Acme', slug: 'acme' }));
    await expectStatus(201, call(base, undefined, 'POST', '/orgs/acme/projects', { name: 'P', slug: 'p' }));
    ({ token } = await expectStatus(201, call(base, undefined, 'POST', '/orgs/acme/projects/p/tokens', { name: 'root', role: 'owner' })));
    await expectStatus(201, call(base, token, 'POST', '/acme/p/entity-types', { kind: 'EntityType', name: 'vm', states: ['new', 'up', 'down'], initialState: 'new' }));
    await expectStatus(
      201,
      call(base, token, 'POST', '/acme/p/entity-types', { kind: 'EntityType', name: 'disk', properties: [{ name: 'w', type: 'string' }], states: ['new'], initialState: 'new' }),
    );
    await expectStatus(
      201,
      call(base, token, 'POST', '/acme/p/actions', {
        kind: 'Action',
        name: 'deploy',
        entityType: 'vm',
        trigger: {
          type: 'webhook',
          url: `http://${workflow.host}/deploy`,
          payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}' },
          retry: { maxAttempts: 10, initialDelayMs: 0 },
        },
      }),
    );
    for (const round of KILL_AFTER.keys()) {
      await expectStatus(201, call(base, token, 'POST', `${ENV}/entities`, { kind: 'Entity', entityType: 'vm', name: `t${round}` }));
    }
  }, 120_000);

  afterAll(async () => {
    await server?.stop('SIGKILL');
    await workflow?.close();
    await cleanup();
  });

  it('loses no accepted run, completes none twice, and logs every acknowledged write exactly once', { timeout: 240_000 }, async () => {
    const writes: Write[] = [];
    const triggers: Trigger[] = [];
    for (const [round, killAfter] of KILL_AFTER.entries()) {
      const running = server!;
      const answered = () => writes.filter((w) => w.status > 0).length + triggers.filter((t) => t.status > 0).length;
      const start = answered();
      const lanes = burst(running, token, round, writes, triggers);
      // each kill lands with deliveries in flight: the receiver holds at least one unanswered
      const due = () => answered() - start >= killAfter && workflow.answering() > 0;
      await eventually(() => (due() ? true : undefined), { what: `round ${round}: ${killAfter} answers and a delivery in flight`, timeoutMs: 60_000 });
      await running.stop('SIGKILL');
      await lanes;
      server = await startServerProcess(env, { npm: true });
    }

    const accepted = triggers.flatMap((t) => (t.runId ? [t.runId] : []));
    const acknowledged = writes.filter((w) => w.status >= 200 && w.status < 300);
    const unanswered = writes.filter((w) => w.status === 0);

    // every accepted run delivered, its callback through, and ended
    const base = server!.url;
    const runs = await eventually(
      async () => {
        if (!accepted.every((id) => workflow.received.includes(id)) || workflow.busy() > 0) return undefined;
        const current = await Promise.all(accepted.map((id) => expectStatus(200, call(base, token, 'GET', `${ENV}/action-runs/${id}`))));
        return current.every((run) => run.status === 'succeeded' || run.status === 'failed') ? current : undefined;
      },
      { what: 'every accepted run ended', timeoutMs: 60_000 },
    ).catch(() => Promise.all(accepted.map((id) => expectStatus(200, call(base, token, 'GET', `${ENV}/action-runs/${id}`)))));

    const deliveries = new Map<string, number>();
    for (const id of workflow.received) deliveries.set(id, (deliveries.get(id) ?? 0) + 1);
    const lost = accepted.filter((id) => !deliveries.has(id));
    const doubled = accepted.filter((id) => (deliveries.get(id) ?? 0) > 1);
    const twice = runs.filter((run) => {
      const accepts = (workflow.callbacks.get(run.id) ?? []).filter((answer) => answer.status === 200);
      const deliveredAttempts = run.attempts.filter((attempt: Json) => attempt.outcome === 'delivered');
      return accepts.length > 1 || (accepts.length === 1 && accepts[0]!.sent !== run.status) || deliveredAttempts.length > 1;
    });
    const unended = runs.filter((run) => run.status !== 'succeeded' && run.status !== 'failed');

    // the change log against the writes
    const log = await changeLog(base, token);
    const inLog = new Map<string, number>();
    for (const change of log) inLog.set(changeKey(change), (inLog.get(changeKey(change)) ?? 0) + 1);
    const missing = acknowledged.filter((w) => !inLog.has(w.key));
    const duplicated = writes.filter((w) => (inLog.get(w.key) ?? 0) > 1);
    const written = new Set(writes.map((w) => w.key));
    const phantom = [...inLog.keys()].filter((key) => !written.has(key));

    console.info(
      `crash runs (${usingPostgres() ? 'Postgres' : 'PGlite'}): runs accepted ${accepted.length}, delivered ${accepted.length - lost.length}, ` +
        `lost ${lost.length}, delivered more than once ${doubled.length}, ended twice ${twice.length}, not ended ${unended.length}, ` +
        `triggers unanswered ${triggers.filter((t) => t.status === 0).length}; writes acknowledged ${acknowledged.length}, ` +
        `in the log ${acknowledged.length - missing.length}, missing ${missing.length}, duplicated ${duplicated.length}, ` +
        `unanswered ${unanswered.length} (of which logged ${unanswered.filter((w) => inLog.has(w.key)).length}), phantom ${phantom.length}`,
    );

    expect(accepted.length).toBeGreaterThan(KILL_AFTER.length);
    expect(acknowledged.length).toBeGreaterThan(KILL_AFTER.length);
    expect(lost, 'accepted runs never delivered').toEqual([]);
    expect(twice.map((run) => ({ id: run.id, status: run.status, callbacks: workflow.callbacks.get(run.id), attempts: run.attempts })), 'runs ended twice').toEqual([]);
    expect(unended.map((run) => ({ id: run.id, status: run.status, error: run.error })), 'runs not ended').toEqual([]);
    expect(missing, 'acknowledged writes missing from the change log').toEqual([]);
    expect(duplicated, 'writes in the change log more than once').toEqual([]);
    expect(phantom, 'changes no write made').toEqual([]);
  });
});
