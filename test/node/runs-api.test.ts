import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signCallbackToken } from '../../src/auth/callback-token';
import { actionRuns, deliveryJobs, orgs } from '../../src/db/schema';
import { encodeCursor } from '../../src/http/pagination';
import { createTenantWithRival, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, manualClock, type ApiResponse, type TestApi } from '../support/node-app';
import { webhookAction } from '../support/run-fixtures';
import { startReceiver, type Receiver } from '../support/receiver';

/**
 * The API contract of action runs (SPEC "ActionRun and ActionRunListRow",
 * "ActionRun status", Endpoints "Action runs"; DECISIONS §4): every status
 * and code of trigger, list, get, cancel and callback. Deliveries go to a
 * real receiver on 127.0.0.1, by `api.jobs.drain()`; the clock is moved by
 * hand, a second per trigger, so "newest first" is well defined.
 */

/** SPEC ActionRun: every field required. */
const RUN_FIELDS = [
  'id', 'actionName', 'entityId', 'status', 'parameters', 'recommendations', 'triggeredBy', 'createdAt', 'startedAt',
  'completedAt', 'error', 'output',
];
const ACTION_RUN_FIELDS = [...RUN_FIELDS, 'attempts'].sort();
const LIST_ROW_FIELDS = [...RUN_FIELDS, 'entityName', 'operationEntityName'].sort();

let counter = 0;
const fresh = (base: string) => `${base}-${++counter}`;
const ids = (response: ApiResponse) => response.body.map((run: { id: string }) => run.id);

