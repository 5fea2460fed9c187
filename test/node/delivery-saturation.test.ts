import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inArray, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actionRuns } from '../../src/db/schema';
import { DEFAULT_JOB_RUNNER_OPTIONS } from '../../src/node/job-runner';
import { createTenant, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTestDatabase, usingPostgres } from '../support/node-database';
import { startServerProcess, type ServerProcess } from '../support/node-process';
import { startReceiver, type Receiver, type ReceivedRequest } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';
import { eventually } from '../support/eventually';

/**
 * Delivery under saturation on the Node host (issue 10): more slow receivers
 * than the job runner has slots, then a burst of triggers. The runner is the
 * running one (`jobs.start()`, as the server starts it; never `jobs.drain()`),
 * and every run must still be delivered: each run's `webhook-id` reaches its
 * receiver, and each run reaches `running` (or `failed`, for a receiver that
 * never answers). Slow receivers hold their requests until the test releases
 * them, so which slots are busy when is decided by the test, not by timing.
 *
 * The slots are freed in every way an attempt ends: an answer, the attempt
 * timeout, a dropped connection; and a poll that fails on the database does
 * not stop the runner either. The same saturation is then made through the
 * real server process (`npm start`'s entry, default runner options), which
 * starts with the file so that its start overlaps the in-process tests.
 */

const SLOTS = DEFAULT_JOB_RUNNER_OPTIONS.concurrency;
/** More slow runs than slots: some wait for a slot while every slot is held. */
const SLOW_RUNS = SLOTS + 4;

const webhookIds = (requests: ReceivedRequest[]) => requests.map((request) => String(request.headers['webhook-id']));

/** How many of `runIds` reached `receiver` (each counted once, whatever it was sent again). */
const arrivedOf = (receiver: Receiver, runIds: string[]) => {
  const ids = new Set(webhookIds(receiver.requests));
  return runIds.filter((id) => ids.has(id)).length;
};

interface Harness {
  /** The app instance the harness calls now, its runner started. */
  readonly api: TestApi;
  /**
   * Stops the runner of the current instance and switches to another app
   * instance on the same database, with `options` (a different configuration),
   * its runner started.
   */
  switchInstance(options: Parameters<typeof createTestApi>[0]): Promise<TestApi>;
  /** A webhook action to `receiver`; returns its name. */
  action(receiver: Receiver, trigger?: Record<string, unknown>): Promise<string>;
  /** `count` runs of `action`, triggered `parallel` at a time (on `parallel` entities); their ids, in order. */
  trigger(action: string, count: number, parallel?: number): Promise<string[]>;
  /** Each run's status, read from its row (one query, however many runs). */
  statuses(runIds: string[]): Promise<Map<string, string>>;
  run(id: string): Promise<any>;
  receiver(...replies: Parameters<typeof startReceiver>): Promise<Receiver>;
  close(): Promise<void>;
}

