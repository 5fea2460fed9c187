import { asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryJobs, entityChanges } from '../../src/db/schema';
import { reapTimedOutRuns } from '../../src/runs/transitions';
import { expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, type TestUser } from '../support/people';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';

/**
 * A run completed by moving its entity (DECISIONS §8; SPEC "Inbound
 * webhooks": "completed through the entity or relationship API"): while a
 * run is active, a PUT of its entity to the action's onSuccess state ends it
 * succeeded, to its onFailure state failed, in the move's transaction. The
 * guarded UPDATE of src/runs/transitions.ts decides between the move, the
 * callback and the reaper: each run ends once, with one notification and one
 * move of its entity into the end state.
 *
 * The action: on `vm` (provisioning → running | failed | stopped), onSuccess
 * `running`, onFailure `failed`. Runs are triggered by a user's session, so
 * that their end notifies that user.
 */

interface Setup {
  api: TestApi;
  receiver: Receiver;
  alice: TestUser;
  env: string;
  proj: string;
  owner: string;
  close(): Promise<void>;
}

async function setUp(): Promise<Setup> {
  const receiver = await startReceiver({ status: 202 });
  const api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: receiver.host } });
  const alice = await signUp(api, { name: 'Alice' });
  const tenant = await createUserTenant(api, alice);
  const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
  const owner = await mintToken(api, tenant, { role: 'owner', as: alice.token });
  const type = await api.call('POST', `${proj}/entity-types`, {
    token: alice.token,
    body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed', 'stopped'], initialState: 'provisioning' },
  });
  expect(type.status, JSON.stringify(type.body)).toBe(201);
  return {
    api,
    receiver,
    alice,
    env: `${proj}/envs/default`,
    proj,
    owner,
    async close() {
      await api.close();
      await receiver.close();
    },
  };
}

interface Triggered {
  id: string;
  entity: string;
  entityId: string;
  callbackPath?: string;
  callbackToken?: string;
}

