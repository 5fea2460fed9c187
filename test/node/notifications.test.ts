import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { notify } from '../../src/modules/notifications/notify';
import { actionRuns, notifications, orgMembers } from '../../src/db/schema';
import { failDeadLettered } from '../../src/runs/completion';
import { createTenant, expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, type TestUser } from '../support/people';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';

/**
 * Notifications (SPEC Notifications; DECISIONS §7, §8): a user's own list
 * (newest first, `unread`, `limit` 1..200 default 50, `unreadCount`), marking
 * one or all read, and the notifications a run the user triggered leaves
 * when it succeeds or fails. The row's user is the only boundary: another
 * user's notification is 404, never listed.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** `count` notifications for `userId`, one second apart (the last the newest), written as the app writes them. */
async function seedNotifications(api: TestApi, userId: string, count: number, options: { start?: Date; kind?: 'org.member_added' } = {}) {
  const start = options.start ?? new Date('2026-01-01T00:00:00.000Z');
  await notify(
    api.db,
    ...Array.from({ length: count }, (_, i) => ({
      userId,
      orgId: null,
      kind: options.kind ?? ('org.member_added' as const),
      title: `seeded ${i}`,
      data: { i },
      createdAt: new Date(start.getTime() + i * 1000),
    })),
  );
}

const idsOf = async (api: TestApi, userId: string) =>
  (await api.db.select({ id: notifications.id }).from(notifications).where(eq(notifications.userId, userId))).map((row) => row.id);