async function createHarness(options: Parameters<typeof createTestApi>[0] = {}): Promise<Harness> {
  const receivers: Receiver[] = [];
  // hundreds of triggers a minute from one token: the rate limit is not what is tested
  const withLimit = (o: Parameters<typeof createTestApi>[0] = {}) => ({ ...o, env: { RATE_LIMIT_PER_MINUTE: '100000', ...o.env } });
  const first = await createTestApi(withLimit(options));
  const apis = [first];
  let api = first;
  try {
    const tenant = await createTenant(api);
    const owner = await mintToken(api, tenant, { role: 'owner' });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    const env = `${proj}/envs/default`;
    const expectStatus = async (status: number, method: string, path: string, body?: unknown) => {
      const response = await api.call(method, path, { token: owner, body });
      expect(response.status, `${method} ${path}: ${JSON.stringify(response.body)}`).toBe(status);
      return response.body;
    };
    await expectStatus(201, 'POST', `${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
    });
    // runs are triggered on a few entities, several each: a trigger is what is measured here, not entity creation
    const entities: string[] = [];
    const entity = async (i: number) => {
      while (entities.length <= i) {
        const name = uniqueSlug('vm');
        entities.push(name);
        await expectStatus(201, 'POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name });
      }
      return entities[i]!;
    };
    const triggerOne = async (action: string, i: number) =>
      (await expectStatus(202, 'POST', `${env}/entities/${await entity(i)}/actions/${action}`, { parameters: {} })).id as string;
    api.jobs.start();
    return {
      get api() {
        return api;
      },
      async switchInstance(other) {
        await api.jobs.stop();
        api = await createTestApi(withLimit({ ...other, database: first.testDatabase }));
        apis.push(api);
        api.jobs.start();
        return api;
      },
      async action(receiver, trigger = {}) {
        const name = uniqueSlug('act');
        await expectStatus(201, 'POST', `${proj}/actions`, webhookAction(name, `${receiver.url}/${name}`, trigger));
        return name;
      },
      async trigger(action, count, parallel = 1) {
        for (let i = 0; i < parallel; i++) await entity(i);
        const ids: string[] = [];
        for (let i = 0; i < count; i += parallel) {
          const chunk = Math.min(parallel, count - i);
          ids.push(...(await Promise.all(Array.from({ length: chunk }, (_, j) => triggerOne(action, j)))));
        }
        return ids;
      },
      async statuses(runIds) {
        const runs = await api.db.select({ id: actionRuns.id, status: actionRuns.status }).from(actionRuns).where(inArray(actionRuns.id, runIds));
        return new Map(runs.map((run) => [run.id, run.status]));
      },
      run: (id) => expectStatus(200, 'GET', `${env}/action-runs/${id}`),
      async receiver(...replies) {
        const receiver = await startReceiver(...replies);
        receivers.push(receiver);
        return receiver;
      },
      async close() {
        // the first instance last: it drops the database
        for (const instance of apis.reverse()) await instance.close();
        await Promise.all(receivers.map((receiver) => receiver.close()));
      },
    };
  } catch (error) {
    await first.close();
    throw error;
  }
}

/** Waits until every run of `runIds` is `status`; the message counts the others. */
async function allReach(h: Harness, runIds: string[], status: string, timeoutMs: number): Promise<void> {
  let last = new Map<string, string>();
  await eventually(
    async () => {
      last = await h.statuses(runIds);
      return last.size === runIds.length && [...last.values()].every((s) => s === status) ? true : undefined;
    },
    { timeoutMs, what: () => `${[...last.values()].filter((s) => s === status).length} of ${runIds.length} runs ${status}` },
  );
}

describe('delivery under saturation: the running job runner (in-process, real HTTP API)', () => {
  let h: Harness;
  // one app and database for the file, its runner started as the server starts it (never jobs.drain());
  // the receivers are known only once started: the allow-list takes any loopback port
  beforeAll(async () => {
    h = await createHarness({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' } });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('every slot held by slow receivers, then a burst of 160 triggers: every run is delivered', { timeout: 45_000 }, async () => {
    const slow = await h.receiver({ hold: true });
    const fast = await h.receiver({ status: 200 });
    const slowAction = await h.action(slow);
    const fastAction = await h.action(fast);

    const slowRuns = await h.trigger(slowAction, SLOW_RUNS);
    // every slot is held; the runs beyond them wait for one
    await slow.waitForHeld(SLOTS);
    expect(slow.held()).toBe(SLOTS);

    // the burst comes while no slot is free: each trigger nudges a runner that has nothing free
    const burst = await h.trigger(fastAction, 160, 10);
    expect(new Set(burst).size).toBe(160);
    expect(slow.held()).toBe(SLOTS);

    // the slow receivers answer in batches; the runs that waited take the freed slots, and the receiver holds them again
    expect(slow.release({ status: 200 })).toBe(SLOTS);
    await eventually(
      async () => (slow.held() === SLOW_RUNS - SLOTS ? true : undefined),
      { timeoutMs: 15_000, what: () => `${arrivedOf(slow, slowRuns)} of ${SLOW_RUNS} slow runs and ${arrivedOf(fast, burst)} of ${burst.length} burst runs sent` },
    );
    expect(slow.release({ status: 200 })).toBe(SLOW_RUNS - SLOTS);

    await eventually(
      async () => (arrivedOf(fast, burst) === burst.length ? true : undefined),
      { timeoutMs: 20_000, what: () => `${arrivedOf(fast, burst)} of ${burst.length} burst runs delivered` },
    );
    expect(new Set(webhookIds(slow.requests))).toEqual(new Set(slowRuns));
    expect(new Set(webhookIds(fast.requests))).toEqual(new Set(burst));
    await allReach(h, [...slowRuns, ...burst], 'running', 10_000);
  });

  it('slots freed by dropped connections: the held requests are dropped, retried, and every run is delivered', { timeout: 45_000 }, async () => {
    const flaky = await h.receiver({ hold: true });
    const fast = await h.receiver({ status: 200 });
    const flakyAction = await h.action(flaky, { retry: { maxAttempts: 3, initialDelayMs: 0 } });
    const fastAction = await h.action(fast);

    const dropped = await h.trigger(flakyAction, SLOW_RUNS);
    await flaky.waitForHeld(SLOTS);
    const burst = await h.trigger(fastAction, 50, 10);
    expect(flaky.held()).toBe(SLOTS);

    // every held request loses its connection; from now on the receiver answers
    flaky.script({ status: 200 });
    expect(flaky.release({ drop: true })).toBe(SLOTS);

    await allReach(h, [...dropped, ...burst], 'running', 30_000);
    expect(new Set(webhookIds(fast.requests))).toEqual(new Set(burst));
    expect(new Set(webhookIds(flaky.requests))).toEqual(new Set(dropped));
    // the runs that were held were sent twice: dropped, then delivered on their second attempt, under the same webhook-id
    const droppedFirst = await h.run(webhookIds(flaky.requests)[0]!);
    expect(droppedFirst.attempts.map((a: { outcome: string }) => a.outcome)).toEqual(['retry', 'delivered']);
  });

  it('a poll that fails on the database does not stop the runner', { timeout: 45_000 }, async () => {
    const fast = await h.receiver({ status: 200 });
    const fastAction = await h.action(fast);
    const failedPolls = () => h.api.logs.filter((line) => line.includes('delivery poll failed')).length;
    const failedBefore = failedPolls();

    // the job table briefly out of reach: the poll (every second) fails until it is back
    await h.api.db.execute(sql`alter table delivery_jobs rename to delivery_jobs_away`);
    try {
      await eventually(async () => (failedPolls() > failedBefore ? true : undefined), { what: 'no failed poll logged' });
    } finally {
      await h.api.db.execute(sql`alter table delivery_jobs_away rename to delivery_jobs`);
    }

    const burst = await h.trigger(fastAction, 30, 10);
    await allReach(h, burst, 'running', 20_000);
    expect(new Set(webhookIds(fast.requests))).toEqual(new Set(burst));
  });

  // last: it switches the harness to an instance with a 1 s attempt timeout
  it('slots freed by the attempt timeout: receivers that never answer fail their runs, and the burst is delivered', { timeout: 45_000 }, async () => {
    await h.switchInstance({
      env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1', DELIVERY_ATTEMPT_TIMEOUT_SECONDS: '1', DELIVERY_LEASE_SECONDS: '30' },
    });
    const hanging = await h.receiver({ hang: true });
    const fast = await h.receiver({ status: 200 });
    // one attempt: a timed-out attempt fails the run, so the hanging runs end
    const hangAction = await h.action(hanging, { retry: { maxAttempts: 1, initialDelayMs: 0 } });
    const fastAction = await h.action(fast);

    const hung = await h.trigger(hangAction, SLOW_RUNS);
    await hanging.waitForRequests(SLOTS);
    const burst = await h.trigger(fastAction, 50, 10);

    await allReach(h, hung, 'failed', 20_000);
    await allReach(h, burst, 'running', 20_000);
    expect(new Set(webhookIds(hanging.requests))).toEqual(new Set(hung));
    expect(new Set(webhookIds(fast.requests))).toEqual(new Set(burst));
    const failed = await h.run(hung[0]!);
    expect(failed.error).toContain('no response within 1 s');
  });
});

/** The server process's slow and fast receivers, and the process itself. */
interface ProcessHost {
  server: ServerProcess;
  slow: Receiver;
  fast: Receiver;
}

const processCleanups: (() => Promise<unknown>)[] = [];

/** `npm start`'s entry with the default runner options, on its own database (embedded PGlite, or a fresh one on TEST_DATABASE_URL's server). */
async function startProcessHost(): Promise<ProcessHost> {
  const slow = await startReceiver({ hold: true });
  const fast = await startReceiver({ status: 200 });
  processCleanups.push(() => slow.close(), () => fast.close());
  const env: Record<string, string> = {
    ENCRYPTION_KEY: '5a7e'.repeat(16),
    AUTH_SECRET: 'saturation-test-auth-secret-0123456789abcdef',
    OUTBOUND_ALLOWED_HOSTS: `${slow.host},${fast.host}`,
    RATE_LIMIT_PER_MINUTE: '100000',
  };
  if (usingPostgres()) {
    const database = await createTestDatabase();
    processCleanups.push(() => database.drop());
    env.DATABASE_URL = database.url!;
  } else {
    const dataDir = mkdtempSync(join(tmpdir(), 'cellplane-saturation-'));
    processCleanups.push(async () => rmSync(dataDir, { recursive: true, force: true }));
    env.CELLPLANE_DATA_DIR = dataDir;
  }
  const server = await startServerProcess(env);
  processCleanups.push(() => server.stop());
  return { server, slow, fast };
}

// the process starts with the file, so that its start overlaps the in-process tests
let processHost: Promise<ProcessHost>;
beforeAll(() => {
  processHost = startProcessHost();
  // awaited by its test; a failure to start is reported there
  processHost.catch(() => {});
});
afterAll(async () => {
  await processHost?.catch(() => {});
  for (const cleanup of processCleanups.reverse()) await cleanup();
});

describe('delivery under saturation: the server process (npm start, default runner options)', () => {
  async function call(server: ServerProcess, token: string | undefined, method: string, path: string, body?: unknown) {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: {
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const parsed = (await response.json()) as any;
    expect(response.status, `${method} ${path}: ${JSON.stringify(parsed)}`).toBeLessThan(300);
    return parsed;
  }

  it('every slot held by slow receivers, then a burst of 100 triggers over HTTP: every run is delivered', { timeout: 90_000 }, async () => {
    const { server, slow, fast } = await processHost;

    await call(server, undefined, 'POST', '/orgs', { name: 'Acme', slug: 'acme' });
    await call(server, undefined, 'POST', '/orgs/acme/projects', { name: 'P', slug: 'p' });
    const { token } = await call(server, undefined, 'POST', '/orgs/acme/projects/p/tokens', { name: 'root', role: 'owner' });
    await call(server, token, 'POST', '/acme/p/entity-types', { kind: 'EntityType', name: 'vm', states: ['new', 'running', 'failed'], initialState: 'new' });
    await call(server, token, 'POST', '/acme/p/actions', webhookAction('slow', `${slow.url}/slow`));
    await call(server, token, 'POST', '/acme/p/actions', webhookAction('fast', `${fast.url}/fast`));
    const PARALLEL = 10;
    for (let i = 0; i < PARALLEL; i++) {
      await call(server, token, 'POST', '/acme/p/envs/default/entities', { kind: 'Entity', entityType: 'vm', name: `vm-${i}` });
    }
    const trigger = async (action: string, i: number) =>
      (await call(server, token, 'POST', `/acme/p/envs/default/entities/vm-${i}/actions/${action}`, {})).id as string;
    const triggerMany = async (action: string, count: number, parallel: number) => {
      const ids: string[] = [];
      for (let i = 0; i < count; i += parallel) {
        ids.push(...(await Promise.all(Array.from({ length: Math.min(parallel, count - i) }, (_, j) => trigger(action, j)))));
      }
      return ids;
    };
    const statuses = async (runIds: string[]) =>
      Promise.all(runIds.map(async (id) => (await call(server, token, 'GET', `/acme/p/envs/default/action-runs/${id}`)).status as string));

    const slowRuns = await triggerMany('slow', SLOW_RUNS, 1);
    await slow.waitForHeld(SLOTS, 20_000);
    const burst = await triggerMany('fast', 100, PARALLEL);
    expect(slow.held()).toBe(SLOTS);

    expect(slow.release({ status: 200 })).toBe(SLOTS);
    await eventually(
      async () => (slow.held() === SLOW_RUNS - SLOTS ? true : undefined),
      { timeoutMs: 20_000, what: () => `${arrivedOf(slow, slowRuns)} of ${SLOW_RUNS} slow runs and ${arrivedOf(fast, burst)} of ${burst.length} burst runs sent` },
    );
    expect(slow.release({ status: 200 })).toBe(SLOW_RUNS - SLOTS);

    await eventually(
      async () => (arrivedOf(fast, burst) === burst.length ? true : undefined),
      { timeoutMs: 40_000, what: () => `${arrivedOf(fast, burst)} of ${burst.length} burst runs delivered` },
    );
    expect(new Set(webhookIds(slow.requests))).toEqual(new Set(slowRuns));
    expect(new Set(webhookIds(fast.requests))).toEqual(new Set(burst));
    let last: string[] = [];
    await eventually(
      async () => {
        last = await statuses([...slowRuns, ...burst]);
        return last.every((status) => status === 'running') ? true : undefined;
      },
      { timeoutMs: 20_000, what: () => `${last.filter((status) => status === 'running').length} of ${last.length} runs running` },
    );
  });
});
