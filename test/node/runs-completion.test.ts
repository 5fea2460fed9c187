import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { and, asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signCallbackToken } from '../../src/auth/callback-token';
import { deliveryJobs, entityChanges } from '../../src/db/schema';
import { createTenant, expectError, mintToken, seedToken, uniqueSlug, type Tenant } from '../support/fixtures';
import { createTestApi, manualClock, type ApiResponse, type TestApi } from '../support/node-app';
import { startReceiver, type Receiver } from '../support/receiver';

/**
 * How runs end (SPEC "ActionRun status"; DECISIONS §4): the callback with
 * its per-run token, and the reaper. Time is a manual clock: the callback
 * token and the run expire together, `timeoutMinutes` after the trigger.
 */

describe('run completion', () => {
  const clock = manualClock();
  let api: TestApi;
  let receiver: Receiver;
  let tenant: Tenant;
  let rival: Tenant;
  let owner: string;
  let proj: string;
  let env: string;
  let defaultEnvId: string;
  let stagingEnvId: string;

  const call = async (method: string, path: string, body?: unknown) => api.call(method, path, { token: owner, body });

  const createAction = async (fields: Record<string, unknown> = {}, trigger: Record<string, unknown> = {}) => {
    const name = uniqueSlug('act');
    const response = await call('POST', `${proj}/actions`, {
      kind: 'Action',
      name,
      entityType: 'vm',
      onSuccess: 'running',
      onFailure: 'failed',
      timeoutMinutes: 1,
      trigger: {
        type: 'webhook',
        url: `${receiver.url}/hook`,
        payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}' },
        retry: { maxAttempts: 3, initialDelayMs: 0 },
        ...trigger,
      },
      ...fields,
    });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return name;
  };

  interface Triggered {
    id: string;
    entity: string;
    entityId: string;
    /** What the receiver was handed: the callback path (by ids) and the token. */
    callbackPath: string;
    callbackToken: string;
  }

  /** A fresh entity, the action triggered on it and delivered: the run is running. */
  const triggerDelivered = async (action: string): Promise<Triggered> => {
    const entity = uniqueSlug('vm');
    const created = await call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity });
    expect(created.status).toBe(201);
    const before = receiver.requests.length;
    const run = await call('POST', `${env}/entities/${entity}/actions/${action}`);
    expect(run.status, JSON.stringify(run.body)).toBe(202);
    await api.jobs.drain();
    const request = receiver.requests.slice(before).find((r) => r.headers['webhook-id'] === run.body.id);
    expect(request).toBeDefined();
    const { callbackUrl, callbackToken } = JSON.parse(request!.body);
    return { id: run.body.id, entity, entityId: created.body.id, callbackPath: new URL(callbackUrl).pathname, callbackToken };
  };

  const callback = (path: string, token: string | undefined, body: unknown) =>
    api.call('POST', path, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` }, body });

  const getRun = async (id: string) => (await call('GET', `${env}/action-runs/${id}`)).body;

  const changesOf = (entityId: string) =>
    api.db
      .select({ type: entityChanges.type, entity: entityChanges.entity })
      .from(entityChanges)
      .where(and(eq(entityChanges.envId, defaultEnvId), eq(entityChanges.entityId, entityId)))
      .orderBy(asc(entityChanges.seq));

  beforeAll(async () => {
    receiver = await startReceiver({ status: 202 });
    api = await createTestApi({ clock, env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1', API_BASE_URL: 'https://cellplane.example.com' } });
    tenant = await createTenant(api);
    rival = await createTenant(api, { project: tenant.project.slug });
    owner = await mintToken(api, tenant, { role: 'owner' });
    await seedToken(api, rival);
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const staging = await call('POST', `${proj}/envs`, { name: 'staging' });
    expect(staging.status).toBe(201);
    stagingEnvId = staging.body.id;
    defaultEnvId = (await call('GET', `${proj}/envs`)).body.find((e: { name: string }) => e.name === 'default').id;
    const type = await call('POST', `${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
    });
    expect(type.status).toBe(201);
  });
  afterAll(async () => {
    await api.close();
    await receiver.close();
  });

  describe('the callback', () => {
    it('success: succeeded with its output, and the entity moves to onSuccess with an entity.updated change', async () => {
      const run = await triggerDelivered(await createAction());
      expect((await getRun(run.id)).status).toBe('running');
      const done = await callback(run.callbackPath, run.callbackToken, { status: 'succeeded', output: { url: 'https://app.example.com' } });
      expect(done.status, JSON.stringify(done.body)).toBe(200);
      expect(done.body).toMatchObject({ id: run.id, status: 'succeeded', output: { url: 'https://app.example.com' }, error: null });
      expect(done.body.completedAt).toBe(clock.now().toISOString());
      expect((await call('GET', `${env}/entities/${run.entity}`)).body.state).toBe('running');
      const changes = await changesOf(run.entityId);
      expect(changes.map((change) => change.type)).toEqual(['entity.created', 'entity.updated']);
      expect(changes[1]!.entity).toMatchObject({ name: run.entity, state: 'running' });
    });

    it('failure: failed with its error and output, and the entity moves to onFailure', async () => {
      const run = await triggerDelivered(await createAction());
      const done = await callback(run.callbackPath, run.callbackToken, { status: 'failed', error: 'terraform apply failed', output: { step: 'apply' } });
      expect(done.status, JSON.stringify(done.body)).toBe(200);
      expect(done.body).toMatchObject({ status: 'failed', error: 'terraform apply failed', output: { step: 'apply' } });
      expect((await call('GET', `${env}/entities/${run.entity}`)).body.state).toBe('failed');
      expect((await changesOf(run.entityId)).map((change) => [change.type, (change.entity as { state: string }).state])).toEqual([
        ['entity.created', 'provisioning'],
        ['entity.updated', 'failed'],
      ]);
    });

    it('the path may name the tenant by slugs and name instead of ids', async () => {
      const run = await triggerDelivered(await createAction());
      const done = await callback(`${env}/action-runs/${run.id}/callback`, run.callbackToken, { status: 'succeeded' });
      expect(done.status, JSON.stringify(done.body)).toBe(200);
    });

    /** A receiver that completes the run through the callback before it answers the delivery. */
    const callingBack = async (answer: number, result: unknown) => {
      const completions: ApiResponse[] = [];
      const requests: string[] = [];
      const server: Server = createServer((req, res) => {
        let body = '';
        req.on('data', (chunk) => (body += chunk));
        req.on('end', async () => {
          requests.push(body);
          const { callbackUrl, callbackToken } = JSON.parse(body);
          completions.push(await callback(new URL(callbackUrl).pathname, callbackToken, result));
          res.writeHead(answer).end();
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      return { url, requests, completions, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
    };

    it.each([
      ['delivered (200)', 200],
      ['a retryable answer (503)', 503],
      ['a final answer (400)', 400],
    ])('a callback while the run is still pending completes it; the delivery outcome after it, %s, changes nothing', async (_name, answer) => {
      const receiver2 = await callingBack(answer, { status: 'succeeded', output: { early: true } });
      try {
        const entity = uniqueSlug('vm');
        const created = await call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity });
        const run = (await call('POST', `${env}/entities/${entity}/actions/${await createAction({}, { url: receiver2.url })}`)).body;
        await api.jobs.drain();
        expect(receiver2.completions.map((c) => [c.status, c.body.status])).toEqual([[200, 'succeeded']]);
        // not delivered again: the completion dropped the job
        expect(receiver2.requests).toHaveLength(1);
        const after = await getRun(run.id);
        expect(after).toMatchObject({ status: 'succeeded', error: null, output: { early: true }, startedAt: null });
        expect(after.attempts).toHaveLength(1);
        expect(await api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, run.id))).toEqual([]);
        expect((await changesOf(created.body.id)).map((change) => change.type)).toEqual(['entity.created', 'entity.updated']);
      } finally {
        await receiver2.close();
      }
    });

    it('401 invalid_callback_token: no token, not a token, another run\'s token, an expired token; the run stays as it was', async () => {
      const action = await createAction();
      const run = await triggerDelivered(action);
      const other = await triggerDelivered(action);
      const success = { status: 'succeeded' };
      expectError(await callback(run.callbackPath, undefined, success), 401, 'invalid_callback_token');
      expectError(await api.call('POST', run.callbackPath, { headers: { authorization: `Basic ${run.callbackToken}` }, body: success }), 401, 'invalid_callback_token');
      expectError(await callback(run.callbackPath, 'garbage', success), 401, 'invalid_callback_token');
      expectError(await callback(run.callbackPath, `${run.callbackToken.slice(0, -4)}AAAA`, success), 401, 'invalid_callback_token');
      // a service token is not a callback token
      expectError(await callback(run.callbackPath, owner, success), 401, 'invalid_callback_token');
      const foreign = await callback(run.callbackPath, other.callbackToken, success);
      expectError(foreign, 401, 'invalid_callback_token');
      expect(foreign.body.error).toContain('another run');
      expect((await getRun(run.id)).status).toBe('running');

      // the token expires with the run, timeoutMinutes after the trigger
      clock.advance(60_000);
      const expired = await callback(run.callbackPath, run.callbackToken, success);
      expectError(expired, 401, 'invalid_callback_token');
      expect(expired.body.error).toContain('expired');
      expect((await getRun(run.id)).status).toBe('running');
      expect((await getRun(other.id)).status).toBe('running');
    });

    it('404 when the path does not lead to the run: another environment, project or organization', async () => {
      const run = await triggerDelivered(await createAction());
      const [, orgId, projectId] = run.callbackPath.split('/');
      const wrong = [
        `/${orgId}/${projectId}/envs/${stagingEnvId}/action-runs/${run.id}/callback`,
        `${proj}/envs/staging/action-runs/${run.id}/callback`,
        `/${tenant.org.slug}/other-project/envs/default/action-runs/${run.id}/callback`,
        `/${rival.org.slug}/${rival.project.slug}/envs/default/action-runs/${run.id}/callback`,
        `/${rival.org.id}/${projectId}/envs/default/action-runs/${run.id}/callback`,
      ];
      for (const path of wrong) expectError(await callback(path, run.callbackToken, { status: 'succeeded' }), 404, 'not_found');
      expect((await getRun(run.id)).status).toBe('running');
    });

    it('409 run_not_completable once the run is completed or cancelled', async () => {
      const action = await createAction();
      const run = await triggerDelivered(action);
      expect((await callback(run.callbackPath, run.callbackToken, { status: 'failed', error: 'boom' })).status).toBe(200);
      expectError(await callback(run.callbackPath, run.callbackToken, { status: 'succeeded' }), 409, 'run_not_completable');
      expect(await getRun(run.id)).toMatchObject({ status: 'failed', error: 'boom' });
      expect((await changesOf(run.entityId)).map((change) => change.type)).toEqual(['entity.created', 'entity.updated']);

      // cancelled before its delivery: the token it would have been sent is refused with 409 too
      const entity = uniqueSlug('vm');
      await call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity });
      const pending = (await call('POST', `${env}/entities/${entity}/actions/${action}`)).body;
      expect((await call('DELETE', `${env}/action-runs/${pending.id}`)).status).toBe(200);
      const token = await signCallbackToken(
        api.platform.config.authSecret,
        { runId: pending.id, orgId: tenant.org.id, projectId: tenant.project.id, envId: defaultEnvId },
        new Date(clock.now().getTime() + 60_000),
      );
      expectError(await callback(`${env}/action-runs/${pending.id}/callback`, token, { status: 'succeeded' }), 409, 'run_not_completable');
    });

    it('a failure whose error starts with "[delivery]" is 400: that prefix marks delivery failures only', async () => {
      const run = await triggerDelivered(await createAction());
      expectError(await callback(run.callbackPath, run.callbackToken, { status: 'failed', error: '[delivery] forged' }), 400, 'validation_failed');
      expectError(await callback(run.callbackPath, run.callbackToken, { status: 'done' }), 400, 'validation_failed');
      expect((await getRun(run.id)).status).toBe('running');
    });
  });

  describe('the reaper', () => {
    it('fails runs past their timeout, pending ones with a [delivery] error; a second pass changes nothing', async () => {
      // one delivered, one whose delivery is waiting an hour for its retry
      const running = await triggerDelivered(await createAction());
      receiver.script({ status: 503 });
      const entity = uniqueSlug('vm');
      await call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity });
      const slowRetry = await createAction({}, { retry: { maxAttempts: 3, initialDelayMs: 3_600_000 } });
      const pending = (await call('POST', `${env}/entities/${entity}/actions/${slowRetry}`)).body;
      await api.jobs.drain();
      receiver.script({ status: 202 });
      expect((await getRun(pending.id)).status).toBe('pending');

      clock.advance(59_999);
      expect(await api.jobs.reap()).not.toContain(running.id);
      clock.advance(1);
      const reaped = await api.jobs.reap();
      expect(reaped).toEqual(expect.arrayContaining([running.id, pending.id]));

      const timedOut = await getRun(running.id);
      expect(timedOut).toMatchObject({ status: 'failed', error: 'timed out after 1 minute without a completion' });
      expect(timedOut.completedAt).toBe(clock.now().toISOString());
      const neverDelivered = await getRun(pending.id);
      expect(neverDelivered.status).toBe('failed');
      expect(neverDelivered.error).toMatch(/^\[delivery\] timed out after 1 minute before the trigger could be delivered$/);
      // its retry is dropped with it
      expect(await api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, pending.id))).toEqual([]);
      const requests = receiver.requests.length;
      clock.advance(3_600_000);
      await api.jobs.drain();
      expect(receiver.requests).toHaveLength(requests);

      expect(await api.jobs.reap()).toEqual([]);
      expect(await getRun(running.id)).toEqual(timedOut);
      expect(await getRun(pending.id)).toEqual(neverDelivered);
    });

    it('a callback after the reaper changes nothing: its token has expired (401), and where a clock is behind, 409', async () => {
      const run = await triggerDelivered(await createAction());
      const triggeredAt = clock.now();
      clock.advance(60_000);
      expect(await api.jobs.reap()).toContain(run.id);
      expectError(await callback(run.callbackPath, run.callbackToken, { status: 'succeeded' }), 401, 'invalid_callback_token');
      // a host whose clock is behind the reaper's still takes the token
      clock.set(new Date(triggeredAt.getTime() + 30_000));
      try {
        expectError(await callback(run.callbackPath, run.callbackToken, { status: 'succeeded' }), 409, 'run_not_completable');
      } finally {
        clock.set(new Date(triggeredAt.getTime() + 60_000));
      }
      expect((await getRun(run.id)).status).toBe('failed');
      expect((await changesOf(run.entityId)).map((change) => change.type)).toEqual(['entity.created']);
    });
  });
});
