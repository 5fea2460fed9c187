import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenantWithRival, expectError, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';

/**
 * The run lifecycle through the API: trigger → delivery to a real receiver
 * on 127.0.0.1 → callback, with the entity moving to onSuccess / onFailure.
 */

let counter = 0;
const fresh = (base: string) => `${base}-${++counter}`;

describe('action runs', () => {
  let api: TestApi;
  let receiver: Receiver;
  let tenant: Tenant;
  let admin: string;
  let member: string;
  let viewer: string;
  let proj: string;
  let env: string;

  const createAction = async (name: string, trigger: Record<string, unknown> = {}, fields: Record<string, unknown> = {}) => {
    const response = await api.call('POST', `${proj}/actions`, {
      token: admin,
      body: webhookAction(
        name,
        `${receiver.url}/hooks/{{ entity.name }}`,
        {
          payload: {
            entity: '{{ entity.name }}',
            size: '{{ parameters.size }}',
            callbackUrl: '{{ run.callbackUrl }}',
            callbackToken: '{{ run.callbackToken }}',
          },
          ...trigger,
        },
        fields,
      ),
    });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
  };

  const createEntity = async (name = fresh('vm')) => {
    const response = await api.call('POST', `${env}/entities`, { token: admin, body: { kind: 'Entity', entityType: 'vm', name } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return name;
  };

  const trigger = (entity: string, action: string, body: unknown = { parameters: { size: 'large' } }, headers: Record<string, string> = {}) =>
    api.call('POST', `${env}/entities/${entity}/actions/${action}`, { token: member, body, headers });

  beforeAll(async () => {
    receiver = await startReceiver();
    api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: receiver.host, API_BASE_URL: 'https://cellplane.example.com' } });
    ({ tenant, tokens: { admin, member, viewer } } = await createTenantWithRival(api));
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const type = await api.call('POST', `${proj}/entity-types`, {
      token: admin,
      body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' },
    });
    expect(type.status).toBe(201);
    await createAction('deploy');
  });
  afterAll(async () => {
    await api.close();
    await receiver.close();
  });

  it('trigger → 202 pending with Location; delivery → running; callback → succeeded and the entity moves', async () => {
    receiver.script({ status: 202 });
    const before = receiver.requests.length;
    const entity = await createEntity();
    const triggered = await trigger(entity, 'deploy');
    expect(triggered.status, JSON.stringify(triggered.body)).toBe(202);
    const run = triggered.body;
    expect(run).toMatchObject({ actionName: 'deploy', status: 'pending', parameters: { size: 'large' }, startedAt: null, attempts: [] });
    expect(triggered.headers.get('location')).toBe(`${env}/action-runs/${run.id}`);

    await api.jobs.drain();
    const [request] = receiver.requests.slice(before);
    expect(request).toBeDefined();
    expect(request!.method).toBe('POST');
    expect(request!.url).toBe(`/hooks/${entity}`);
    expect(request!.headers['webhook-id']).toBe(run.id);
    const payload = JSON.parse(request!.body);
    expect(payload).toMatchObject({ entity, size: 'large' });
    expect(payload.callbackUrl).toBe(
      `https://cellplane.example.com/${tenant.org.id}/${tenant.project.id}/envs/${await envId()}/action-runs/${run.id}/callback`,
    );

    const running = await api.call('GET', `${env}/action-runs/${run.id}`, { token: viewer });
    expect(running.body).toMatchObject({ status: 'running', attempts: [{ attempt: 1, httpStatus: 202, outcome: 'delivered', error: null }] });
    expect(running.body.startedAt).not.toBeNull();

    const callbackPath = new URL(payload.callbackUrl).pathname;
    const done = await api.call('POST', callbackPath, {
      headers: { authorization: `Bearer ${payload.callbackToken}` },
      body: { status: 'succeeded', output: { url: 'https://app.example.com' } },
    });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body).toMatchObject({ status: 'succeeded', output: { url: 'https://app.example.com' }, error: null });
    const moved = await api.call('GET', `${env}/entities/${entity}`, { token: viewer });
    expect(moved.body.state).toBe('running');

    // once completed, never again
    const again = await api.call('POST', callbackPath, {
      headers: { authorization: `Bearer ${payload.callbackToken}` },
      body: { status: 'failed', error: 'late' },
    });
    expectError(again, 409, 'run_not_completable');
  });

  async function envId(): Promise<string> {
    const list = await api.call('GET', `${proj}/envs`, { token: viewer });
    return list.body.find((e: { name: string }) => e.name === 'default').id;
  }

  it('a failing delivery ends the run failed with a [delivery] error and every attempt logged', async () => {
    receiver.script({ status: 503 }, { status: 500 }, { status: 502 });
    const entity = await createEntity();
    const run = (await trigger(entity, 'deploy')).body;
    await api.jobs.drain();
    const failed = await api.call('GET', `${env}/action-runs/${run.id}`, { token: viewer });
    expect(failed.body.status).toBe('failed');
    expect(failed.body.error).toMatch(/^\[delivery\] gave up after 3 attempts/);
    expect(failed.body.attempts.map((a: { httpStatus: number; outcome: string }) => [a.httpStatus, a.outcome])).toEqual([
      [503, 'retry'],
      [500, 'retry'],
      [502, 'failed'],
    ]);
    // a delivery failure does not move the entity: only a completion does
    expect((await api.call('GET', `${env}/entities/${entity}`, { token: viewer })).body.state).toBe('provisioning');
  });

  it('an Idempotency-Key makes a retried trigger return the same run; reused for another body it is 422', async () => {
    receiver.script({ status: 200 });
    const entity = await createEntity();
    const key = fresh('key');
    const first = await trigger(entity, 'deploy', { parameters: { size: 'large' } }, { 'idempotency-key': key });
    const second = await trigger(entity, 'deploy', { parameters: { size: 'large' } }, { 'idempotency-key': key });
    expect(first.status).toBe(202);
    expect(second.status).toBe(202);
    expect(second.body.id).toBe(first.body.id);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expectError(await trigger(entity, 'deploy', { parameters: { size: 'small' } }, { 'idempotency-key': key }), 422, 'idempotency_key_reused');
  });

  it('a pending run can be cancelled and is never delivered; a cancelled one is 409', async () => {
    await api.jobs.drain();
    const before = receiver.requests.length;
    const entity = await createEntity();
    const run = (await trigger(entity, 'deploy')).body;
    const cancelled = await api.call('DELETE', `${env}/action-runs/${run.id}`, { token: viewer });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    await api.jobs.drain();
    expect(receiver.requests.length).toBe(before);
    expectError(await api.call('DELETE', `${env}/action-runs/${run.id}`, { token: viewer }), 409, 'run_not_cancellable');
  });

  it('an unknown template reference fails the trigger with 400, naming it', async () => {
    await createAction('broken', { payload: { token: '{{ secrets.missing }}', x: '{{ parameters.nope }}' } });
    const entity = await createEntity();
    const response = await trigger(entity, 'broken');
    expectError(response, 400, 'unknown_reference');
    expect(response.body.error).toContain('secrets.missing');
    expect(response.body.error).toContain('parameters.nope');
  });

  it('lists runs newest first with entityName and operationEntityName, filtered and paginated', async () => {
    const entity = await createEntity();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await trigger(entity, 'deploy')).body.id);
    const page = await api.call('GET', `${env}/action-runs?entity=${entity}&limit=2`, { token: viewer });
    expect(page.status).toBe(200);
    expect(page.body.map((r: { id: string }) => r.id)).toEqual([ids[2], ids[1]]);
    expect(page.body[0]).toMatchObject({ entityName: entity, operationEntityName: entity });
    const cursor = page.headers.get('x-next-cursor')!;
    const rest = await api.call('GET', `${env}/action-runs?entity=${entity}&limit=2&cursor=${cursor}`, { token: viewer });
    expect(rest.body.map((r: { id: string }) => r.id)).toEqual([ids[0]]);
    expect(rest.headers.get('x-next-cursor')).toBeNull();
  });
});
