import { isNotNull, isNull } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { deliveryJobs } from '../../src/db/schema';
import { DEFAULT_JOB_RUNNER_OPTIONS, type JobRunnerOptions } from '../../src/node/job-runner';
import { createTenant, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';
import { countStatements } from '../support/statement-counter';
import { eventually } from '../support/eventually';

/**
 * Claiming ahead (src/node/job-runner.ts): while the slots turn over, a
 * claim leases jobs beyond the free slots, and a slot that frees starts the
 * next of them without a claim. Each test holds every slot with a receiver
 * that keeps its requests open, writes a backlog behind them, and frees
 * slots one at a time, so which jobs are leased when is the test's doing.
 * The runner polls and reaps an hour apart: every claim is a slot's.
 */

const SLOTS = DEFAULT_JOB_RUNNER_OPTIONS.concurrency;
const AHEAD = DEFAULT_JOB_RUNNER_OPTIONS.claimAhead;
const BACKLOG = 20;
/** A wait ahead no step of a test outlasts, however slow the machine (the default lease caps it at 10 s): what is held ahead stays there until a slot takes it. */
const PATIENT = 60_000;

interface Setup {
  api: TestApi;
  receiver: Receiver;
  /** Every run triggered, oldest first: the first SLOTS took the slots, the rest wait in the job table. */
  runs: string[];
  /** The jobs left, each with its lease (null: held by nobody). */
  jobs(): Promise<{ runId: string; leaseUntil: Date | null }[]>;
  close(): Promise<void>;
}

/** Every slot held by the receiver, BACKLOG jobs unleased behind them. */
async function saturated(options: { runner?: Partial<JobRunnerOptions>; env?: Record<string, string> } = {}): Promise<Setup> {
  const api = await createTestApi({
    env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '100000', ...options.env },
    // neither the poll nor the reaper looks within a test: every statement is a slot's or an outcome's
    runner: { pollIntervalMs: 3_600_000, reapIntervalMs: 3_600_000, ...options.runner },
  });
  const receiver = await startReceiver({ hold: true });
  try {
    const tenant = await createTenant(api);
    const owner = await mintToken(api, tenant, { role: 'owner' });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    const env = `${proj}/envs/default`;
    const call = async (method: string, path: string, body: unknown, status: number) => {
      const response = await api.call(method, path, { token: owner, body });
      expect(response.status, `${method} ${path}: ${JSON.stringify(response.body)}`).toBe(status);
      return response.body;
    };
    await call('POST', `${proj}/entity-types`, { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' }, 201);
    const action = uniqueSlug('act');
    await call('POST', `${proj}/actions`, webhookAction(action, `${receiver.url}/hook`), 201);
    const entity = uniqueSlug('vm');
    await call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity }, 201);
    api.jobs.start();
    // the first poll, at start, finds nothing due
    await new Promise((resolve) => setTimeout(resolve, 100));
    const runs: string[] = [];
    for (let i = 0; i < SLOTS + BACKLOG; i++) runs.push((await call('POST', `${env}/entities/${entity}/actions/${action}`, { parameters: {} }, 202)).id);
    await receiver.waitForHeld(SLOTS);
    const jobs = () => api.db.select({ runId: deliveryJobs.runId, leaseUntil: deliveryJobs.leaseUntil }).from(deliveryJobs);
    // the triggers handed their runs to the free slots; the backlog waits unleased
    expect((await api.db.select().from(deliveryJobs).where(isNull(deliveryJobs.leaseUntil))).map((job) => job.runId).sort()).toEqual(runs.slice(SLOTS).sort());
    return {
      api,
      receiver,
      runs,
      jobs,
      async close() {
        await api.jobs.stop(0);
        await api.close();
        await receiver.close();
      },
    };
  } catch (error) {
    await api.close();
    await receiver.close();
    throw error;
  }
}

/** Releases every held request and answers the rest at once; resolves when every run arrived and no job is left. */
async function drainAll(setup: Setup): Promise<void> {
  setup.receiver.script({ status: 200 });
  setup.receiver.release();
  await eventually(async () => ((await setup.jobs()).length === 0 ? true : undefined), { what: 'every job done' });
}

/**
 * Frees the oldest held slot (its request answered 200); resolves once that slot's next attempt
 * is out and held in turn, and the answered run's outcome is written, with the jobs left.
 */
async function freeOneSlot(setup: Setup): Promise<{ runId: string; leaseUntil: Date | null }[]> {
  const sentBefore = setup.receiver.requests.length;
  expect(setup.receiver.release({ status: 200 }, 1)).toBe(1);
  await setup.receiver.waitForRequests(sentBefore + 1);
  await setup.receiver.waitForHeld(SLOTS);
  return eventually(async () => {
    const jobs = await setup.jobs();
    // the answered run's job is gone once its outcome is written
    return jobs.length === SLOTS + BACKLOG - 1 ? jobs : undefined;
  }, { what: 'the outcome written' });
}

const webhookIds = (receiver: Receiver) => receiver.requests.map((request) => String(request.headers['webhook-id']));