function helpers(s: Setup) {
  const as = (token: string) => (method: string, path: string, body?: unknown) => s.api.call(method, path, { token, body });
  const alice = as(s.alice.token);

  const action = async (fields: Record<string, unknown> = {}) => {
    const name = uniqueSlug('deploy');
    const response = await alice('POST', `${s.proj}/actions`, webhookAction(name, `${s.receiver.url}/hook`, {}, { parameters: [], ...fields }));
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return name;
  };

  /** A fresh entity with `action` triggered on it by Alice's session; delivered (running) unless `deliver` is false. */
  const trigger = async (actionName: string, options: { deliver?: boolean } = {}): Promise<Triggered> => {
    const entity = uniqueSlug('vm');
    const created = await alice('POST', `${s.env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const before = s.receiver.requests.length;
    const run = await alice('POST', `${s.env}/entities/${entity}/actions/${actionName}`);
    expect(run.status, JSON.stringify(run.body)).toBe(202);
    const triggered = { id: run.body.id as string, entity, entityId: created.body.id as string };
    if (options.deliver === false) return triggered;
    await s.api.jobs.drain();
    const request = s.receiver.requests.slice(before).find((r) => r.headers['webhook-id'] === run.body.id);
    expect(request, 'the trigger was delivered').toBeDefined();
    const sent = JSON.parse(request!.body);
    return { ...triggered, callbackPath: new URL(sent.callbackUrl).pathname, callbackToken: sent.callbackToken };
  };

  const move = (run: Triggered, state: string, token = s.alice.token) =>
    s.api.call('PUT', `${s.env}/entities/${run.entity}`, { token, body: { state } });

  const callback = (run: Triggered, body: unknown) =>
    s.api.call('POST', run.callbackPath!, { headers: { authorization: `Bearer ${run.callbackToken}` }, body });

  const getRun = async (id: string) => {
    const response = await alice('GET', `${s.env}/action-runs/${id}`);
    expect(response.status).toBe(200);
    return response.body;
  };

  const entityState = async (run: Triggered) => (await alice('GET', `${s.env}/entities/${run.entity}`)).body.state as string;

  /** The entity's change rows, oldest first: [type, state]. */
  const changesOf = async (run: Triggered) =>
    (
      await s.api.db
        .select({ type: entityChanges.type, entity: entityChanges.entity })
        .from(entityChanges)
        .where(eq(entityChanges.entityId, run.entityId))
        .orderBy(asc(entityChanges.seq))
    ).map((change) => [change.type, (change.entity as { state: string }).state]);

  /** How many of the entity's changes moved it into `state` from another state. */
  const movesInto = async (run: Triggered, state: string) => {
    const states = (await changesOf(run)).map(([, at]) => at);
    return states.filter((at, i) => i > 0 && at === state && states[i - 1] !== state).length;
  };

  const notificationsAbout = async (runId: string) => {
    const response = await s.api.call('GET', '/notifications?limit=200', { token: s.alice.token });
    expect(response.status).toBe(200);
    return (response.body.items as { kind: string; body: string; data: { runId: string } }[]).filter((item) => item.data.runId === runId);
  };

  return { action, trigger, move, callback, getRun, entityState, changesOf, movesInto, notificationsAbout };
}

describe('completing a run by moving its entity', () => {
  let s: Setup;
  let h: ReturnType<typeof helpers>;
  let deploy: string;

  beforeAll(async () => {
    s = await setUp();
    h = helpers(s);
    deploy = await h.action();
  });
  afterAll(() => s?.close());

  it("a move to the action's onSuccess state: the run succeeded in the move's transaction, and the callback then answers 409", async () => {
    const run = await h.trigger(deploy);
    expect((await h.getRun(run.id)).status).toBe('running');
    const moved = await h.move(run, 'running');
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect(moved.body.state).toBe('running');
    const ended = await h.getRun(run.id);
    expect(ended).toMatchObject({ status: 'succeeded', error: null, output: null });
    expect(ended.completedAt).toEqual(expect.any(String));
    expectError(await h.callback(run, { status: 'failed', error: 'too late' }), 409, 'run_not_completable');
    expect(await h.getRun(run.id)).toMatchObject({ status: 'succeeded', error: null });
    // the move is the PUT's own change; the run's end moves nothing again
    expect(await h.changesOf(run)).toEqual([
      ['entity.created', 'provisioning'],
      ['entity.updated', 'running'],
    ]);
    expect(await h.notificationsAbout(run.id)).toEqual([expect.objectContaining({ kind: 'run.succeeded' })]);
  });

  it("a move to the action's onFailure state: the run failed, its error naming the move", async () => {
    const run = await h.trigger(deploy);
    expect((await h.move(run, 'failed')).status).toBe(200);
    const ended = await h.getRun(run.id);
    expect(ended).toMatchObject({ status: 'failed', output: null });
    expect(ended.error).toBe('the entity was moved to "failed", the action\'s onFailure state, through the API');
    expectError(await h.callback(run, { status: 'succeeded' }), 409, 'run_not_completable');
    expect(await h.entityState(run)).toBe('failed');
    expect(await h.notificationsAbout(run.id)).toEqual([
      expect.objectContaining({ kind: 'run.failed', body: expect.stringContaining("moved to \"failed\", the action's onFailure state") }),
    ]);
  });

  it('a move to another state leaves the run active; its callback still completes it and moves the entity', async () => {
    const run = await h.trigger(deploy);
    expect((await h.move(run, 'stopped')).status).toBe(200);
    expect((await h.getRun(run.id)).status).toBe('running');
    expect(await h.notificationsAbout(run.id)).toEqual([]);
    const done = await h.callback(run, { status: 'succeeded' });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(await h.entityState(run)).toBe('running');
  });

  it('a write that does not change the state (labels, or the state it already has) leaves the run active', async () => {
    const action = await h.action({ onSuccess: 'provisioning' });
    const run = await h.trigger(action);
    expect((await s.api.call('PUT', `${s.env}/entities/${run.entity}`, { token: s.alice.token, body: { labels: { tier: 'web' } } })).status).toBe(200);
    // already in onSuccess when triggered: staying there is no move
    expect((await h.move(run, 'provisioning')).status).toBe(200);
    expect((await h.getRun(run.id)).status).toBe('running');
  });

  it('a pending run (not yet delivered) completes too, and its delivery job goes with it: nothing is sent', async () => {
    const run = await h.trigger(deploy, { deliver: false });
    expect((await h.getRun(run.id)).status).toBe('pending');
    const before = s.receiver.requests.length;
    expect((await h.move(run, 'running')).status).toBe(200);
    expect(await h.getRun(run.id)).toMatchObject({ status: 'succeeded', startedAt: null, attempts: [] });
    expect(await s.api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, run.id))).toEqual([]);
    await s.api.jobs.drain();
    expect(s.receiver.requests.length).toBe(before);
  });

  it('every active run of the entity whose action ends there completes; an ended run and other entities are left alone', async () => {
    const other = await h.action({ onSuccess: 'stopped', onFailure: 'running' });
    const first = await h.trigger(deploy);
    // two more runs on the same entity, of another action; one of them cancelled
    const second = await s.api.call('POST', `${s.env}/entities/${first.entity}/actions/${other}`, { token: s.alice.token });
    expect(second.status).toBe(202);
    const third = await s.api.call('POST', `${s.env}/entities/${first.entity}/actions/${other}`, { token: s.alice.token });
    expect(third.status).toBe(202);
    await s.api.call('DELETE', `${s.env}/action-runs/${third.body.id}`, { token: s.alice.token });
    const elsewhere = await h.trigger(deploy);
    expect((await h.move(first, 'running')).status).toBe(200);
    expect((await h.getRun(first.id)).status).toBe('succeeded');
    // `running` is the other action's onFailure
    expect(await h.getRun(second.body.id)).toMatchObject({ status: 'failed', error: expect.stringContaining('"running"') });
    expect((await h.getRun(third.body.id)).status).toBe('cancelled');
    expect((await h.getRun(elsewhere.id)).status).toBe('running');
    expect(await h.notificationsAbout(third.body.id)).toEqual([]);
  });

  it('a move the entity API refuses (a transition the type does not allow) ends nothing', async () => {
    const type = uniqueSlug('box');
    const created = await s.api.call('POST', `${s.proj}/entity-types`, {
      token: s.alice.token,
      body: {
        kind: 'EntityType',
        name: type,
        states: ['new', 'up', 'down'],
        initialState: 'new',
        constraints: [{ kind: 'transition', from: 'new', to: ['down'] }],
      },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const action = uniqueSlug('boot');
    const defined = await s.api.call('POST', `${s.proj}/actions`, {
      token: s.alice.token,
      body: webhookAction(action, `${s.receiver.url}/hook`, {}, { entityType: type, parameters: [], onSuccess: 'up', onFailure: 'down' }),
    });
    expect(defined.status, JSON.stringify(defined.body)).toBe(201);
    const entity = uniqueSlug('box');
    expect((await s.api.call('POST', `${s.env}/entities`, { token: s.alice.token, body: { kind: 'Entity', entityType: type, name: entity } })).status).toBe(201);
    const run = await s.api.call('POST', `${s.env}/entities/${entity}/actions/${action}`, { token: s.alice.token });
    expect(run.status).toBe(202);
    expectError(await s.api.call('PUT', `${s.env}/entities/${entity}`, { token: s.alice.token, body: { state: 'up' } }), 409, 'transition_not_allowed');
    expect((await h.getRun(run.body.id)).status).toBe('pending');
    expect((await s.api.call('PUT', `${s.env}/entities/${entity}`, { token: s.alice.token, body: { state: 'down' } })).status).toBe(200);
    expect((await h.getRun(run.body.id)).status).toBe('failed');
  });

  it('a move by a service token completes the run as well (any caller with data:write)', async () => {
    const run = await h.trigger(deploy);
    expect((await h.move(run, 'running', s.owner)).status).toBe(200);
    expect((await h.getRun(run.id)).status).toBe('succeeded');
  });

  it('after the reaper failed the run, a move changes the entity only: the run stays failed, one notification', async () => {
    const run = await h.trigger(deploy);
    const ahead = { now: () => new Date(Date.now() + 2 * 60 * 60_000) };
    expect(await reapTimedOutRuns(s.api.db, ahead)).toContain(run.id);
    expect((await h.move(run, 'running')).status).toBe(200);
    expect(await h.getRun(run.id)).toMatchObject({ status: 'failed', error: 'timed out after 60 minutes without a completion' });
    expect(await h.notificationsAbout(run.id)).toEqual([expect.objectContaining({ kind: 'run.failed' })]);
  });
});

describe('a callback and a move racing for the same run (truly concurrent on Postgres; on PGlite the sessions take turns)', () => {
  let s: Setup;
  let h: ReturnType<typeof helpers>;

  beforeAll(async () => {
    s = await setUp();
    h = helpers(s);
  });
  afterAll(() => s?.close());

  it('each run ends once: succeeded, one notification, one move of its entity into onSuccess; the loser changes nothing', async () => {
    const action = await h.action();
    const runs: Triggered[] = [];
    for (let i = 0; i < 12; i++) runs.push(await h.trigger(action));
    // every other pair is sent the other way round, and the move authenticates with a service token
    // (as quick as the callback's own token), so that both orders occur
    const outcomes = await Promise.all(
      runs.map(async (run, i) => {
        const callback = () => h.callback(run, { status: 'succeeded', output: { by: 'callback' } });
        const move = () => h.move(run, 'running', s.owner);
        if (i % 2 === 0) return Promise.all([callback(), move()]);
        const [moved, calledBack] = await Promise.all([move(), callback()]);
        return [calledBack, moved];
      }),
    );
    for (const [i, run] of runs.entries()) {
      const [callback, moved] = outcomes[i] as [ApiResponse, ApiResponse];
      expect(moved.status, JSON.stringify(moved.body)).toBe(200);
      const ended = await h.getRun(run.id);
      expect(ended.status).toBe('succeeded');
      if (callback.status === 200) {
        // the callback came first and moved the entity; the PUT then found it there already
        expect(ended.output).toEqual({ by: 'callback' });
        expect(await h.changesOf(run)).toEqual([
          ['entity.created', 'provisioning'],
          ['entity.updated', 'running'],
          ['entity.updated', 'running'],
        ]);
      } else {
        expectError(callback, 409, 'run_not_completable');
        expect(ended.output).toBeNull();
        expect(await h.changesOf(run)).toEqual([
          ['entity.created', 'provisioning'],
          ['entity.updated', 'running'],
        ]);
      }
      expect(await h.movesInto(run, 'running')).toBe(1);
      expect(await h.notificationsAbout(run.id)).toEqual([expect.objectContaining({ kind: 'run.succeeded' })]);
      expect(await s.api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, run.id))).toEqual([]);
    }
  });
});