describe('action runs API', () => {
  const clock = manualClock(new Date('2026-11-21T10:00:00.000Z'));
  let api: TestApi;
  let receiver: Receiver;
  let tenant: Tenant;
  let other: Tenant;
  let owner: string;
  let admin: string;
  let member: string;
  let viewer: string;
  let otherOwner: string;
  let proj: string;
  let env: string;
  let staging: string;

  const createAction = async (name: string, fields: Record<string, unknown> = {}, trigger: Record<string, unknown> = {}, t = tenant, token = admin) => {
    const response = await api.call('POST', `/${t.org.slug}/${t.project.slug}/actions`, {
      token,
      body: webhookAction(name, `${receiver.url}/hooks/{{ entity.name }}`, { retry: { maxAttempts: 1 }, ...trigger }, { parameters: [], ...fields }),
    });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
  };

  const createEntity = async (fields: Record<string, unknown> = {}, envPath = env, token = admin) => {
    const name = fresh('vm');
    const response = await api.call('POST', `${envPath}/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name, ...fields } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return { name, id: response.body.id as string };
  };

  /** A trigger one second after the previous one. */
  const trigger = (entity: string, action = 'deploy', options: { body?: unknown; rawBody?: string; headers?: Record<string, string>; token?: string; envPath?: string } = {}) => {
    clock.advance(1000);
    const { envPath = env, token = member, ...rest } = options;
    return api.call('POST', `${envPath}/entities/${encodeURIComponent(entity)}/actions/${action}`, { token, body: {}, ...rest });
  };

  const triggered = async (entity: string, action = 'deploy', options: Parameters<typeof trigger>[2] = {}) => {
    const response = await trigger(entity, action, options);
    expect(response.status, JSON.stringify(response.body)).toBe(202);
    return response.body as { id: string; createdAt: string; status: string };
  };

  const getRun = (id: string, token = viewer, envPath = env) => api.call('GET', `${envPath}/action-runs/${id}`, { token });

  /** Delivers every due job, then reads the run's callback URL and token from what the receiver got. */
  const deliver = async (runId: string) => {
    await api.jobs.drain();
    const request = receiver.requests.find((r) => r.headers['webhook-id'] === runId);
    expect(request, `no delivery of run ${runId}`).toBeDefined();
    const payload = JSON.parse(request!.body) as { callbackUrl: string; callbackToken: string };
    return { path: new URL(payload.callbackUrl).pathname, token: payload.callbackToken };
  };

  const callback = (path: string, token: string | undefined, body: unknown) =>
    api.call('POST', path, { body, headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

  /** A token for a run as the engine would sign it, for runs never delivered (pending, cancelled). */
  const signedToken = async (runId: string) => {
    const [run] = await api.db.select().from(actionRuns).where(eq(actionRuns.id, runId));
    return signCallbackToken(api.platform.config.authSecret, { runId, orgId: run!.orgId, projectId: run!.projectId, envId: run!.envId }, run!.timeoutAt, run!.createdAt);
  };

  const slugCallbackPath = (runId: string, envPath = env) => `${envPath}/action-runs/${runId}/callback`;

  /** A run of `entity` in the given state, made through delivery, callbacks and cancel. */
  const runIn = async (entity: string, status: 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled', action = 'deploy') => {
    const run = await triggered(entity, action);
    if (status === 'cancelled') expect((await api.call('DELETE', `${env}/action-runs/${run.id}`, { token: viewer })).status).toBe(200);
    if (status === 'running' || status === 'succeeded' || status === 'failed') {
      const { path, token } = await deliver(run.id);
      if (status !== 'running') {
        const body = status === 'succeeded' ? { status } : { status, error: 'it broke' };
        expect((await callback(path, token, body)).status).toBe(200);
      }
    }
    expect((await getRun(run.id)).body.status).toBe(status);
    return run.id;
  };

  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
    api = await createTestApi({ clock, env: { OUTBOUND_ALLOWED_HOSTS: receiver.host, API_BASE_URL: 'https://cellplane.example.com' } });
    ({ tenant, other, otherOwner, tokens: { owner, admin, member, viewer } } = await createTenantWithRival(api, { environments: ['staging'] }));
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    staging = `${proj}/envs/staging`;
    for (const [t, token] of [[tenant, admin], [other, otherOwner]] as const) {
      for (const name of ['vm', 'db']) {
        const type = await api.call('POST', `/${t.org.slug}/${t.project.slug}/entity-types`, {
          token,
          body: { kind: 'EntityType', name, states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' },
        });
        expect(type.status, JSON.stringify(type.body)).toBe(201);
      }
    }
    await createAction('deploy', {
      parameters: [
        { name: 'size', type: 'string', default: 'small' },
        { name: 'replicas', type: 'number', default: 1 },
      ],
    });
    await createAction('restart');
    await createAction('deploy', {}, {}, other, otherOwner);
  });
  afterAll(async () => {
    await api.close();
    await receiver.close();
  });

  describe('POST ENV/entities/{name}/actions/{actionName}', () => {
    it('202 with the pending run, exactly the ActionRun fields, and a Location that reads it', async () => {
      const entity = await createEntity();
      const response = await trigger(entity.name, 'deploy', { body: { parameters: { size: 'large' }, recommendations: { why: 'load' } } });
      expect(response.status, JSON.stringify(response.body)).toBe(202);
      expect(Object.keys(response.body).sort()).toEqual(ACTION_RUN_FIELDS);
      expect(response.body).toEqual({
        id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        actionName: 'deploy',
        entityId: entity.id,
        status: 'pending',
        parameters: { size: 'large', replicas: 1 },
        recommendations: { why: 'load' },
        triggeredBy: expect.any(String),
        createdAt: clock.now().toISOString(),
        startedAt: null,
        completedAt: null,
        error: null,
        output: null,
        attempts: [],
      });
      const location = response.headers.get('location');
      expect(location).toBe(`${env}/action-runs/${response.body.id}`);
      const read = await api.call('GET', location!, { token: viewer });
      expect(read.status).toBe(200);
      expect(read.body).toEqual(response.body);
    });

    it('answers with the run as stored: the bytes a GET reads back, for nested, reordered and unusual values', async () => {
      // the 202 is built from what the trigger wrote, its two jsonb values read back as stored (src/modules/action-runs/fast-path.ts)
      const recommendations = {
        zeta: { b: [1, 2.5, -0, 1e21, 0.30000000000000004], a: null, 'ü-ß': 'ünïcødé ✓', '10': true, '9': false },
        alpha: [{ y: 'x', x: 'y' }, [], {}],
        empty: '',
      };
      const created = await triggered((await createEntity()).name, 'deploy', { body: { parameters: { replicas: 3 }, recommendations } });
      const read = await getRun(created.id);
      expect(read.status).toBe(200);
      expect(read.body).toEqual(created);
      // Postgres orders a jsonb object's members its own way: the 202 shows them in that order too
      expect(JSON.stringify(read.body)).toBe(JSON.stringify(created));
      expect(JSON.parse(JSON.stringify(read.body.recommendations))).toEqual(JSON.parse(JSON.stringify(recommendations)));
      expect(read.body.parameters).toEqual({ size: 'small', replicas: 3 });
    });

    it('takes a trigger with no body at all: parameters take their defaults', async () => {
      const entity = await createEntity();
      clock.advance(1000);
      const response = await api.call('POST', `${env}/entities/${entity.name}/actions/deploy`, { token: member });
      expect(response.status, JSON.stringify(response.body)).toBe(202);
      expect(response.body).toMatchObject({ parameters: { size: 'small', replicas: 1 }, recommendations: {} });
    });

    it('404 for an unknown entity, an unknown action, an action of another entity type, an entity of another environment', async () => {
      const entity = await createEntity();
      expectError(await trigger(fresh('nobody'), 'deploy'), 404, 'not_found');
      expectError(await trigger(entity.name, 'no-such-action'), 404, 'not_found');
      const backup = fresh('backup');
      await createAction(backup, { entityType: 'db' });
      const refused = await trigger(entity.name, backup);
      expectError(refused, 404, 'not_found');
      expect(refused.body.error).toContain('"vm"');
      const inStaging = await createEntity({}, staging);
      expectError(await trigger(inStaging.name, 'deploy'), 404, 'not_found');
      expect((await trigger(inStaging.name, 'deploy', { envPath: staging })).status).toBe(202);
    });

    it('409 action_unavailable when conditions fail, each failed condition in details', async () => {
      const action = fresh('gold-only');
      await createAction(action, {
        conditions: [
          { key: 'labels.tier', operator: 'eq', value: 'gold' },
          { key: 'state', operator: 'eq', value: 'running' },
        ],
      });
      const plain = await createEntity();
      const refused = await trigger(plain.name, action);
      expectError(refused, 409, 'action_unavailable');
      expect(refused.body.details).toHaveLength(2);
      for (const detail of refused.body.details) expect(detail).toEqual({ path: 'conditions', message: expect.any(String) });
      expect(refused.body.details[0].message).toContain('labels.tier');
      expect(refused.body.details[1].message).toContain('state');

      const half = await createEntity({ labels: { tier: 'gold' } });
      const once = await trigger(half.name, action);
      expectError(once, 409, 'action_unavailable');
      expect(once.body.details).toHaveLength(1);

      const gold = await createEntity({ labels: { tier: 'gold' }, state: 'running' });
      expect((await trigger(gold.name, action)).status).toBe(202);
    });

    it('400 validation_failed for unknown, mistyped and missing parameters; defaults fill the rest', async () => {
      const strict = fresh('strict');
      await createAction(strict, {
        parameters: [
          { name: 'version', type: 'string', required: true },
          { name: 'force', type: 'boolean', default: false },
        ],
      });
      const entity = await createEntity();
      const cases: [unknown, string][] = [
        [{ parameters: { version: '1.2', colour: 'red' } }, 'parameters.colour'],
        [{ parameters: { version: 12 } }, 'parameters.version'],
        [{ parameters: { version: '1.2', force: 'yes' } }, 'parameters.force'],
        [{ parameters: {} }, 'parameters.version'],
        [{}, 'parameters.version'],
      ];
      for (const [body, path] of cases) {
        const refused = await trigger(entity.name, strict, { body });
        expectError(refused, 400, 'validation_failed');
        expect(refused.body.details.map((d: { path: string }) => d.path), JSON.stringify(body)).toEqual([path]);
      }
      const accepted = await trigger(entity.name, strict, { body: { parameters: { version: '1.2' } } });
      expect(accepted.status).toBe(202);
      expect(accepted.body.parameters).toEqual({ version: '1.2', force: false });
      // nothing was written by the refused triggers
      const runs = await api.call('GET', `${env}/action-runs?action=${strict}`, { token: viewer });
      expect(ids(runs)).toEqual([accepted.body.id]);
    });

    it('400 validation_failed for a body that is not an object, an unknown field or parameters that are not an object', async () => {
      const entity = await createEntity();
      for (const rawBody of ['null', '[]', '"deploy"', '42', 'true']) {
        expectError(await trigger(entity.name, 'deploy', { rawBody }), 400, 'validation_failed');
      }
      for (const body of [{ parameter: { size: 'large' } }, { parameters: ['large'] }, { parameters: null }, { recommendations: 'x' }]) {
        expectError(await trigger(entity.name, 'deploy', { body }), 400, 'validation_failed');
      }
      expectError(await trigger(entity.name, 'deploy', { rawBody: '{"parameters":' }), 400, 'invalid_json');
    });

    it('a pull-request action is triggered like any other: 202, the run pending with its repository', async () => {
      const action = fresh('open-pr');
      await createAction(action, {}, {
        type: 'pull-request',
        repo: 'acme/infra',
        title: 'Resize {{ entity.name }}',
        files: [{ path: 'vms/{{ entity.name }}.tf', content: 'size = 1' }],
        url: undefined,
        payload: undefined,
        retry: undefined,
      });
      const entity = await createEntity();
      const response = await trigger(entity.name, action);
      expect(response.status, JSON.stringify(response.body)).toBe(202);
      expect(response.body).toMatchObject({ status: 'pending', repo: 'acme/infra', prNumber: null, prUrl: null, headSha: null });
      // delivered, merged and closed against a local GitHub: test/node/pull-request-runs.test.ts
    });

    it('400 outbound_url_refused for a literal private, loopback or metadata address, and no run is written', async () => {
      const entity = await createEntity();
      for (const url of ['http://10.0.0.1/hook', 'http://[::1]:8080/hook', 'http://169.254.169.254/latest', 'http://127.0.0.1:1/hook']) {
        const action = fresh('private');
        await createAction(action, {}, { url });
        expectError(await trigger(entity.name, action), 400, 'outbound_url_refused');
        expect((await api.call('GET', `${env}/action-runs?action=${action}`, { token: viewer })).body).toEqual([]);
      }
    });

    describe('Idempotency-Key', () => {
      it('the same key sent concurrently makes one run; the others replay it', async () => {
        const entity = await createEntity();
        const key = fresh('key');
        const headers = { 'idempotency-key': key };
        clock.advance(1000);
        const path = `${env}/entities/${entity.name}/actions/deploy`;
        const responses = await Promise.all(
          Array.from({ length: 4 }, () => api.call('POST', path, { token: member, body: { parameters: { size: 'large' } }, headers })),
        );
        for (const response of responses) expect(response.status, JSON.stringify(response.body)).toBe(202);
        expect(new Set(responses.map((r) => r.body.id)).size).toBe(1);
        expect(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(3);
        const rows = await api.db.select().from(actionRuns).where(eq(actionRuns.idempotencyKey, key));
        expect(rows).toHaveLength(1);
        const jobs = await api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, rows[0]!.id));
        expect(jobs).toHaveLength(1);
      });

      it('a key reused for another body, entity or action is 422 idempotency_key_reused', async () => {
        const entity = await createEntity();
        const elsewhere = await createEntity();
        const key = fresh('key');
        const headers = { 'idempotency-key': key };
        const first = await trigger(entity.name, 'deploy', { body: { parameters: { size: 'large' } }, headers });
        expect(first.status).toBe(202);
        expect(first.headers.get('idempotent-replayed')).toBeNull();
        for (const [name, action, body] of [
          [entity.name, 'deploy', { parameters: { size: 'small' } }],
          [entity.name, 'deploy', { parameters: { size: 'large' }, recommendations: { a: 1 } }],
          [elsewhere.name, 'deploy', { parameters: { size: 'large' } }],
          [entity.name, 'restart', {}],
        ] as const) {
          expectError(await trigger(name, action, { body, headers }), 422, 'idempotency_key_reused');
        }
        const replay = await trigger(entity.name, 'deploy', { body: { parameters: { size: 'large' } }, headers });
        expect(replay.status).toBe(202);
        expect(replay.body.id).toBe(first.body.id);
        expect(replay.headers.get('location')).toBe(`${env}/action-runs/${first.body.id}`);
      });

      it('a retry whose JSON lists the same members in another order is the same request', async () => {
        const entity = await createEntity();
        const headers = { 'idempotency-key': fresh('key') };
        const first = await trigger(entity.name, 'deploy', { rawBody: '{"parameters":{"size":"large","replicas":2},"recommendations":{"a":1,"b":{"x":1,"y":2}}}', headers });
        expect(first.status, JSON.stringify(first.body)).toBe(202);
        const retry = await trigger(entity.name, 'deploy', { rawBody: '{"recommendations":{"b":{"y":2,"x":1},"a":1},"parameters":{"replicas":2,"size":"large"}}', headers });
        expect(retry.status, JSON.stringify(retry.body)).toBe(202);
        expect(retry.body.id).toBe(first.body.id);
        expect(retry.headers.get('idempotent-replayed')).toBe('true');
      });

      it('is per environment, and at most 255 characters', async () => {
        const key = 'k'.repeat(255);
        const here = await triggered((await createEntity()).name, 'deploy', { headers: { 'idempotency-key': key } });
        const there = await triggered((await createEntity({}, staging)).name, 'deploy', { headers: { 'idempotency-key': key }, envPath: staging });
        expect(there.id).not.toBe(here.id);
        const entity = await createEntity();
        expectError(await trigger(entity.name, 'deploy', { headers: { 'idempotency-key': 'k'.repeat(256) } }), 400, 'validation_failed');
        expectError(await trigger(entity.name, 'deploy', { headers: { 'idempotency-key': '' } }), 400, 'validation_failed');
      });
    });
  });

  describe('GET ENV/action-runs/{id}', () => {
    it('exactly the ActionRun fields, with every delivery attempt', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      await deliver(run.id);
      const read = await getRun(run.id);
      expect(read.status).toBe(200);
      expect(Object.keys(read.body).sort()).toEqual(ACTION_RUN_FIELDS);
      expect(read.body).toMatchObject({ status: 'running', startedAt: expect.any(String), completedAt: null });
      expect(read.body.attempts).toEqual([
        { attempt: 1, startedAt: expect.any(String), latencyMs: expect.any(Number), httpStatus: 200, outcome: 'delivered', error: null },
      ]);
    });

    it("404 for an unknown id, an id that is no uuid, another environment's run and another organization's run", async () => {
      expectError(await getRun(crypto.randomUUID()), 404, 'not_found');
      expectError(await getRun('not-a-uuid'), 404, 'not_found');
      const inStaging = await triggered((await createEntity({}, staging)).name, 'deploy', { envPath: staging });
      expectError(await getRun(inStaging.id), 404, 'not_found');
      expect((await getRun(inStaging.id, viewer, staging)).status).toBe(200);

      const otherEnv = `/${other.org.slug}/${other.project.slug}/envs/default`;
      const rivalEntity = await createEntity({}, otherEnv, otherOwner);
      const rival = await triggered(rivalEntity.name, 'deploy', { envPath: otherEnv, token: otherOwner });
      expectError(await getRun(rival.id), 404, 'not_found');
      expectError(await getRun(rival.id, viewer, otherEnv), 404, 'not_found');
      expectError(await api.call('DELETE', `${env}/action-runs/${rival.id}`, { token: viewer }), 404, 'not_found');
      expect((await getRun(rival.id, otherOwner, otherEnv)).body.status).toBe('pending');
    });
  });

  describe('GET ENV/action-runs', () => {
    it('rows have exactly the ActionRunListRow fields: the run without attempts, plus entityName and operationEntityName', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const list = await api.call('GET', `${env}/action-runs?entity=${entity.name}`, { token: viewer });
      expect(list.status).toBe(200);
      expect(list.body).toHaveLength(1);
      expect(Object.keys(list.body[0]).sort()).toEqual(LIST_ROW_FIELDS);
      const { attempts, ...fields } = (await getRun(run.id)).body;
      expect(attempts).toEqual([]);
      expect(list.body[0]).toEqual({ ...fields, entityName: entity.name, operationEntityName: entity.name });
    });

    it('filters by status (repeatable), action, entity and since', async () => {
      const entity = await createEntity();
      const succeeded = await runIn(entity.name, 'succeeded');
      const failed = await runIn(entity.name, 'failed');
      const running = await runIn(entity.name, 'running');
      const pending = await runIn(entity.name, 'pending', 'restart');
      const cancelled = await runIn(entity.name, 'cancelled');
      const list = (query: string) => api.call('GET', `${env}/action-runs?entity=${entity.name}${query}`, { token: viewer });

      expect(ids(await list(''))).toEqual([cancelled, pending, running, failed, succeeded]);
      expect(ids(await list('&status=succeeded&status=failed'))).toEqual([failed, succeeded]);
      expect(ids(await list('&status=running'))).toEqual([running]);
      expect(ids(await list('&status=pending&status=cancelled'))).toEqual([cancelled, pending]);
      expect(ids(await list('&action=restart'))).toEqual([pending]);
      expect(ids(await list('&action=deploy&status=pending'))).toEqual([]);

      const since = (await getRun(running)).body.createdAt as string;
      expect(ids(await list(`&since=${since}`))).toEqual([cancelled, pending, running]);
      // the same instant written with an offset
      const offset = new Date(new Date(since).getTime() + 2 * 3600_000).toISOString().replace('Z', '+02:00');
      expect(ids(await list(`&since=${encodeURIComponent(offset)}`))).toEqual([cancelled, pending, running]);

      expect((await api.call('GET', `${env}/action-runs?entity=${fresh('nobody')}`, { token: viewer })).body).toEqual([]);
      expectError(await list('&status=done'), 400, 'validation_failed');
      expectError(await list('&since=yesterday'), 400, 'validation_failed');
    });

    it('400 for a limit outside 1..500 and for a cursor it did not issue', async () => {
      const list = (query: string) => api.call('GET', `${env}/action-runs?${query}`, { token: viewer });
      for (const limit of ['0', '501', '-1', '1.5', 'ten']) expectError(await list(`limit=${limit}`), 400, 'validation_failed');
      expect((await list('limit=1')).status).toBe(200);
      expect((await list('limit=500')).status).toBe(200);
      for (const cursor of ['garbage', encodeCursor(['not-a-date', crypto.randomUUID()]), encodeCursor([new Date().toISOString(), 'not-a-uuid']), encodeCursor([new Date().toISOString()])]) {
        expectError(await list(`cursor=${cursor}`), 400, 'validation_failed');
      }
    });

    it('pages newest first by X-Next-Cursor and Link, with no gap and no duplicate', async () => {
      const entity = await createEntity();
      const made: string[] = [];
      for (let i = 0; i < 7; i++) made.push((await triggered(entity.name)).id);
      const pages: string[][] = [];
      let path: string | null = `${env}/action-runs?entity=${entity.name}&limit=3`;
      while (path) {
        const page: ApiResponse = await api.call('GET', path, { token: viewer });
        expect(page.status).toBe(200);
        pages.push(ids(page));
        const cursor = page.headers.get('x-next-cursor');
        const link: string | null = page.headers.get('link');
        if (cursor) expect(link).toMatch(new RegExp(`^<.*cursor=${cursor}.*>; rel="next"$`));
        else expect(link).toBeNull();
        path = link ? link.slice(1, link.indexOf('>')) : null;
      }
      expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
      expect(pages.flat()).toEqual([...made].reverse());
    });

    it('returns 50 rows when no limit is given', async () => {
      const entity = await createEntity();
      for (let i = 0; i < 51; i++) await triggered(entity.name);
      const first = await api.call('GET', `${env}/action-runs?entity=${entity.name}`, { token: viewer });
      expect(first.body).toHaveLength(50);
      const rest = await api.call('GET', `${env}/action-runs?entity=${entity.name}&cursor=${first.headers.get('x-next-cursor')}`, { token: viewer });
      expect(rest.body).toHaveLength(1);
      expect(rest.headers.get('x-next-cursor')).toBeNull();
    });

    it('pages runs created at the same instant without a gap or a duplicate', async () => {
      const entity = await createEntity();
      clock.advance(1000);
      const made = new Set<string>();
      for (let i = 0; i < 7; i++) {
        const response = await api.call('POST', `${env}/entities/${entity.name}/actions/deploy`, { token: member, body: {} });
        made.add(response.body.id);
      }
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const page: ApiResponse = await api.call('GET', `${env}/action-runs?entity=${entity.name}&limit=3${cursor ? `&cursor=${cursor}` : ''}`, { token: viewer });
        seen.push(...ids(page));
        cursor = page.headers.get('x-next-cursor');
      } while (cursor);
      expect(seen).toHaveLength(7);
      expect(new Set(seen)).toEqual(made);
      expect(seen).toEqual(ids(await api.call('GET', `${env}/action-runs?entity=${entity.name}`, { token: viewer })));
    });

    it('keeps the run of a deleted entity: entityId and entityName null, operationEntityName kept', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const { path, token } = await deliver(run.id);
      expect((await api.call('DELETE', `${env}/entities/${entity.name}`, { token: member })).status).toBe(200);

      const read = await getRun(run.id);
      expect(read.status).toBe(200);
      expect(read.body.entityId).toBeNull();
      const list = await api.call('GET', `${env}/action-runs?entity=${entity.name}`, { token: viewer });
      expect(list.body).toHaveLength(1);
      expect(list.body[0]).toMatchObject({ id: run.id, entityId: null, entityName: null, operationEntityName: entity.name });

      // it can still be completed: there is no entity to move
      const done = await callback(path, token, { status: 'succeeded' });
      expect(done.status, JSON.stringify(done.body)).toBe(200);
      expect(done.body).toMatchObject({ status: 'succeeded', entityId: null });
    });

    it("deleting an environment deletes its runs and their jobs, and leaves another environment's alone", async () => {
      // a run's organization and project carry no foreign keys (migrations/0010): its environment's does the deleting
      expect((await api.call('POST', `${proj}/envs`, { token: owner, body: { name: 'doomed' } })).status).toBe(201);
      const doomed = `${proj}/envs/doomed`;
      const pending = await triggered((await createEntity({}, doomed)).name, 'deploy', { envPath: doomed });
      const kept = await triggered((await createEntity()).name);
      const jobOf = async (runId: string) => api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, runId));
      expect(await jobOf(pending.id)).toHaveLength(1);

      expect((await api.call('DELETE', doomed, { token: owner })).status).toBe(200);
      expect(await api.db.select().from(actionRuns).where(eq(actionRuns.id, pending.id))).toEqual([]);
      expect(await jobOf(pending.id)).toEqual([]);
      expect((await getRun(kept.id)).body.status).toBe('pending');
      expect(await jobOf(kept.id)).toHaveLength(1);
    });
  });

  it('a cell-scoped token sees, cancels and triggers runs only on entities in its cells', async () => {
    const cell = fresh('blue');
    expect((await api.call('POST', `${proj}/cells`, { token: admin, body: { kind: 'Cell', name: cell, entityType: 'vm' } })).status).toBe(201);
    const inside = await createEntity();
    const outside = await createEntity();
    const added = await api.call('POST', `${proj}/cells/${cell}/members`, { token: admin, body: { entityName: inside.name, entityTypeName: 'vm' } });
    expect(added.status, JSON.stringify(added.body)).toBe(201);
    const scoped = await mintToken(api, tenant, { role: 'member', cellScopes: [cell], as: owner });

    const mine = await triggered(inside.name, 'deploy', { token: scoped });
    const theirs = await triggered(outside.name);
    expectError(await trigger(outside.name, 'deploy', { token: scoped }), 403, 'cell_scope_violation');

    expect((await getRun(mine.id, scoped)).status).toBe(200);
    expectError(await getRun(theirs.id, scoped), 404, 'not_found');
    expectError(await api.call('DELETE', `${env}/action-runs/${theirs.id}`, { token: scoped }), 404, 'not_found');
    expect((await getRun(theirs.id)).body.status).toBe('pending');

    const list = await api.call('GET', `${env}/action-runs?limit=500`, { token: scoped });
    expect(list.status).toBe(200);
    expect(ids(list)).toEqual([mine.id]);
    expect((await api.call('GET', `${env}/action-runs?entity=${outside.name}`, { token: scoped })).body).toEqual([]);
    expect((await api.call('DELETE', `${env}/action-runs/${mine.id}`, { token: scoped })).body.status).toBe('cancelled');
  });

  describe('DELETE ENV/action-runs/{id}', () => {
    it('cancels a pending run (data:read is enough); it is never delivered', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      await api.jobs.drain();
      const pending = await triggered(entity.name);
      const cancelled = await api.call('DELETE', `${env}/action-runs/${pending.id}`, { token: viewer });
      expect(cancelled.status).toBe(200);
      expect(Object.keys(cancelled.body).sort()).toEqual(ACTION_RUN_FIELDS);
      expect(cancelled.body).toMatchObject({ id: pending.id, status: 'cancelled', completedAt: clock.now().toISOString(), startedAt: null });
      const before = receiver.requests.length;
      await api.jobs.drain();
      expect(receiver.requests.length).toBe(before);
      expect(receiver.requests.some((r) => r.headers['webhook-id'] === pending.id)).toBe(false);
      expect((await getRun(run.id)).body.status).toBe('running');
    });

    it.each(['running', 'succeeded', 'failed', 'cancelled'] as const)('409 run_not_cancellable for a %s run, which stays as it is', async (status) => {
      const entity = await createEntity();
      const run = await runIn(entity.name, status);
      const refused = await api.call('DELETE', `${env}/action-runs/${run}`, { token: viewer });
      expectError(refused, 409, 'run_not_cancellable');
      expect(refused.body.error).toContain(status);
      expect((await getRun(run)).body.status).toBe(status);
    });

    it('404 for an unknown or malformed id', async () => {
      expectError(await api.call('DELETE', `${env}/action-runs/${crypto.randomUUID()}`, { token: viewer }), 404, 'not_found');
      expectError(await api.call('DELETE', `${env}/action-runs/nope`, { token: viewer }), 404, 'not_found');
    });
  });

  describe('POST ENV/action-runs/{id}/callback', () => {
    it('completes by the callback URL (ids) or by slugs; the entity moves; a second callback is 409', async () => {
      const byIds = await createEntity();
      const run = await triggered(byIds.name);
      const { path, token } = await deliver(run.id);
      expect(path).toBe(`/${tenant.org.id}/${tenant.project.id}/envs/${(await api.db.select().from(actionRuns).where(eq(actionRuns.id, run.id)))[0]!.envId}/action-runs/${run.id}/callback`);
      const done = await callback(path, token, { status: 'failed', error: 'disk full', output: { log: 'x' } });
      expect(done.status, JSON.stringify(done.body)).toBe(200);
      expect(Object.keys(done.body).sort()).toEqual(ACTION_RUN_FIELDS);
      expect(done.body).toMatchObject({ status: 'failed', error: 'disk full', output: { log: 'x' }, completedAt: clock.now().toISOString() });
      const moved = await api.call('GET', `${env}/entities/${byIds.name}`, { token: viewer });
      expect(moved.body.state, JSON.stringify(moved.body)).toBe('failed');
      expectError(await callback(path, token, { status: 'succeeded' }), 409, 'run_not_completable');
      expectError(await callback(slugCallbackPath(run.id), token, { status: 'succeeded' }), 409, 'run_not_completable');

      const bySlugs = await createEntity();
      const second = await triggered(bySlugs.name);
      const delivered = await deliver(second.id);
      const ok = await callback(slugCallbackPath(second.id), delivered.token, { status: 'succeeded', output: { url: 'https://app.example.com' } });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(ok.body).toMatchObject({ status: 'succeeded', error: null, output: { url: 'https://app.example.com' } });
      expect((await api.call('GET', `${env}/entities/${bySlugs.name}`, { token: viewer })).body.state).toBe('running');
    });

    it('completes a run still pending (active), and refuses a cancelled one with 409', async () => {
      const entity = await createEntity();
      const pending = await triggered(entity.name);
      const ok = await callback(slugCallbackPath(pending.id), await signedToken(pending.id), { status: 'succeeded' });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(ok.body.status).toBe('succeeded');

      const cancelled = await runIn(entity.name, 'cancelled');
      expectError(await callback(slugCallbackPath(cancelled), await signedToken(cancelled), { status: 'succeeded' }), 409, 'run_not_completable');
    });

    it("401 invalid_callback_token without a token, with garbage, a service token, or another run's token", async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const otherRun = await triggered(entity.name);
      const { path } = await deliver(run.id);
      const { token: otherToken } = await deliver(otherRun.id);
      const body = { status: 'succeeded' };
      expectError(await callback(path, undefined, body), 401, 'invalid_callback_token');
      expectError(await api.call('POST', path, { body, headers: { authorization: 'Basic dXNlcjpwYXNz' } }), 401, 'invalid_callback_token');
      for (const token of ['garbage', 'a.b.c', member, owner]) expectError(await callback(path, token, body), 401, 'invalid_callback_token');
      expectError(await callback(path, otherToken, body), 401, 'invalid_callback_token');
      expect((await getRun(run.id)).body.status).toBe('running');
    });

    it('asks who is calling before it judges the body: 401, not 400, for a bad body without a valid token', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const { path } = await deliver(run.id);
      for (const token of [undefined, 'garbage', member]) {
        for (const body of [{ status: 'failed' }, {}, { status: 'done', extra: 1 }]) {
          expectError(await callback(path, token, body), 401, 'invalid_callback_token');
        }
      }
    });

    it('401 invalid_callback_token once the token has expired with the run', async () => {
      const action = fresh('quick');
      await createAction(action, { timeoutMinutes: 1 });
      const entity = await createEntity();
      const run = await triggered(entity.name, action);
      const { path, token } = await deliver(run.id);
      clock.advance(61_000);
      const expired = await callback(path, token, { status: 'succeeded' });
      expectError(expired, 401, 'invalid_callback_token');
      expect(expired.body.error).toContain('expired');
    });

    it('404 when the path names another organization, project or environment', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const { path, token } = await deliver(run.id);
      const [, orgId, projectId, , envId] = path.split('/');
      const project = await api.call('POST', `/orgs/${tenant.org.slug}/projects`, { token: owner, body: { name: 'Second', slug: fresh('second') } });
      expect(project.status).toBe(201);
      const envs = (await api.call('GET', `${proj}/envs`, { token: viewer })).body as { id: string; name: string }[];
      const stagingId = envs.find((e) => e.name === 'staging')!.id;
      const tail = `action-runs/${run.id}/callback`;
      for (const wrong of [
        `/${other.org.id}/${projectId}/envs/${envId}/${tail}`,
        `/${other.org.slug}/${tenant.project.slug}/envs/default/${tail}`,
        `/${orgId}/${project.body.id}/envs/${envId}/${tail}`,
        `/${tenant.org.slug}/${project.body.slug}/envs/default/${tail}`,
        `/${orgId}/${projectId}/envs/${stagingId}/${tail}`,
        `${staging}/${tail}`,
        `${proj}/envs/nowhere/${tail}`,
      ]) {
        expectError(await callback(wrong, token, { status: 'succeeded' }), 404, 'not_found');
      }
      expect((await getRun(run.id)).body.status).toBe('running');
      // mixed: organization by id, project by slug
      expect((await callback(`/${orgId}/${tenant.project.slug}/envs/default/${tail}`, token, { status: 'succeeded' })).status).toBe(200);
    });

    it('400 validation_failed for a failure without an error, an error marked [delivery], or another status', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const { path, token } = await deliver(run.id);
      for (const body of [
        { status: 'failed' },
        { status: 'failed', error: '' },
        { status: 'failed', error: '[delivery] forged' },
        { status: 'done' },
        {},
        { status: 'succeeded', extra: true },
        { status: 'succeeded', output: 'text' },
      ]) {
        expectError(await callback(path, token, body), 400, 'validation_failed');
      }
      expect((await getRun(run.id)).body.status).toBe('running');
      expect((await callback(path, token, { status: 'failed', error: 'the delivery was fine, the job was not' })).status).toBe(200);
    });

    it('403 org_suspended while the organization is suspended', async () => {
      const entity = await createEntity();
      const run = await triggered(entity.name);
      const { path, token } = await deliver(run.id);
      await api.db.update(orgs).set({ suspendedAt: clock.now() }).where(eq(orgs.id, tenant.org.id));
      try {
        expectError(await callback(path, token, { status: 'succeeded' }), 403, 'org_suspended');
      } finally {
        await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id));
      }
      expect((await callback(path, token, { status: 'succeeded' })).status).toBe(200);
    });
  });

  it('documents the routes in /openapi.json: statuses, the Location header, and the callback token scheme', async () => {
    const doc = (await api.call('GET', '/openapi.json')).body;
    const base = '/{o}/{p}/envs/{envName}';
    const statuses = (path: string, method: string) => Object.keys(doc.paths[path][method].responses).sort();

    const triggerOp = doc.paths[`${base}/entities/{name}/actions/{actionName}`].post;
    expect(statuses(`${base}/entities/{name}/actions/{actionName}`, 'post')).toEqual(expect.arrayContaining(['202', '400', '401', '403', '404', '409', '422', '501']));
    expect(triggerOp.responses['202'].headers.Location).toBeDefined();
    expect(triggerOp.responses['202'].content['application/json'].schema.$ref).toBe('#/components/schemas/ActionRun');
    // a service token, or a user session as a cookie or a Bearer value
    expect(triggerOp.security).toEqual([{ bearerAuth: [] }, { sessionCookie: [] }, { sessionBearer: [] }]);

    expect(statuses(`${base}/action-runs`, 'get')).toEqual(expect.arrayContaining(['200', '400', '401', '403', '404']));
    expect(doc.paths[`${base}/action-runs`].get.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(['status', 'entity', 'action', 'since', 'limit', 'cursor']),
    );
    expect(statuses(`${base}/action-runs/{id}`, 'get')).toEqual(expect.arrayContaining(['200', '401', '403', '404']));
    expect(statuses(`${base}/action-runs/{id}`, 'delete')).toEqual(expect.arrayContaining(['200', '401', '403', '404', '409']));

    const callbackOp = doc.paths[`${base}/action-runs/{id}/callback`].post;
    expect(Object.keys(callbackOp.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '404', '409']));
    expect(callbackOp.security).toEqual([{ callbackToken: [] }]);
    expect(doc.components.securitySchemes.callbackToken).toMatchObject({ type: 'http', scheme: 'bearer' });

    const schemas = doc.components.schemas;
    expect([...schemas.ActionRun.required].sort()).toEqual(ACTION_RUN_FIELDS);
    expect([...schemas.ActionRunListRow.required].sort()).toEqual(LIST_ROW_FIELDS);
    expect(Object.keys(schemas)).toEqual(expect.arrayContaining(['ActionRunCallback', 'ActionTriggerRequest', 'ActionRunStatus']));
  });
});
