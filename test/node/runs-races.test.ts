import { and, eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actionRuns, entityChanges, runAttempts } from '../../src/db/schema';
import { createLogger } from '../../src/logger';
import { platformWithJobRunner } from '../../src/node/platform';
import type { JobRunner } from '../../src/node/job-runner';
import { reapTimedOutRuns } from '../../src/runs/completion';
import { createTenant, expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { usingPostgres } from '../support/node-database';
import { webhookAction } from '../support/run-fixtures';
import { startReceiver, type Receiver } from '../support/receiver';

/**
 * Runs raced: a callback against the reaper, reapers against each other,
 * workers against each other for the same jobs, a cancel against the
 * delivery. Whoever wins, a run takes exactly one terminal transition and no
 * trigger is sent twice while nothing crashes. The many-way races need a
 * real Postgres server (TEST_DATABASE_URL): on PGlite, one session, they
 * would only take turns. What can be staged step by step runs on both.
 */

interface Setup {
  api: TestApi;
  receiver: Receiver;
  env: string;
  owner: string;
  action(trigger?: Record<string, unknown>, fields?: Record<string, unknown>): Promise<string>;
  /** A fresh entity with the action triggered on it; the run's id and the entity's. */
  trigger(action: string): Promise<{ id: string; entityId: string }>;
  /** Another job runner on the same database: a second worker process. */
  worker(): JobRunner;
  close(): Promise<void>;
}

async function setUp(options: Parameters<typeof createTestApi>[0] = {}): Promise<Setup> {
  const receiver = await startReceiver({ status: 200 });
  const api = await createTestApi({ ...options, env: { OUTBOUND_ALLOWED_HOSTS: receiver.host, ...options.env } });
  const tenant = await createTenant(api);
  const owner = await mintToken(api, tenant, { role: 'owner' });
  const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
  const env = `${proj}/envs/default`;
  const type = await api.call('POST', `${proj}/entity-types`, {
    token: owner,
    body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' },
  });
  expect(type.status).toBe(201);
  const workers: JobRunner[] = [];
  return {
    api,
    receiver,
    env,
    owner,
    async action(trigger = {}, fields = {}) {
      const name = uniqueSlug('act');
      const response = await api.call('POST', `${proj}/actions`, {
        token: owner,
        body: webhookAction(name, `${receiver.url}/hook`, { payload: { callbackToken: '{{ run.callbackToken }}' }, ...trigger }, { parameters: [], ...fields }),
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      return name;
    },
    async trigger(action) {
      const entity = uniqueSlug('vm');
      const created = await api.call('POST', `${env}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name: entity } });
      expect(created.status).toBe(201);
      const run = await api.call('POST', `${env}/entities/${entity}/actions/${action}`, { token: owner });
      expect(run.status, JSON.stringify(run.body)).toBe(202);
      return { id: run.body.id, entityId: created.body.id };
    },
    worker() {
      const { jobs } = platformWithJobRunner({
        config: api.platform.config,
        logger: createLogger({ level: 'warn', sink: (line) => api.logs.push(line) }),
        db: api.db,
        namedStatements: usingPostgres(),
      });
      workers.push(jobs);
      return jobs;
    },
    async close() {
      await Promise.all(workers.map((worker) => worker.stop()));
      await api.close();
      await receiver.close();
    },
  };
}

const countBy = <T>(values: T[]) => {
  const counts = new Map<T, number>();
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
  return counts;
};

describe('cancel against delivery, staged', () => {
  let s: Setup;
  let release: () => void = () => {};
  let gate: Promise<void> | undefined;

  beforeAll(async () => {
    s = await setUp({
      engine: {
        // holds the receiver's answer back until the test releases it: the request is out, its outcome not yet recorded
        fetch: async (input, init) => {
          const response = await fetch(input, init);
          await gate;
          return response;
        },
      },
    });
  });
  afterAll(() => s.close());

  it('a cancel while the request is out is refused (409); the run ends running, not cancelled-but-delivered', async () => {
    gate = new Promise((resolve) => (release = resolve));
    const run = await s.trigger(await s.action());
    const before = s.receiver.requests.length;
    const draining = s.api.jobs.drain();
    try {
      await s.receiver.waitForRequests(before + 1);
      expectError(await s.api.call('DELETE', `${s.env}/action-runs/${run.id}`, { token: s.owner }), 409, 'run_not_cancellable');
    } finally {
      release();
      await draining;
      gate = undefined;
    }
    const after = await s.api.call('GET', `${s.env}/action-runs/${run.id}`, { token: s.owner });
    expect(after.body).toMatchObject({ status: 'running', attempts: [{ outcome: 'delivered' }] });
  });

  it('a cancel between attempts is accepted, and no further attempt is made', async () => {
    s.receiver.script({ status: 503 }, { status: 200 });
    const run = await s.trigger(await s.action({ retry: { maxAttempts: 3, initialDelayMs: 3_600_000 } }));
    await s.api.jobs.drain();
    const requests = s.receiver.requests.length;
    const cancelled = await s.api.call('DELETE', `${s.env}/action-runs/${run.id}`, { token: s.owner });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ status: 'cancelled', attempts: [{ httpStatus: 503, outcome: 'retry' }] });
    await s.api.jobs.drain();
    expect(s.receiver.requests).toHaveLength(requests);
    s.receiver.script({ status: 200 });
  });
});

describe('runs raced (truly concurrent on Postgres; on PGlite the sessions take turns)', () => {
  let s: Setup;

  beforeAll(async () => {
    s = await setUp();
  });
  afterAll(() => s.close());

  it('two reapers and a callback per run, all at once: each run ends once, and its entity moves only if the callback won', async () => {
    const action = await s.action({}, { timeoutMinutes: 1 });
    const runs: { id: string; entityId: string }[] = [];
    for (let i = 0; i < 16; i++) runs.push(await s.trigger(action));
    await s.api.jobs.drain();
    const tokens = new Map(s.receiver.requests.map((request) => [request.headers['webhook-id'], JSON.parse(request.body).callbackToken]));
    // the reapers' clock is past the deadline; the callbacks' is not, so their tokens are still good
    const ahead = { now: () => new Date(Date.now() + 2 * 60_000) };
    const [reapedA, reapedB, ...callbacks] = await Promise.all([
      reapTimedOutRuns(s.api.db, ahead),
      reapTimedOutRuns(s.api.db, ahead),
      ...runs.map((run) =>
        s.api.call('POST', `${s.env}/action-runs/${run.id}/callback`, {
          headers: { authorization: `Bearer ${tokens.get(run.id)}` },
          body: { status: 'succeeded' },
        }),
      ),
    ]);
    const reaped = [...(reapedA as string[]), ...(reapedB as string[])];
    expect(new Set(reaped).size).toBe(reaped.length);
    const rows = await s.api.db.select().from(actionRuns).where(inArray(actionRuns.id, runs.map((run) => run.id)));
    const byId = new Map(rows.map((row) => [row.id, row]));
    for (const [i, run] of runs.entries()) {
      const response = (callbacks as ApiResponse[])[i]!;
      const row = byId.get(run.id)!;
      const changes = await s.api.db
        .select({ type: entityChanges.type })
        .from(entityChanges)
        .where(and(eq(entityChanges.entityId, run.entityId), eq(entityChanges.type, 'entity.updated')));
      if (response.status === 200) {
        expect(row.status).toBe('succeeded');
        expect(reaped).not.toContain(run.id);
        expect(changes).toHaveLength(1);
      } else {
        expectError(response, 409, 'run_not_completable');
        expect(row).toMatchObject({ status: 'failed', error: 'timed out after 1 minute without a completion' });
        expect(reaped).toContain(run.id);
        expect(changes).toHaveLength(0);
      }
    }
  });

  it('three workers draining the same 30 jobs: each run is sent exactly once', async () => {
    const action = await s.action();
    const runs: string[] = [];
    for (let i = 0; i < 30; i++) runs.push((await s.trigger(action)).id);
    const before = s.receiver.requests.length;
    await Promise.all([s.api.jobs.drain(), s.worker().drain(), s.worker().drain()]);
    const ids = s.receiver.requests.slice(before).map((request) => request.headers['webhook-id'] as string);
    expect(ids).toHaveLength(30);
    expect([...countBy(ids).values()].every((count) => count === 1)).toBe(true);
    expect(new Set(ids)).toEqual(new Set(runs));
    const attempts = await s.api.db.select().from(runAttempts).where(inArray(runAttempts.runId, runs));
    expect(attempts.map((attempt) => [attempt.attempt, attempt.outcome])).toEqual(runs.map(() => [1, 'delivered']));
    const rows = await s.api.db.select({ status: actionRuns.status }).from(actionRuns).where(inArray(actionRuns.id, runs));
    expect(rows.every((row) => row.status === 'running')).toBe(true);
  });

  it('cancels racing two workers: each run ends cancelled and never sent, or running and sent once', async () => {
    const action = await s.action();
    const runs: string[] = [];
    for (let i = 0; i < 24; i++) runs.push((await s.trigger(action)).id);
    const before = s.receiver.requests.length;
    const [, , ...cancels] = await Promise.all([
      s.api.jobs.drain(),
      s.worker().drain(),
      ...runs.map((id) => s.api.call('DELETE', `${s.env}/action-runs/${id}`, { token: s.owner })),
    ]);
    await s.api.jobs.drain();
    const sent = countBy(s.receiver.requests.slice(before).map((request) => request.headers['webhook-id'] as string));
    const rows = new Map(
      (await s.api.db.select().from(actionRuns).where(inArray(actionRuns.id, runs))).map((row) => [row.id, row.status]),
    );
    const outcomes = runs.map((id, i) => [(cancels[i] as { status: number }).status, rows.get(id), sent.get(id) ?? 0]);
    for (const outcome of outcomes) expect([[200, 'cancelled', 0], [409, 'running', 1]]).toContainEqual(outcome);
  });
});