describe('the job runner claims ahead of its slots', () => {
  let setup: Setup | undefined;
  afterEach(async () => {
    await setup?.close();
    setup = undefined;
  });

  it('a slot that frees leases jobs ahead of the busy slots; the next slot to free starts one without a claim; each run arrives once', async () => {
    setup = await saturated({ runner: { aheadMaxWaitMs: PATIENT } });
    const { api, receiver, runs } = setup;
    // one slot frees: its claim takes a job for it and AHEAD more, and the job it starts is held in turn
    const leased = await freeOneSlot(setup);
    expect(leased.filter((job) => job.leaseUntil === null)).toHaveLength(BACKLOG - 1 - AHEAD);
    // the claim took the oldest due jobs: the one started, then the ones ahead
    const ahead = runs.slice(SLOTS + 1, SLOTS + 1 + AHEAD);
    expect(leased.filter((job) => job.leaseUntil !== null && ahead.includes(job.runId))).toHaveLength(AHEAD);
    expect(webhookIds(receiver)).not.toContain(ahead[0]);

    // the next slot to free starts the first job ahead: the outcome written, and no claim
    const counts = await countStatements(api.testDatabase.database, async () => {
      expect(receiver.release({ status: 200 }, 1)).toBe(1);
      await receiver.waitForRequests(SLOTS + 2);
      await eventually(async () => (api.logs.filter((line) => line.includes('"delivery attempt"')).length === 2 ? true : undefined), { what: 'the second outcome logged' });
    });
    expect(counts).toEqual({ statements: 1, transactions: 0 });
    expect(webhookIds(receiver).at(-1)).toBe(ahead[0]);

    await drainAll(setup);
    const sent = webhookIds(receiver);
    expect(sent).toHaveLength(runs.length);
    expect(new Set(sent)).toEqual(new Set(runs));
  });

  it('claimAhead 0: a slot that frees claims a job for itself alone', async () => {
    setup = await saturated({ runner: { claimAhead: 0 } });
    const jobs = await freeOneSlot(setup);
    expect(jobs.filter((job) => job.leaseUntil === null)).toHaveLength(BACKLOG - 1);
    await drainAll(setup);
    expect(new Set(webhookIds(setup.receiver))).toEqual(new Set(setup.runs));
  });

  it('jobs ahead that wait past aheadMaxWaitMs, every slot busy, are handed back unsent; each run still arrives once', async () => {
    setup = await saturated({ runner: { aheadMaxWaitMs: 100 } });
    const { receiver, runs } = setup;
    await freeOneSlot(setup);
    // no slot frees again: the timer hands the ones ahead back, and nothing claims them while every slot is busy
    await eventually(async () => {
      const jobs = await setup!.jobs();
      return jobs.length === SLOTS + BACKLOG - 1 && jobs.filter((job) => job.leaseUntil === null).length === BACKLOG - 1 ? true : undefined;
    }, { what: 'the jobs ahead handed back' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await setup.jobs()).filter((job) => job.leaseUntil === null)).toHaveLength(BACKLOG - 1);
    expect(receiver.requests).toHaveLength(SLOTS + 1);
    expect(receiver.held()).toBe(SLOTS);

    await drainAll(setup);
    const sent = webhookIds(receiver);
    expect(sent).toHaveLength(runs.length);
    expect(new Set(sent)).toEqual(new Set(runs));
  });

  it('how long a job waits ahead is bounded by half the lease’s margin over an attempt, whatever aheadMaxWaitMs says', async () => {
    // a lease 1 s longer than an attempt: a job may wait ahead 500 ms, though the runner was told an hour
    setup = await saturated({ env: { DELIVERY_LEASE_SECONDS: '11' }, runner: { aheadMaxWaitMs: 3_600_000 } });
    const { receiver, runs } = setup;
    await freeOneSlot(setup);
    // no slot frees again: the jobs ahead are handed back once they have waited the bound
    await eventually(async () => {
      const jobs = await setup!.jobs();
      return jobs.filter((job) => job.leaseUntil === null).length === BACKLOG - 1 ? true : undefined;
    }, { what: 'the jobs ahead handed back' });
    expect(receiver.requests).toHaveLength(SLOTS + 1);

    await drainAll(setup);
    const sent = webhookIds(receiver);
    expect(sent).toHaveLength(runs.length);
    expect(new Set(sent)).toEqual(new Set(runs));
  });

  it('a stop hands the jobs ahead back with the aborted ones; the next runner makes each attempt', async () => {
    setup = await saturated({ runner: { aheadMaxWaitMs: PATIENT } });
    const { api, receiver, runs } = setup;
    await freeOneSlot(setup);
    expect(await api.db.select().from(deliveryJobs).where(isNotNull(deliveryJobs.leaseUntil))).toHaveLength(SLOTS + AHEAD);

    // no grace: the held requests are aborted, and nothing ahead is started
    expect(await api.jobs.stop(0)).toBe(SLOTS);
    expect(receiver.requests).toHaveLength(SLOTS + 1);
    const left = await setup.jobs();
    expect(left).toHaveLength(SLOTS + BACKLOG - 1);
    expect(left.filter((job) => job.leaseUntil !== null)).toEqual([]);

    receiver.script({ status: 200 });
    receiver.release({ drop: true });
    api.jobs.start();
    await eventually(async () => ((await setup!.jobs()).length === 0 ? true : undefined), { what: 'every job done' });
    // every run arrived; only the aborted ones twice
    expect(new Set(webhookIds(receiver))).toEqual(new Set(runs));
    const aborted = webhookIds(receiver).slice(0, SLOTS + 1).filter((id) => webhookIds(receiver).indexOf(id) !== webhookIds(receiver).lastIndexOf(id));
    expect(aborted).toHaveLength(SLOTS);
    expect(receiver.requests).toHaveLength(runs.length + SLOTS);
  });
});