describe('notifications', () => {
  const clock = manualClock();
  let api: TestApi;
  let serviceToken: string;

  const list = (user: TestUser, query = '') => api.call('GET', `/notifications${query}`, { token: user.token });
  const read = (user: TestUser, id: string) => api.call('POST', `/notifications/${id}/read`, { token: user.token });
  const readAll = (user: TestUser) => api.call('POST', '/notifications/read-all', { token: user.token });

  beforeAll(async () => {
    api = await createTestApi({ clock });
    serviceToken = await mintToken(api, await createTenant(api), { role: 'owner' });
  });
  afterAll(() => api.close());

  describe('GET /notifications', () => {
    it('lists nothing, unreadCount 0, for a new user', async () => {
      const user = await signUp(api);
      const response = await list(user);
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ items: [], unreadCount: 0 });
    });

    it('lists newest first with every documented field', async () => {
      const user = await signUp(api);
      const { org } = await createUserTenant(api, user);
      await notify(api.db, {
        userId: user.id,
        orgId: org.id,
        kind: 'org.role_changed',
        title: 'Your role is now admin',
        body: 'in acme',
        data: { role: 'admin' },
        createdAt: new Date('2026-02-01T00:00:00.000Z'),
      });
      await seedNotifications(api, user.id, 1, { start: new Date('2026-01-01T00:00:00.000Z') });
      const response = await list(user);
      expect(response.status).toBe(200);
      expect(response.body.unreadCount).toBe(2);
      expect(response.body.items).toHaveLength(2);
      const [newest, older] = response.body.items;
      expect(newest).toEqual({
        id: expect.stringMatching(UUID),
        kind: 'org.role_changed',
        title: 'Your role is now admin',
        body: 'in acme',
        data: { role: 'admin' },
        orgId: org.id,
        readAt: null,
        createdAt: '2026-02-01T00:00:00.000Z',
      });
      expect(older).toMatchObject({ title: 'seeded 0', body: '', orgId: null, createdAt: '2026-01-01T00:00:00.000Z' });
    });

    it('returns 50 by default, `limit` up to 200, and unreadCount counts them all whatever the limit', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 210);
      const byDefault = await list(user);
      expect(byDefault.status).toBe(200);
      expect(byDefault.body.items).toHaveLength(50);
      expect(byDefault.body.unreadCount).toBe(210);
      // newest first: seeded 209, 208, ...
      expect(byDefault.body.items.map((item: { title: string }) => item.title).slice(0, 3)).toEqual(['seeded 209', 'seeded 208', 'seeded 207']);
      const times = byDefault.body.items.map((item: { createdAt: string }) => item.createdAt);
      expect([...times].sort().reverse()).toEqual(times);

      const three = await list(user, '?limit=3');
      expect(three.body.items.map((item: { title: string }) => item.title)).toEqual(['seeded 209', 'seeded 208', 'seeded 207']);
      expect(three.body.unreadCount).toBe(210);
      expect((await list(user, '?limit=1')).body.items).toHaveLength(1);
      expect((await list(user, '?limit=200')).body.items).toHaveLength(200);
    });

    it('returns 60 of 60 with limit=60, and 50 of them without a limit', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 60);
      expect((await list(user)).body.items).toHaveLength(50);
      expect((await list(user, '?limit=60')).body.items).toHaveLength(60);
    });

    it.each([
      ['limit=201', 'over the maximum'],
      ['limit=0', 'zero'],
      ['limit=-1', 'negative'],
      ['limit=1.5', 'not an integer'],
      ['limit=abc', 'not a number'],
      ['limit=', 'empty'],
      ['limit=0x10', 'in hex'],
      ['unread=yes', 'unread not true or false'],
      ['unread=1', 'unread as a digit'],
    ])('refuses %s (%s) with 400 validation_failed', async (query) => {
      const user = await signUp(api);
      expectError(await list(user, `?${query}`), 400, 'validation_failed');
    });

    it('filters unread=true; unread=false lists everything', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 4);
      const all = (await list(user)).body.items as { id: string; title: string }[];
      expect((await read(user, all[0]!.id)).status).toBe(200);
      expect((await read(user, all[2]!.id)).status).toBe(200);
      const unread = await list(user, '?unread=true');
      expect(unread.status).toBe(200);
      expect(unread.body.items.map((item: { title: string }) => item.title)).toEqual([all[1]!.title, all[3]!.title]);
      expect(unread.body.items.every((item: { readAt: null }) => item.readAt === null)).toBe(true);
      expect(unread.body.unreadCount).toBe(2);
      const everything = await list(user, '?unread=false');
      expect(everything.body.items).toHaveLength(4);
      expect(everything.body.unreadCount).toBe(2);
      expect((await list(user, '?unread=true&limit=1')).body).toMatchObject({ items: [{ title: all[1]!.title }], unreadCount: 2 });
    });
  });

  describe('POST /notifications/{id}/read', () => {
    it('marks one read with the time; again keeps the first time (idempotent)', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 2);
      const [first] = (await list(user)).body.items;
      const marked = await read(user, first.id);
      expect(marked.status).toBe(200);
      expect(marked.body).toEqual({ id: first.id, readAt: clock.now().toISOString() });
      expect(marked.body.readAt).toMatch(RFC3339_MS);
      const firstReadAt = marked.body.readAt;

      clock.advance(5_000);
      const again = await read(user, first.id);
      expect(again.status).toBe(200);
      expect(again.body).toEqual({ id: first.id, readAt: firstReadAt });

      const after = await list(user);
      expect(after.body.unreadCount).toBe(1);
      expect(after.body.items.find((item: { id: string }) => item.id === first.id).readAt).toBe(firstReadAt);
    });

    it('is 404 for an unknown id and for an id that is not a UUID', async () => {
      const user = await signUp(api);
      expectError(await read(user, '7c1f3f0e-4a8a-4c52-9d7e-2b1a0f9d8c61'), 404, 'not_found');
      expectError(await read(user, 'not-a-uuid'), 404, 'not_found');
      expectError(await read(user, '12345'), 404, 'not_found');
    });
  });

  describe('POST /notifications/read-all', () => {
    it('marks every unread one read and says how many it changed; a second call changes none', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 5);
      const [one] = (await list(user)).body.items;
      const earlier = (await read(user, one.id)).body.readAt;
      clock.advance(1_000);
      const all = await readAll(user);
      expect(all.status).toBe(200);
      expect(all.body).toEqual({ updated: 4 });
      const after = await list(user);
      expect(after.body.unreadCount).toBe(0);
      expect(after.body.items.every((item: { readAt: string | null }) => item.readAt !== null)).toBe(true);
      // one read earlier keeps its time
      expect(after.body.items.find((item: { id: string }) => item.id === one.id).readAt).toBe(earlier);
      expect((await list(user, '?unread=true')).body).toEqual({ items: [], unreadCount: 0 });
      expect((await readAll(user)).body).toEqual({ updated: 0 });
    });

    it('answers { updated: 0 } for a user with no notifications', async () => {
      const user = await signUp(api);
      const response = await readAll(user);
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ updated: 0 });
    });
  });

  describe("isolation: the row's user is the only boundary", () => {
    it("never lists another user's notifications, and answers 404 (not 403) for their ids", async () => {
      const alice = await signUp(api);
      const bob = await signUp(api);
      await seedNotifications(api, alice.id, 3);
      await seedNotifications(api, bob.id, 1);
      const aliceIds = await idsOf(api, alice.id);

      const bobs = await list(bob);
      expect(bobs.body.items).toHaveLength(1);
      expect(bobs.body.unreadCount).toBe(1);
      expect(bobs.body.items.some((item: { id: string }) => aliceIds.includes(item.id))).toBe(false);

      for (const id of aliceIds) expectError(await read(bob, id), 404, 'not_found');
      // bob's read-all leaves alice's unread
      expect((await readAll(bob)).body).toEqual({ updated: 1 });
      expect((await list(alice)).body.unreadCount).toBe(3);
      const rows = await api.db.select().from(notifications).where(eq(notifications.userId, alice.id));
      expect(rows.every((row) => row.readAt === null)).toBe(true);
    });
  });

  describe('who may call (401 without a user session)', () => {
    it('refuses no credentials, a service token and a forged session on every route, changing nothing', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 1);
      const [id] = await idsOf(api, user.id);
      for (const token of [undefined, serviceToken, 'forged.session-token']) {
        expectError(await api.call('GET', '/notifications', { token }), 401, 'unauthorized');
        expectError(await api.call('POST', `/notifications/${id}/read`, { token }), 401, 'unauthorized');
        expectError(await api.call('POST', '/notifications/read-all', { token }), 401, 'unauthorized');
      }
      expect((await list(user)).body.unreadCount).toBe(1);
    });

    it('serves the session cookie too (a read from a browser)', async () => {
      const user = await signUp(api);
      await seedNotifications(api, user.id, 2);
      const response = await api.call('GET', '/notifications', { headers: { cookie: user.cookie } });
      expect(response.status).toBe(200);
      expect(response.body.unreadCount).toBe(2);
    });
  });
});

