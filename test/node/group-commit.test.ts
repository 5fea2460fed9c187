import { asc, eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actionRuns, deliveryJobs, runAttempts } from '../../src/db/schema';
import { claimDueJobs } from '../../src/runs/delivery';
import { GroupCommit } from '../../src/runs/group-commit';
import { startRun, startRuns, type Delivered } from '../../src/runs/transitions';
import { createTenant, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { usingPostgres } from '../support/node-database';
import { webhookAction } from '../support/run-fixtures';
import { startReceiver, type Receiver } from '../support/receiver';

/**
 * The job runner's group commit of delivered attempts: GroupCommit's
 * batching on its own, startRuns against startRun on the same database
 * states (it must write exactly what startRun writes, run by run), and the
 * runner writing the answers that come together in fewer statements than
 * attempts, every run ending as one attempt's.
 */

/** A write the test ends by hand: what it was given, and its resolve/reject. */
function manualWrites<I, O>() {
  const calls: { items: I[]; done: (outcomes: O[]) => void; fail: (error: Error) => void }[] = [];
  const write = (items: I[]) =>
    new Promise<O[]>((resolve, reject) => calls.push({ items, done: resolve, fail: reject }));
  return { calls, write };
}

const settled = <T>(promise: Promise<T>) => promise.then((value) => ({ value }), (error: Error) => ({ error: error.message }));
const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('GroupCommit', () => {
  it('writes a lone item at once, alone', async () => {
    const groups: string[][] = [];
    const commit = new GroupCommit<string, string>({
      writeGroup: async (items) => (groups.push(items), items),
      writeOne: async (item) => `one:${item}`,
      groupFailed: () => {},
    });
    expect(await commit.write('a')).toBe('one:a');
    expect(await commit.write('b')).toBe('one:b');
    expect(groups).toEqual([]);
  });

  it('writes the items handed in while a write is out together in the next, each with its own outcome', async () => {
    const one = manualWrites<string, string>();
    const group = manualWrites<string, string>();
    const commit = new GroupCommit<string, string>({
      writeGroup: group.write,
      writeOne: (item) => one.write([item]).then(([outcome]) => outcome!),
      groupFailed: () => {},
    });
    const first = commit.write('a');
    const later = ['b', 'c', 'd'].map((item) => commit.write(item));
    await tick();
    expect(one.calls.map((call) => call.items)).toEqual([['a']]);
    expect(group.calls).toHaveLength(0);
    one.calls[0]!.done(['A']);
    expect(await first).toBe('A');
    await tick();
    expect(group.calls.map((call) => call.items)).toEqual([['b', 'c', 'd']]);
    group.calls[0]!.done(['B', 'C', 'D']);
    expect(await Promise.all(later)).toEqual(['B', 'C', 'D']);
    // idle again: the next item goes alone, at once
    const next = commit.write('e');
    await tick();
    expect(one.calls.map((call) => call.items)).toEqual([['a'], ['e']]);
    one.calls[1]!.done(['E']);
    expect(await next).toBe('E');
  });

  it('puts at most maxGroup items in one write', async () => {
    const one = manualWrites<number, number>();
    const groups: number[][] = [];
    const commit = new GroupCommit<number, number>({
      writeGroup: async (items) => (groups.push(items), items),
      writeOne: (item) => one.write([item]).then(([outcome]) => outcome!),
      groupFailed: () => {},
      maxGroup: 3,
    });
    const written = [0, 1, 2, 3, 4, 5, 6, 7].map((item) => commit.write(item));
    await tick();
    one.calls[0]!.done([0]);
    // 7 waiting: 3, 3, then 1 alone
    await tick();
    await tick();
    await tick();
    one.calls[1]!.done([7]);
    expect(await Promise.all(written)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(groups).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    expect(one.calls.map((call) => call.items)).toEqual([[0], [7]]);
  });

  it('writes a failed group again one item at a time: only the item that fails alone fails', async () => {
    const held = manualWrites<string, string>();
    const failures: [string, number][] = [];
    const commit = new GroupCommit<string, string>({
      writeGroup: async () => {
        throw new Error('deadlock detected');
      },
      writeOne: async (item) => {
        if (item === 'first') return held.write([item]).then(([outcome]) => outcome!);
        if (item === 'bad') throw new Error(`cannot write ${item}`);
        return item.toUpperCase();
      },
      groupFailed: (error, size) => failures.push([(error as Error).message, size]),
    });
    // the first write is held open, so the next three wait for it and go as a group
    const first = commit.write('first');
    const rest = ['x', 'bad', 'y'].map((item) => settled(commit.write(item)));
    await tick();
    held.calls[0]!.done(['FIRST']);
    expect(await first).toBe('FIRST');
    expect(await Promise.all(rest)).toEqual([{ value: 'X' }, { error: 'cannot write bad' }, { value: 'Y' }]);
    expect(failures).toEqual([['deadlock detected', 3]]);
    // and it still writes
    expect(await commit.write('z')).toBe('Z');
  });
});

describe('startRuns: startRun for several attempts in one statement', () => {
  let api: TestApi;
  let receiver: Receiver;
  let env: string;
  let owner: string;
  let action: string;

  beforeAll(async () => {
    receiver = await startReceiver({ hold: true });
    api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: receiver.host } });
    const tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const type = await api.call('POST', `${proj}/entity-types`, {
      token: owner,
      body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' },
    });
    expect(type.status).toBe(201);
    action = uniqueSlug('act');
    const created = await api.call('POST', `${proj}/actions`, { token: owner, body: webhookAction(action, `${receiver.url}/hook`) });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
  });

  afterAll(async () => {
    await api?.close();
    await receiver?.close();
  });

  async function triggerRuns(count: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const entity = uniqueSlug('vm');
      expect((await api.call('POST', `${env}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name: entity } })).status).toBe(201);
      const run = await api.call('POST', `${env}/entities/${entity}/actions/${action}`, { token: owner });
      expect(run.status, JSON.stringify(run.body)).toBe(202);
      ids.push(run.body.id);
    }
    return ids;
  }

  /**
   * Four runs, leased, each in one of the states an outcome can meet: still
   * pending; ended meanwhile (cancelled); its job moved on to attempt 2 (a
   * worker whose lease ran out records late); its attempt logged before
   * (recorded twice).
   */
  async function stage(): Promise<Delivered[]> {
    const ids = await triggerRuns(4);
    const leased = await claimDueJobs(api.engine, 10);
    expect(leased.map((one) => one.job.runId).sort()).toEqual([...ids].sort());
    const [pending, ended, movedOn, loggedBefore] = ids as [string, string, string, string];
    await api.db.update(actionRuns).set({ status: 'cancelled', completedAt: new Date() }).where(eq(actionRuns.id, ended));
    await api.db.update(deliveryJobs).set({ attempt: 2, leaseUntil: null, runAt: new Date(Date.now() + 3_600_000) }).where(eq(deliveryJobs.runId, movedOn));
    await api.db.insert(runAttempts).values({ runId: loggedBefore, attempt: 1, startedAt: new Date(0), latencyMs: 9, httpStatus: 503, outcome: 'retry', error: 'earlier' });
    return [pending, ended, movedOn, loggedBefore].map((runId, i) => ({
      runId,
      outcome: 'delivered' as const,
      error: null,
      attempt: 1,
      startedAt: new Date(Date.UTC(2026, 10, 26, 12, 0, i)),
      latencyMs: 10 + i,
      httpStatus: 200 + i,
      at: new Date(Date.UTC(2026, 10, 26, 12, 1, i)),
    }));
  }

  /** What an outcome writes, per run in the order given, without the run's id: two stagings compare equal. */
  async function state(runIds: string[]) {
    const runs = await api.db.select().from(actionRuns).where(inArray(actionRuns.id, runIds));
    const attempts = await api.db.select().from(runAttempts).where(inArray(runAttempts.runId, runIds)).orderBy(asc(runAttempts.attempt));
    const jobs = await api.db.select().from(deliveryJobs).where(inArray(deliveryJobs.runId, runIds));
    return runIds.map((id) => {
      const run = runs.find((one) => one.id === id)!;
      return {
        status: run.status,
        startedAt: run.startedAt?.toISOString() ?? null,
        attempts: attempts.filter((one) => one.runId === id).map(({ runId: _, ...rest }) => ({ ...rest, startedAt: rest.startedAt.toISOString() })),
        jobAttempt: jobs.find((one) => one.runId === id)?.attempt ?? null,
      };
    });
  }

  it('writes, run by run, exactly what startRun writes, and names the runs it moved', async () => {
    const named = usingPostgres();
    const alone = await stage();
    const aloneStarted = [];
    for (const { at, ...attempt } of alone) aloneStarted.push(await startRun(api.db, attempt, at, {}, named));
    const grouped = await stage();
    const groupStarted = await startRuns(api.db, grouped, named);

    expect(aloneStarted).toEqual([true, false, true, true]);
    expect(grouped.map((one) => groupStarted.has(one.runId))).toEqual(aloneStarted);
    const expected = await state(alone.map((one) => one.runId));
    expect(await state(grouped.map((one) => one.runId))).toEqual(expected);
    // what that is: the pending run and the late ones moved with their recorded time, the ended one not;
    // every attempt logged as delivered (the earlier row replaced); the jobs at this attempt dropped, the one moved on kept
    expect(expected).toEqual([
      { status: 'running', startedAt: '2026-11-26T12:01:00.000Z', attempts: [{ attempt: 1, startedAt: '2026-11-26T12:00:00.000Z', latencyMs: 10, httpStatus: 200, outcome: 'delivered', error: null }], jobAttempt: null },
      { status: 'cancelled', startedAt: null, attempts: [{ attempt: 1, startedAt: '2026-11-26T12:00:01.000Z', latencyMs: 11, httpStatus: 201, outcome: 'delivered', error: null }], jobAttempt: null },
      { status: 'running', startedAt: '2026-11-26T12:01:02.000Z', attempts: [{ attempt: 1, startedAt: '2026-11-26T12:00:02.000Z', latencyMs: 12, httpStatus: 202, outcome: 'delivered', error: null }], jobAttempt: 2 },
      { status: 'running', startedAt: '2026-11-26T12:01:03.000Z', attempts: [{ attempt: 1, startedAt: '2026-11-26T12:00:03.000Z', latencyMs: 13, httpStatus: 203, outcome: 'delivered', error: null }], jobAttempt: null },
    ]);
  });

  /**
   * Makes every statement that logs attempts (an outcome's write) take
   * `delayMs` longer, as a round trip to a server under load does, and
   * counts them. PGlite runs in this process: a write there ends before the
   * next answer is read, so without the delay nothing would wait to be grouped.
   */
  function slowOutcomeWrites(delayMs: number) {
    const database = api.testDatabase.database;
    const target = (database.kind === 'pglite' ? database.pglite : database.pool) as unknown as { query: (...args: unknown[]) => Promise<unknown> };
    const original = target.query;
    const written = { statements: 0 };
    target.query = async function (this: unknown, ...args: unknown[]) {
      const text = typeof args[0] === 'string' ? args[0] : String((args[0] as { text?: string }).text ?? '');
      if (text.includes('insert into "run_attempts"')) {
        written.statements++;
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
      return original.apply(this, args);
    };
    return { written, restore: () => void (target.query = original) };
  }

  it('the running job runner writes the outcomes answered together in fewer statements than attempts, each run once', async () => {
    const before = receiver.requests.length;
    api.jobs.start();
    const slow = slowOutcomeWrites(100);
    try {
      // eight attempts held at the receiver: every slot taken
      const ids = await triggerRuns(8);
      await receiver.waitForHeld(8);
      expect(receiver.release()).toBe(8);
      // waits for the eight outcomes to be written
      await api.jobs.stop();
      // the first goes alone; the others, answered while it is written, after it together
      expect(slow.written.statements).toBeGreaterThanOrEqual(2);
      expect(slow.written.statements).toBeLessThan(8);
      const runs = await api.db.select({ status: actionRuns.status }).from(actionRuns).where(inArray(actionRuns.id, ids));
      expect(runs.map((run) => run.status)).toEqual(ids.map(() => 'running'));
      const attempts = await api.db.select().from(runAttempts).where(inArray(runAttempts.runId, ids));
      expect(attempts.map((one) => [one.attempt, one.outcome, one.httpStatus])).toEqual(ids.map(() => [1, 'delivered', 200]));
      expect(await api.db.select().from(deliveryJobs).where(inArray(deliveryJobs.runId, ids))).toEqual([]);
      expect(receiver.requests.length - before).toBe(8);
      expect(api.logs.filter((line) => line.includes('written one at a time'))).toEqual([]);
    } finally {
      slow.restore();
      await api.jobs.stop();
    }
  });
});