describe('notifications in bootstrap mode', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi();
  });
  afterAll(() => api.close());

  it('answers 401 on every route: bootstrap mode is no user', async () => {
    expectError(await api.call('GET', '/notifications'), 401, 'unauthorized');
    expectError(await api.call('POST', '/notifications/read-all'), 401, 'unauthorized');
    expectError(await api.call('POST', '/notifications/7c1f3f0e-4a8a-4c52-9d7e-2b1a0f9d8c61/read'), 401, 'unauthorized');
  });
});

/**
 * DECISIONS §8: "an action run the user triggered reaching succeeded or
 * failed" notifies that user, written with the terminal transition. End to
 * end: a user's own organization, a real receiver, the run triggered with
 * the user's session, completed by its callback, by a failing delivery, by
 * the reaper, by a dead-lettered delivery.
 */
describe('run notifications', () => {
  const clock = manualClock();
  let api: TestApi;
  let receiver: Receiver;
  let alice: TestUser;
  let env: string;
  let proj: string;
  let projectSlug: string;
  let orgId: string;
  let ownerToken: string;

  const as = (credential: string) => ({
    call: (method: string, path: string, body?: unknown) => api.call(method, path, { token: credential, body }),
  });

  const createAction = async (fields: Record<string, unknown> = {}, trigger: Record<string, unknown> = {}) => {
    const name = uniqueSlug('deploy');
    const response = await as(alice.token).call('POST', `${proj}/actions`, webhookAction(name, `${receiver.url}/hook`, trigger, fields));
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return name;
  };

  const createEntity = async () => {
    const name = uniqueSlug('web');
    const response = await as(alice.token).call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return name;
  };

  /** Triggers `action` on a fresh entity with `credential` (a session or a token); delivered unless `deliver` is false. */
  const trigger = async (credential: string, action: string, options: { deliver?: boolean } = {}) => {
    const entity = await createEntity();
    const before = receiver.requests.length;
    const run = await as(credential).call('POST', `${env}/entities/${entity}/actions/${action}`);
    expect(run.status, JSON.stringify(run.body)).toBe(202);
    if (options.deliver === false) return { id: run.body.id as string, entity, triggeredBy: run.body.triggeredBy as string };
    await api.jobs.drain();
    const request = receiver.requests.slice(before).find((r) => r.headers['webhook-id'] === run.body.id);
    const sent = request ? JSON.parse(request.body) : undefined;
    return {
      id: run.body.id as string,
      entity,
      triggeredBy: run.body.triggeredBy as string,
      callbackPath: sent ? new URL(sent.callbackUrl).pathname : undefined,
      callbackToken: sent?.callbackToken as string | undefined,
    };
  };

  const callback = (run: { callbackPath?: string; callbackToken?: string }, body: unknown) =>
    api.call('POST', run.callbackPath!, { headers: { authorization: `Bearer ${run.callbackToken}` }, body });

  const runStatus = async (id: string) => (await as(alice.token).call('GET', `${env}/action-runs/${id}`)).body.status;

  const notificationsOf = async (user: TestUser) => {
    const response = await api.call('GET', '/notifications?limit=200', { token: user.token });
    expect(response.status).toBe(200);
    return response.body as { items: any[]; unreadCount: number };
  };
  const aboutRun = async (user: TestUser, runId: string) => (await notificationsOf(user)).items.filter((item) => item.data.runId === runId);

  beforeAll(async () => {
    receiver = await startReceiver({ status: 202 });
    api = await createTestApi({ clock, env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' } });
    alice = await signUp(api, { name: 'Alice' });
    const tenant = await createUserTenant(api, alice);
    orgId = tenant.org.id;
    projectSlug = tenant.project.slug;
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const type = await as(alice.token).call('POST', `${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    // a token minted by the user's session: the runs it triggers are the token's, not the user's
    const minted = await as(alice.token).call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
      name: 'ci',
      role: 'owner',
    });
    expect(minted.status, JSON.stringify(minted.body)).toBe(201);
    ownerToken = minted.body.token;
  });
  afterAll(async () => {
    await api.close();
    await receiver.close();
  });

  it('a run completed by its callback as succeeded, and another as failed: both are listed, newest first', async () => {
    const action = await createAction();
    const good = await trigger(alice.token, action);
    expect(good.triggeredBy).toBe(`user:${alice.id}`);
    expect(await runStatus(good.id)).toBe('running');
    // nothing yet: running is not an outcome
    expect(await aboutRun(alice, good.id)).toEqual([]);
    const succeeded = await callback(good, { status: 'succeeded', output: { url: 'https://web.example.com' } });
    expect(succeeded.status, JSON.stringify(succeeded.body)).toBe(200);

    clock.advance(1_000);
    const bad = await trigger(alice.token, action);
    const failed = await callback(bad, { status: 'failed', error: 'terraform apply failed' });
    expect(failed.status, JSON.stringify(failed.body)).toBe(200);

    const { items } = await notificationsOf(alice);
    const mine = items.filter((item) => [good.id, bad.id].includes(item.data.runId));
    expect(mine).toHaveLength(2);
    // newest first: the failure came a second later
    expect(mine[0]).toEqual({
      id: expect.stringMatching(UUID),
      kind: 'run.failed',
      title: `"${action}" failed on "${bad.entity}"`,
      body: `The run failed in ${projectSlug}/default: terraform apply failed`,
      data: { runId: bad.id, actionName: action, entityName: bad.entity, envName: 'default', projectSlug },
      orgId,
      readAt: null,
      createdAt: clock.now().toISOString(),
    });
    expect(mine[1]).toMatchObject({
      kind: 'run.succeeded',
      title: `"${action}" succeeded on "${good.entity}"`,
      body: `The run finished in ${projectSlug}/default.`,
      data: { runId: good.id, actionName: action, entityName: good.entity, envName: 'default', projectSlug },
      orgId,
      readAt: null,
    });
  });

  it('a second callback (409) adds no second notification', async () => {
    const run = await trigger(alice.token, await createAction());
    expect((await callback(run, { status: 'succeeded' })).status).toBe(200);
    expectError(await callback(run, { status: 'failed', error: 'late' }), 409, 'run_not_completable');
    expect(await aboutRun(alice, run.id)).toHaveLength(1);
  });

  it('a run triggered by a service token notifies nobody, though its token was minted by the user', async () => {
    const action = await createAction();
    const run = await trigger(ownerToken, action);
    expect(run.triggeredBy).toMatch(/^token:/);
    expect((await callback(run, { status: 'succeeded' })).status).toBe(200);
    const failing = await trigger(ownerToken, action);
    expect((await callback(failing, { status: 'failed', error: 'boom' })).status).toBe(200);
    expect(await runStatus(failing.id)).toBe('failed');
    const all = await api.db.select({ data: notifications.data }).from(notifications);
    expect(all.filter((row) => [run.id, failing.id].includes((row.data as { runId?: string }).runId ?? ''))).toEqual([]);
  });

  it('a cancelled run notifies nobody (only succeeded and failed do)', async () => {
    const run = await trigger(alice.token, await createAction(), { deliver: false });
    const cancelled = await as(alice.token).call('DELETE', `${env}/action-runs/${run.id}`);
    expect(cancelled.status, JSON.stringify(cancelled.body)).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    expect(await aboutRun(alice, run.id)).toEqual([]);
  });

  it('a delivery that fails for good notifies run.failed with the [delivery] error', async () => {
    receiver.route('/refused', { status: 400 });
    const action = await createAction({}, { url: `${receiver.url}/refused` });
    const run = await trigger(alice.token, action);
    expect(await runStatus(run.id)).toBe('failed');
    const [notification] = await aboutRun(alice, run.id);
    expect(notification).toMatchObject({
      kind: 'run.failed',
      title: `"${action}" failed on "${run.entity}"`,
      body: `The run failed in ${projectSlug}/default: [delivery] the receiver answered HTTP 400 (not retried)`,
      data: { runId: run.id, actionName: action, entityName: run.entity, envName: 'default', projectSlug },
    });
    expect(await aboutRun(alice, run.id)).toHaveLength(1);
  });

  it('a run the reaper times out notifies run.failed', async () => {
    const run = await trigger(alice.token, await createAction({ timeoutMinutes: 1 }));
    expect(await runStatus(run.id)).toBe('running');
    clock.advance(60_000);
    expect(await api.jobs.reap()).toContain(run.id);
    const [notification] = await aboutRun(alice, run.id);
    expect(notification).toMatchObject({
      kind: 'run.failed',
      body: `The run failed in ${projectSlug}/default: timed out after 1 minute without a completion`,
      createdAt: clock.now().toISOString(),
    });
    // a second pass reaps nothing and notifies nothing more
    expect(await api.jobs.reap()).toEqual([]);
    expect(await aboutRun(alice, run.id)).toHaveLength(1);
  });

  it('a dead-lettered delivery (the Worker host) notifies run.failed', async () => {
    const run = await trigger(alice.token, await createAction(), { deliver: false });
    expect(await failDeadLettered(api.db, clock, run.id, 1)).toBe(true);
    expect(await runStatus(run.id)).toBe('failed');
    expect(await aboutRun(alice, run.id)).toEqual([expect.objectContaining({ kind: 'run.failed', data: expect.objectContaining({ runId: run.id }) })]);
    expect(await failDeadLettered(api.db, clock, run.id, 1)).toBe(false);
    expect(await aboutRun(alice, run.id)).toHaveLength(1);
  });

  it('notifies only the user who triggered the run, not the other members', async () => {
    const bob = await signUp(api);
    await api.db.insert(orgMembers).values({ orgId, userId: bob.id, role: 'member' });
    const run = await trigger(bob.token, await createAction());
    expect(run.triggeredBy).toBe(`user:${bob.id}`);
    expect((await callback(run, { status: 'succeeded' })).status).toBe(200);
    expect(await aboutRun(bob, run.id)).toEqual([expect.objectContaining({ kind: 'run.succeeded' })]);
    expect(await aboutRun(alice, run.id)).toEqual([]);
  });

  it('notifies nobody when the user has left the organization since triggering, and the run still completes', async () => {
    const carol = await signUp(api);
    await api.db.insert(orgMembers).values({ orgId, userId: carol.id, role: 'member' });
    const run = await trigger(carol.token, await createAction());
    await api.db.delete(orgMembers).where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, carol.id)));
    expect((await callback(run, { status: 'succeeded' })).status).toBe(200);
    expect(await runStatus(run.id)).toBe('succeeded');
    expect(await aboutRun(carol, run.id)).toEqual([]);
    const [row] = await api.db.select({ triggeredBy: actionRuns.triggeredBy }).from(actionRuns).where(eq(actionRuns.id, run.id));
    expect(row!.triggeredBy).toBe(`user:${carol.id}`);
  });

  it('a removal racing the completion never leaves the removed user a notification about the organization', async () => {
    const action = await createAction();
    for (let round = 0; round < 4; round++) {
      const dave = await signUp(api);
      await api.db.insert(orgMembers).values({ orgId, userId: dave.id, role: 'member' });
      const run = await trigger(dave.token, action);
      const [completed, removed] = await Promise.all([
        callback(run, { status: 'succeeded' }),
        as(alice.token).call('DELETE', `/orgs/${orgId}/users/${dave.id}`),
      ]);
      expect(completed.status, JSON.stringify(completed.body)).toBe(200);
      expect(removed.status, JSON.stringify(removed.body)).toBe(200);
      expect(await runStatus(run.id)).toBe('succeeded');
      const left = await api.db
        .select()
        .from(notifications)
        .where(and(eq(notifications.userId, dave.id), eq(notifications.orgId, orgId)));
      expect(left).toEqual([]);
    }
  });
});
