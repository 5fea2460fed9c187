import { createHmac } from 'node:crypto';
import { eq, isNull, sql } from 'drizzle-orm';
import { decodeJwt, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actionRuns, deliveryJobs } from '../../src/db/schema';
import { claimDueJobs, runDeliveryAttempt, type AttemptResult } from '../../src/runs/delivery';
import { createTenant, expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, manualClock, type ApiResponse, type TestApi } from '../support/node-app';
import { webhookAction } from '../support/run-fixtures';
import type { LookupAddress } from 'node:dns';
import { guardedFetch } from '../../src/node/outbound-fetch';
import { hmacSha256, signHs256 } from '../../src/node/platform';
import { signCallbackToken } from '../../src/auth/callback-token';
import { startReceiver, type Receiver, type ReceivedRequest, type Reply } from '../support/receiver';
import { countStatements } from '../support/statement-counter';
import { eventually } from '../support/eventually';

/**
 * Outbound delivery of webhook triggers (SPEC "Outbound webhook trigger";
 * DECISIONS §4) against real HTTP receivers on 127.0.0.1: what is retried
 * and what is not, the request the receiver gets, the SSRF guard, and that
 * no secret leaves through a log line, an error or a response.
 */

interface Harness {
  api: TestApi;
  proj: string;
  /** ENV path of `default`. */
  env: string;
  owner: string;
  /** Every response the harness's calls got, for the leak sweep. */
  responses: ApiResponse[];
  /** A webhook action on entities of type vm; returns its name. */
  action(trigger: Record<string, unknown>, fields?: Record<string, unknown>): Promise<string>;
  /** A fresh vm in `envName`, the action triggered on it: the 202's run. */
  trigger(action: string, options?: { envName?: string; entity?: string; parameters?: Record<string, unknown> }): Promise<any>;
  run(id: string, envName?: string): Promise<any>;
  putSecret(name: string, value: string, envName?: string): Promise<void>;
  receiver(...replies: Reply[]): Promise<Receiver>;
  close(): Promise<void>;
}

async function createHarness(options: Parameters<typeof createTestApi>[0]): Promise<Harness> {
  const api = await createTestApi(options);
  const tenant = await createTenant(api);
  const owner = await mintToken(api, tenant, { role: 'owner' });
  const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
  const responses: ApiResponse[] = [];
  const receivers: Receiver[] = [];
  const call = async (method: string, path: string, body?: unknown) => {
    const response = await api.call(method, path, { token: owner, body });
    responses.push(response);
    return response;
  };
  const expectStatus = async (status: number, pending: Promise<ApiResponse>) => {
    const response = await pending;
    expect(response.status, JSON.stringify(response.body)).toBe(status);
    return response.body;
  };
  await expectStatus(201, call('POST', `${proj}/envs`, { name: 'staging' }));
  await expectStatus(
    201,
    call('POST', `${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
      properties: [{ name: 'zone', type: 'string' }],
    }),
  );
  return {
    api,
    proj,
    env: `${proj}/envs/default`,
    owner,
    responses,
    async action(trigger, fields = {}) {
      const name = uniqueSlug('act');
      await expectStatus(
        201,
        call('POST', `${proj}/actions`, webhookAction(name, String(trigger.url), { method: 'POST', payload: undefined, ...trigger }, fields)),
      );
      return name;
    },
    async trigger(action, { envName = 'default', entity = uniqueSlug('vm'), parameters = {} } = {}) {
      const env = `${proj}/envs/${envName}`;
      await expectStatus(201, call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: entity, properties: { zone: 'eu-1' } }));
      return expectStatus(202, call('POST', `${env}/entities/${entity}/actions/${action}`, { parameters }));
    },
    run: (id, envName = 'default') => expectStatus(200, call('GET', `${proj}/envs/${envName}/action-runs/${id}`)),
    async putSecret(name, value, envName = 'default') {
      const response = await call('PUT', `${proj}/envs/${envName}/secrets/${name}`, { value });
      expect([200, 201]).toContain(response.status);
    },
    async receiver(...replies) {
      const receiver = await startReceiver(...replies);
      receivers.push(receiver);
      return receiver;
    },
    async close() {
      await api.close();
      await Promise.all(receivers.map((receiver) => receiver.close()));
    },
  };
}

const statusesAndOutcomes = (run: { attempts: { httpStatus: number | null; outcome: string }[] }) =>
  run.attempts.map((attempt) => [attempt.httpStatus, attempt.outcome]);

const webhookIds = (requests: ReceivedRequest[]) => requests.map((request) => request.headers['webhook-id']);

describe('outbound delivery', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await createHarness({
      env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1', DELIVERY_ATTEMPT_TIMEOUT_SECONDS: '1', API_BASE_URL: 'https://cellplane.example.com' },
      // jitter at its maximum: with initialDelayMs 0 every retry is due at once
      engine: { random: () => 1, resolveHost: async (host) => (host === 'hooks.example.test' ? ['127.0.0.1'] : ['203.0.113.10']) },
      runner: { pollIntervalMs: 50 },
    });
  });
  afterAll(() => h.close());

  describe('what is retried', () => {
    it('500 every time: maxAttempts requests, then failed, "gave up after N attempts"', async () => {
      const receiver = await h.receiver({ status: 500 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, retry: { maxAttempts: 4, initialDelayMs: 0 } }));
      await h.api.jobs.drain();
      expect(receiver.requests).toHaveLength(4);
      const failed = await h.run(run.id);
      expect(failed.status).toBe('failed');
      expect(failed.error).toBe('[delivery] gave up after 4 attempts; the last one: the receiver answered HTTP 500');
      expect(statusesAndOutcomes(failed)).toEqual([
        [500, 'retry'],
        [500, 'retry'],
        [500, 'retry'],
        [500, 'failed'],
      ]);
      expect(failed.attempts.map((attempt: { attempt: number }) => attempt.attempt)).toEqual([1, 2, 3, 4]);
      for (const attempt of failed.attempts) {
        expect(attempt.error).toBe('the receiver answered HTTP 500');
        expect(attempt.latencyMs).toBeGreaterThanOrEqual(0);
      }
      expect(failed.completedAt).not.toBeNull();
    });

    it('503 then 200: retried, and the run is running', async () => {
      const receiver = await h.receiver({ status: 503 }, { status: 200 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.jobs.drain();
      expect(receiver.requests).toHaveLength(2);
      const running = await h.run(run.id);
      expect(running).toMatchObject({ status: 'running', error: null });
      expect(running.startedAt).not.toBeNull();
      expect(statusesAndOutcomes(running)).toEqual([
        [503, 'retry'],
        [200, 'delivered'],
      ]);
      expect(running.attempts[1].error).toBeNull();
    });

    it('429 with Retry-After: 1 then 200: the second request waits the second the receiver asked for', async () => {
      const receiver = await h.receiver({ status: 429, headers: { 'retry-after': '1' } }, { status: 200 });
      // initialDelayMs 0: without Retry-After the retry would be due at once
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      h.api.jobs.start();
      try {
        await eventually(async () => ((await h.run(run.id)).status === 'running' ? true : undefined));
      } finally {
        await h.api.jobs.stop();
      }
      const [first, second] = receiver.requests;
      expect(receiver.requests).toHaveLength(2);
      expect(second!.at - first!.at).toBeGreaterThanOrEqual(990);
      expect(statusesAndOutcomes(await h.run(run.id))).toEqual([
        [429, 'retry'],
        [200, 'delivered'],
      ]);
    });

    it('408 is retried', async () => {
      const receiver = await h.receiver({ status: 408 }, { status: 204 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.jobs.drain();
      expect(statusesAndOutcomes(await h.run(run.id))).toEqual([
        [408, 'retry'],
        [204, 'delivered'],
      ]);
    });

    it('400 fails at once: one attempt, "not retried"', async () => {
      const receiver = await h.receiver({ status: 400 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.jobs.drain();
      expect(receiver.requests).toHaveLength(1);
      const failed = await h.run(run.id);
      expect(failed).toMatchObject({ status: 'failed', error: '[delivery] the receiver answered HTTP 400 (not retried)' });
      expect(statusesAndOutcomes(failed)).toEqual([[400, 'failed']]);
    });

    it('302 is not followed: the run fails and the receiver sees only the first request', async () => {
      const receiver = await h.receiver({ status: 302, headers: { location: '/elsewhere' } });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.jobs.drain();
      expect(receiver.requests.map((request) => request.url)).toEqual(['/hook']);
      const failed = await h.run(run.id);
      expect(failed.status).toBe('failed');
      expect(failed.error).toBe('[delivery] the receiver answered HTTP 302 (redirects are not followed) (not retried)');
      expect(statusesAndOutcomes(failed)).toEqual([[302, 'failed']]);
    });

    it('a receiver that never answers times out (DELIVERY_ATTEMPT_TIMEOUT_SECONDS), and the attempt is retried', async () => {
      const receiver = await h.receiver({ hang: true }, { status: 200 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.jobs.drain();
      const running = await h.run(run.id);
      expect(running.status).toBe('running');
      expect(running.attempts.map((a: { httpStatus: number | null; outcome: string; error: string | null }) => [a.httpStatus, a.outcome, a.error])).toEqual([
        [null, 'retry', 'no response within 1 s'],
        [200, 'delivered', null],
      ]);
    });

    it('a dropped connection is a network error, and retried', async () => {
      const receiver = await h.receiver({ drop: true }, { status: 200 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.jobs.drain();
      const running = await h.run(run.id);
      expect(running.status).toBe('running');
      expect(statusesAndOutcomes(running)).toEqual([
        [null, 'retry'],
        [200, 'delivered'],
      ]);
      expect(running.attempts[0].error).toMatch(/^network error \(.+\)$/);
    });

    it('a stored trigger without `retry` (written by hand) is retried by the default policy, not left to throw at every lease', async () => {
      const receiver = await h.receiver({ status: 503 }, { status: 200 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      await h.api.db.execute(sql`update action_runs set trigger = trigger - 'retry' where id = ${run.id}`);
      const logged = h.api.logs.length;
      await h.api.jobs.drain();
      expect(receiver.requests).toHaveLength(1);
      // DEFAULT_RETRY: the second of 3 attempts after up to 1 s (the harness's jitter is its maximum)
      const [job] = await h.api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, run.id));
      expect(job).toMatchObject({ attempt: 2, leaseUntil: null });
      expect(job!.runAt.getTime() - Date.now()).toBeGreaterThan(0);
      expect(job!.runAt.getTime() - Date.now()).toBeLessThanOrEqual(1000);
      expect(statusesAndOutcomes(await h.run(run.id))).toEqual([[503, 'retry']]);
      expect(h.api.logs.slice(logged).filter((line) => line.includes('"level":"error"'))).toEqual([]);
    });

    it('maxAttempts 1 means exactly one request', async () => {
      const receiver = await h.receiver({ status: 503 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, retry: { maxAttempts: 1 } }));
      await h.api.jobs.drain();
      expect(receiver.requests).toHaveLength(1);
      const failed = await h.run(run.id);
      expect(failed.error).toBe('[delivery] gave up after 1 attempt; the last one: the receiver answered HTTP 503');
      expect(statusesAndOutcomes(failed)).toEqual([[503, 'failed']]);
    });
  });

  describe('the request the receiver gets', () => {
    it('GET carries no body and no content-type; PUT carries the interpolated JSON payload', async () => {
      const receiver = await h.receiver({ status: 200 });
      const payload = { entity: '{{ entity.name }}', zone: '{{ entity.properties.zone }}', size: '{{ parameters.size }}' };
      const entity = uniqueSlug('vm');
      const get = await h.trigger(await h.action({ url: `${receiver.url}/get/{{ entity.name }}`, method: 'GET', payload }), { entity });
      await h.api.jobs.drain();
      const put = await h.trigger(await h.action({ url: `${receiver.url}/put`, method: 'PUT', payload }), { parameters: { size: 'xl' } });
      await h.api.jobs.drain();
      const [getRequest, putRequest] = receiver.requests;
      expect(getRequest).toMatchObject({ method: 'GET', url: `/get/${entity}`, body: '' });
      expect(getRequest!.headers['content-type']).toBeUndefined();
      expect(getRequest!.headers['content-length']).toBeUndefined();
      expect((await h.run(get.id)).status).toBe('running');
      expect(putRequest).toMatchObject({ method: 'PUT', url: '/put' });
      expect(putRequest!.headers['content-type']).toBe('application/json');
      expect(JSON.parse(putRequest!.body)).toEqual({ entity: expect.stringMatching(/^vm-/), zone: 'eu-1', size: 'xl' });
      expect((await h.run(put.id)).status).toBe('running');
    });

    it('configured headers are interpolated', async () => {
      const receiver = await h.receiver({ status: 200 });
      const run = await h.trigger(
        await h.action({
          url: `${receiver.url}/hook`,
          headers: { 'x-entity-zone': 'zone={{ entity.properties.zone }}', 'x-run-id': '{{ run.id }}', 'x-size': '{{ parameters.size }}' },
        }),
        { parameters: { size: 'large' } },
      );
      await h.api.jobs.drain();
      const [request] = receiver.requests;
      expect(request!.headers).toMatchObject({ 'x-entity-zone': 'zone=eu-1', 'x-run-id': run.id, 'x-size': 'large' });
    });

    it('auth of every type, its credentials from the run environment\'s secrets', async () => {
      await h.putSecret('ci-token', 'bearer-value-1f9c');
      await h.putSecret('ci-password', 'p@ss:word-77a2');
      await h.putSecret('ci-api-key', 'api-key-value-c0de');
      await h.putSecret('ci-jwt-key', 'jwt-signing-key-that-is-long-enough-5b1e');
      const receiver = await h.receiver({ status: 200 });
      const auths = {
        bearer: { type: 'bearer', token: '{{ secrets.ci-token }}' },
        basic: { type: 'basic', username: 'deployer-{{ entity.properties.zone }}', password: '{{ secrets.ci-password }}' },
        header: { type: 'header', name: 'x-api-key', value: '{{ secrets.ci-api-key }}' },
        jwt: { type: 'jwt', secret: '{{ secrets.ci-jwt-key }}', claims: { aud: 'ci.example.com', entity: '{{ entity.name }}' } },
      };
      const runs: Record<string, any> = {};
      for (const [type, auth] of Object.entries(auths)) {
        runs[type] = await h.trigger(await h.action({ url: `${receiver.url}/${type}`, auth }));
      }
      await h.api.jobs.drain();
      const byPath = Object.fromEntries(receiver.requests.map((request) => [request.url.slice(1), request.headers]));
      expect(byPath.bearer!.authorization).toBe('Bearer bearer-value-1f9c');
      const basic = /^Basic (.+)$/.exec(byPath.basic!.authorization!)!;
      expect(Buffer.from(basic[1]!, 'base64').toString('utf8')).toBe('deployer-eu-1:p@ss:word-77a2');
      expect(byPath.header!['x-api-key']).toBe('api-key-value-c0de');
      expect(byPath.header!.authorization).toBeUndefined();
      const jwt = /^Bearer (.+)$/.exec(byPath.jwt!.authorization!)![1]!;
      const { payload, protectedHeader } = await jwtVerify(jwt, new TextEncoder().encode('jwt-signing-key-that-is-long-enough-5b1e'), {
        algorithms: ['HS256'],
        audience: 'ci.example.com',
      });
      expect(protectedHeader.alg).toBe('HS256');
      expect(payload.entity).toMatch(/^vm-/);
      expect(payload.exp! - payload.iat!).toBe(300);
      for (const run of Object.values(runs)) expect((await h.run(run.id)).status).toBe('running');
    });

    it("{{ secrets.x }} is the run's own environment's value: another environment's secret of that name never leaks in", async () => {
      await h.putSecret('deploy-key', 'default-env-value-3e1d', 'default');
      await h.putSecret('deploy-key', 'staging-env-value-9a7b', 'staging');
      const receiver = await h.receiver({ status: 200 });
      const action = await h.action({
        url: `${receiver.url}/hook`,
        headers: { 'x-deploy-key': '{{ secrets.deploy-key }}' },
        payload: { key: '{{ secrets.deploy-key }}' },
      });
      const inDefault = await h.trigger(action);
      await h.api.jobs.drain();
      const inStaging = await h.trigger(action, { envName: 'staging' });
      await h.api.jobs.drain();
      const [fromDefault, fromStaging] = receiver.requests;
      expect(fromDefault!.headers['webhook-id']).toBe(inDefault.id);
      expect(fromDefault!.headers['x-deploy-key']).toBe('default-env-value-3e1d');
      expect(JSON.parse(fromDefault!.body)).toEqual({ key: 'default-env-value-3e1d' });
      expect(JSON.stringify(fromDefault)).not.toContain('staging-env-value-9a7b');
      expect(fromStaging!.headers['webhook-id']).toBe(inStaging.id);
      expect(fromStaging!.headers['x-deploy-key']).toBe('staging-env-value-9a7b');
      expect(JSON.stringify(fromStaging)).not.toContain('default-env-value-3e1d');
    });

    it('webhook-id is the run id on every attempt; webhook-timestamp and a Standard Webhooks signature on each', async () => {
      const keyBytes = Buffer.from('cellplane-signing-key-material-0123456789');
      await h.putSecret('hook-signing', `whsec_${keyBytes.toString('base64')}`);
      const receiver = await h.receiver({ status: 503 }, { status: 500 }, { status: 200 });
      const before = Math.floor(Date.now() / 1000);
      const run = await h.trigger(
        await h.action({ url: `${receiver.url}/hook`, signingSecret: '{{ secrets.hook-signing }}', payload: { entity: '{{ entity.name }}' } }),
      );
      await h.api.jobs.drain();
      const after = Math.floor(Date.now() / 1000);
      expect(receiver.requests).toHaveLength(3);
      expect(webhookIds(receiver.requests)).toEqual([run.id, run.id, run.id]);
      for (const request of receiver.requests) {
        const id = request.headers['webhook-id'] as string;
        const timestamp = request.headers['webhook-timestamp'] as string;
        expect(timestamp).toMatch(/^\d+$/);
        expect(Number(timestamp)).toBeGreaterThanOrEqual(before);
        expect(Number(timestamp)).toBeLessThanOrEqual(after);
        const expected = createHmac('sha256', keyBytes).update(`${id}.${timestamp}.${request.body}`).digest('base64');
        expect(request.headers['webhook-signature']).toBe(`v1,${expected}`);
      }
      // another run, another id
      const other = await h.trigger(await h.action({ url: `${receiver.url}/hook` }));
      receiver.script({ status: 200 });
      await h.api.jobs.drain();
      expect(receiver.requests[3]!.headers['webhook-id']).toBe(other.id);
      expect(receiver.requests[3]!.headers['webhook-signature']).toBeUndefined();
    });
  });

  describe('round trips to the database', () => {
    /** One attempt of the run's job, from its claim to its recorded outcome: what it led to, the statements it sent and the transactions it opened. */
    async function attemptOnce(runId: string): Promise<{ result: AttemptResult | undefined; statements: number; transactions: number }> {
      let result: AttemptResult | undefined;
      const counts = await countStatements(h.api.testDatabase.database, async () => {
        const leased = await claimDueJobs(h.api.engine, 8);
        expect(leased.map(({ job }) => job.runId)).toEqual([runId]);
        result = await runDeliveryAttempt(h.api.engine, leased[0]!);
      });
      return { result, ...counts };
    }

    const jobOf = async (runId: string) => h.api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, runId));

    it('a delivered attempt is two statements and no transaction: the claim, which reads the run, and the outcome', async () => {
      const receiver = await h.receiver({ status: 200 });
      const action = await h.action({ url: `${receiver.url}/hook` });
      // nothing else due: the claim takes this run's job only
      await h.api.jobs.drain();
      const run = await h.trigger(action);
      expect(await attemptOnce(run.id)).toEqual({ result: { kind: 'delivered' }, statements: 2, transactions: 0 });
      expect(await h.run(run.id)).toMatchObject({ status: 'running', attempts: [{ attempt: 1, httpStatus: 200, outcome: 'delivered' }] });
      expect(await jobOf(run.id)).toEqual([]);
    });

    it('a retried attempt, and then a failed one, are two statements each; the failure still ends the run once', async () => {
      const receiver = await h.receiver({ status: 503 }, { status: 400 });
      const action = await h.action({ url: `${receiver.url}/hook` });
      await h.api.jobs.drain();
      const run = await h.trigger(action);
      const retried = await attemptOnce(run.id);
      expect(retried).toMatchObject({ result: { kind: 'retry', attempt: 2 }, statements: 2, transactions: 0 });
      expect(await jobOf(run.id)).toMatchObject([{ attempt: 2, leaseUntil: null, dispatchedAt: null }]);
      expect(await attemptOnce(run.id)).toMatchObject({ result: { kind: 'failed' }, statements: 2, transactions: 0 });
      const failed = await h.run(run.id);
      expect(failed).toMatchObject({ status: 'failed', error: '[delivery] the receiver answered HTTP 400 (not retried)' });
      expect(statusesAndOutcomes(failed)).toEqual([
        [503, 'retry'],
        [400, 'failed'],
      ]);
      expect(await jobOf(run.id)).toEqual([]);
    });

    it('a trigger writes its run and its delivery job in one statement, without a transaction', async () => {
      const receiver = await h.receiver({ status: 200 });
      const action = await h.action({ url: `${receiver.url}/hook` });
      const entity = uniqueSlug('vm');
      const call = (path: string, body: unknown) => h.api.call('POST', `${h.env}/${path}`, { token: h.owner, body });
      expect((await call('entities', { kind: 'Entity', entityType: 'vm', name: entity, properties: { zone: 'eu-1' } })).status).toBe(201);
      let triggered: ApiResponse | undefined;
      const counts = await countStatements(h.api.testDatabase.database, async () => {
        triggered = await call(`entities/${entity}/actions/${action}`, {});
      });
      expect(triggered!.status).toBe(202);
      // the token with the entity and the action (src/modules/action-runs/fast-path.ts), then the run with its job;
      // no conditions, so no metrics read
      expect(counts).toEqual({ statements: 2, transactions: 0 });
      expect(await jobOf(triggered!.body.id)).toMatchObject([{ runId: triggered!.body.id, attempt: 1, leaseUntil: null }]);
    });

    it('a trigger hands its job to a free slot of the running runner: leased as it is written, sent without a claim, and no claim after it', async () => {
      // a runner that polls only when woken: between its first poll and the attempt's end, any claim would be the trigger's
      const quiet = await createHarness({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' }, runner: { pollIntervalMs: 600_000 } });
      try {
        const receiver = await quiet.receiver({ hold: true });
        const action = await quiet.action({ url: `${receiver.url}/hook` });
        const entity = uniqueSlug('vm');
        const created = await quiet.api.call('POST', `${quiet.env}/entities`, { token: quiet.owner, body: { kind: 'Entity', entityType: 'vm', name: entity } });
        expect(created.status).toBe(201);
        quiet.api.jobs.start();
        // the first poll, at start, finds nothing due
        await new Promise((resolve) => setTimeout(resolve, 100));
        let run!: { id: string };
        const counts = await countStatements(quiet.api.testDatabase.database, async () => {
          const triggered = await quiet.api.call('POST', `${quiet.env}/entities/${entity}/actions/${action}`, { token: quiet.owner, body: {} });
          expect(triggered.status).toBe(202);
          run = triggered.body;
          await receiver.waitForHeld(1);
        });
        // the trigger's two statements, and no claim before the request went out
        expect(counts).toEqual({ statements: 2, transactions: 0 });
        const [job] = await quiet.api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, run.id));
        expect(job!.leaseUntil).not.toBeNull();
        const afterAnswer = await countStatements(quiet.api.testDatabase.database, async () => {
          receiver.release();
          // the outcome's log line follows its write (no statement of the test's meanwhile)
          await eventually(async () => (quiet.api.logs.some((line) => line.includes('"delivery attempt"') && line.includes(run.id)) ? true : undefined));
        });
        // the outcome alone: with nothing else due, the freed slot claims nothing (the poll still looks, every pollIntervalMs)
        expect(afterAnswer).toEqual({ statements: 1, transactions: 0 });
        await eventually(async () => ((await quiet.run(run.id)).status === 'running' ? true : undefined));
        await quiet.api.jobs.stop();
        expect(receiver.requests).toHaveLength(1);
        expect(await quiet.run(run.id)).toMatchObject({ status: 'running', attempts: [{ attempt: 1, httpStatus: 200, outcome: 'delivered' }] });
      } finally {
        await quiet.api.jobs.stop();
        await quiet.close();
      }
    });

    it("a slot's first attempt carries the callback token its trigger signed: the one the next attempt signs, and the callback takes it", async () => {
      const quiet = await createHarness({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' }, runner: { pollIntervalMs: 600_000 } });
      try {
        // the first attempt, through the slot, is retried; the second is claimed by the runner, which signs the token itself
        const receiver = await quiet.receiver({ status: 503 }, { status: 200 });
        const action = await quiet.action({
          url: `${receiver.url}/hook`,
          payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}' },
        });
        quiet.api.jobs.start();
        await new Promise((resolve) => setTimeout(resolve, 100));
        const run = await quiet.trigger(action);
        await receiver.waitForRequests(2);
        const [first, second] = receiver.requests.map((request) => JSON.parse(request.body) as { callbackUrl: string; callbackToken: string });
        expect(first!.callbackToken).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
        expect(second).toEqual(first);
        // names the run; its signature is the callback's to check, below
        expect(decodeJwt(first!.callbackToken).sub).toBe(run.id);
        // the Node host signed both itself (Platform.signHs256), and made the token jose makes
        expect(quiet.api.platform.signHs256).toBe(signHs256);
        expect(quiet.api.engine.signHs256).toBe(signHs256);
        expect(quiet.api.engine.hmacSha256).toBe(hmacSha256);
        const [written] = await quiet.api.db.select().from(actionRuns).where(eq(actionRuns.id, run.id));
        const tenancy = { runId: run.id, orgId: written!.orgId, projectId: written!.projectId, envId: written!.envId };
        expect(first!.callbackToken).toBe(await signCallbackToken(quiet.api.platform.config.authSecret, tenancy, written!.timeoutAt, written!.createdAt));
        await eventually(async () => ((await quiet.run(run.id)).status === 'running' ? true : undefined));
        const completed = await quiet.api.call('POST', new URL(first!.callbackUrl).pathname, {
          headers: { authorization: `Bearer ${first!.callbackToken}` },
          body: { status: 'succeeded' },
        });
        expect(completed.status, JSON.stringify(completed.body)).toBe(200);
        expect(await quiet.run(run.id)).toMatchObject({ status: 'succeeded' });
      } finally {
        await quiet.api.jobs.stop();
        await quiet.close();
      }
    });

    it('a backlog written while every slot is taken is taken up by the slots as they free, without waiting for the poll', async () => {
      // the poll would not look again within the test: only freed slots can claim the backlog
      const quiet = await createHarness({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' }, runner: { pollIntervalMs: 600_000 } });
      try {
        const receiver = await quiet.receiver({ hold: true });
        const action = await quiet.action({ url: `${receiver.url}/hook` });
        quiet.api.jobs.start();
        await new Promise((resolve) => setTimeout(resolve, 100));
        // 8 runs take the 8 slots as they are written; 20 more wait in the table, more than the slots hold at once
        const runs: { id: string }[] = [];
        for (let i = 0; i < 28; i++) runs.push(await quiet.trigger(action));
        await receiver.waitForHeld(8);
        expect(receiver.requests).toHaveLength(8);
        const unleased = await quiet.api.db.select().from(deliveryJobs).where(isNull(deliveryJobs.leaseUntil));
        expect(unleased).toHaveLength(20);
        // from now on answered at once: each answer frees a slot, which claims the next due job while other outcomes are written
        receiver.script({ status: 200 });
        receiver.release();
        await receiver.waitForRequests(28);
        await eventually(async () => ((await quiet.api.db.select().from(deliveryJobs)).length === 0 ? true : undefined));
        await quiet.api.jobs.stop();
        const sent = webhookIds(receiver.requests);
        expect(new Set(sent)).toEqual(new Set(runs.map((run) => run.id)));
        expect(sent).toHaveLength(28);
      } finally {
        await quiet.api.jobs.stop();
        await quiet.close();
      }
    });

    it('tells the runner its slot is free once the request is answered, before the outcome is written', async () => {
      const receiver = await h.receiver({ status: 200 });
      const action = await h.action({ url: `${receiver.url}/hook` });
      await h.api.jobs.drain();
      const run = await h.trigger(action);
      // when the slot is handed back: the requests the receiver has, and the statements issued (the claim alone)
      const atSent: { requests: number; statements: number }[] = [];
      const counts = await countStatements(h.api.testDatabase.database, async (sofar) => {
        const [leased] = await claimDueJobs(h.api.engine, 8);
        const result = await runDeliveryAttempt(h.api.engine, leased!, { onSent: () => atSent.push({ requests: receiver.requests.length, statements: sofar.statements }) });
        expect(result).toEqual({ kind: 'delivered' });
      });
      expect(atSent).toEqual([{ requests: 1, statements: 1 }]);
      expect(counts.statements).toBe(2);
      expect(await h.run(run.id)).toMatchObject({ status: 'running', attempts: [{ attempt: 1, outcome: 'delivered' }] });
    });

    it('a trigger finds no free slot while every one is taken: its job is written unleased, and the poll takes it', async () => {
      const receiver = await h.receiver({ status: 200 });
      const action = await h.action({ url: `${receiver.url}/hook` });
      await h.api.jobs.drain();
      h.api.jobs.start();
      const slots = Array.from({ length: 8 }, () => h.api.jobs.reserve()!);
      try {
        expect(slots.every(Boolean)).toBe(true);
        expect(h.api.jobs.reserve()).toBeUndefined();
        const run = await h.trigger(action);
        expect(await jobOf(run.id)).toMatchObject([{ attempt: 1, leaseUntil: null }]);
        // a slot handed back wakes the runner, which claims the job
        slots.pop()!.release();
        await eventually(async () => ((await h.run(run.id)).status === 'running' ? true : undefined));
      } finally {
        for (const slot of slots) slot.release();
        await h.api.jobs.stop();
      }
      expect(receiver.requests).toHaveLength(1);
    });

    it("a slot's work meanwhile starts after what the trigger's turn left to the next tick: the pool hands the insert its connection there", async () => {
      await h.api.jobs.drain();
      h.api.jobs.start();
      const slot = h.api.jobs.reserve()!;
      try {
        const order: string[] = [];
        // a continuation, as the trigger's code after its first await is: ticks wait for every microtask
        await Promise.resolve();
        process.nextTick(() => order.push('the pool hands the statement its connection'));
        const signed = slot.meanwhile(async () => {
          order.push('the token signed');
          return 'token';
        });
        await Promise.resolve().then(() => order.push('the rest of the turn'));
        expect(await signed).toBe('token');
        expect(order).toEqual(['the rest of the turn', 'the pool hands the statement its connection', 'the token signed']);
        // a failure is the caller's to meet
        await expect(slot.meanwhile(() => Promise.reject(new Error('no key')))).rejects.toThrow('no key');
      } finally {
        slot.release();
        await h.api.jobs.stop();
      }
    });

    it('a slot started after the runner stopped hands its lease back: the next worker makes the attempt at once', async () => {
      const receiver = await h.receiver({ status: 200 });
      const action = await h.action({ url: `${receiver.url}/hook` });
      await h.api.jobs.drain();
      h.api.jobs.start();
      const slot = h.api.jobs.reserve()!;
      await h.api.jobs.stop();
      // as a trigger would have written it, leased to the slot
      const run = await h.trigger(action);
      await h.api.db.update(deliveryJobs).set({ leaseUntil: slot.leaseUntil }).where(eq(deliveryJobs.runId, run.id));
      const [job] = await jobOf(run.id);
      slot.start({ job: job!, run: (await h.api.db.select().from(actionRuns).where(eq(actionRuns.id, run.id)))[0]! });
      await eventually(async () => ((await jobOf(run.id))[0]?.leaseUntil === null ? true : undefined));
      expect(receiver.requests).toHaveLength(0);
      await h.api.jobs.drain();
      expect(receiver.requests).toHaveLength(1);
    });

    it('only a trigger that names secrets reads them: one statement more', async () => {
      const receiver = await h.receiver({ status: 200 });
      await h.putSecret('round-trip-token', 'tok-round-trip-1234');
      const action = await h.action({ url: `${receiver.url}/hook`, headers: { 'x-token': '{{ secrets.round-trip-token }}' } });
      await h.api.jobs.drain();
      const run = await h.trigger(action);
      expect(await attemptOnce(run.id)).toEqual({ result: { kind: 'delivered' }, statements: 3, transactions: 0 });
      expect(receiver.requests[0]!.headers['x-token']).toBe('tok-round-trip-1234');
    });
  });

  describe('secrets never leak', () => {
    it('no secret value and no callback token in logs, run errors, attempt errors or responses, whatever the failure', async () => {
      const canaries = {
        'leak-token': 'canary-bearer-4f1e9a',
        'leak-password': 'canary-password-8c2d7b',
        'leak-key': 'canary-header-key-3a6f0e',
        'leak-jwt': 'canary-jwt-secret-with-enough-length-d41d',
        'leak-query': 'canary-query-value-b7e3',
        'leak-signing': 'canary-signing-secret-5e9f',
      };
      for (const [name, value] of Object.entries(canaries)) await h.putSecret(name, value);
      const auths = [
        { type: 'bearer', token: '{{ secrets.leak-token }}' },
        { type: 'basic', username: 'u', password: '{{ secrets.leak-password }}' },
        { type: 'header', name: 'x-api-key', value: '{{ secrets.leak-key }}' },
        { type: 'jwt', secret: '{{ secrets.leak-jwt }}' },
      ];
      const modes: { replies: Reply[]; url?: (receiver: Receiver) => string; maxAttempts: number }[] = [
        { replies: [{ status: 500, body: 'echo' }], maxAttempts: 2 },
        { replies: [{ status: 401 }], maxAttempts: 3 },
        { replies: [{ status: 302, headers: { location: 'http://127.0.0.1:9/steal' } }], maxAttempts: 3 },
        { replies: [{ hang: true }], maxAttempts: 1 },
        { replies: [{ drop: true }], maxAttempts: 2 },
        { replies: [{ status: 200 }], maxAttempts: 3, url: (receiver) => receiver.url.replace('127.0.0.1', 'hooks.example.test') },
      ];
      const runIds: string[] = [];
      const receivers: Receiver[] = [];
      for (const [i, mode] of modes.entries()) {
        const receiver = await h.receiver(...mode.replies);
        receivers.push(receiver);
        const action = await h.action({
          url: `${mode.url?.(receiver) ?? receiver.url}/hook?key={{ secrets.leak-query }}`,
          auth: auths[i % auths.length],
          headers: { 'x-key': '{{ secrets.leak-key }}' },
          payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}', token: '{{ secrets.leak-token }}' },
          signingSecret: '{{ secrets.leak-signing }}',
          retry: { maxAttempts: mode.maxAttempts, initialDelayMs: 0 },
        });
        runIds.push((await h.trigger(action)).id);
      }
      await h.api.jobs.drain();

      const runs = await Promise.all(runIds.map((id) => h.run(id)));
      expect(runs.map((run) => run.status)).toEqual(runIds.map(() => 'failed'));
      for (const run of runs) expect(run.error).toMatch(/^\[delivery\] /);
      expect(runs.at(-1).error).toMatch(/^\[delivery\] refused to call the webhook URL/);
      await h.api.call('GET', `${h.env}/action-runs?limit=500`, { token: h.owner }).then((list) => h.responses.push(list));

      // the tokens handed to the receivers
      const callbackTokens = receivers.flatMap((receiver) => receiver.requests.map((request) => JSON.parse(request.body).callbackToken as string));
      expect(callbackTokens.length).toBeGreaterThanOrEqual(5);
      const forbidden = [...Object.values(canaries), ...new Set(callbackTokens)];
      const logs = h.api.logs.join('\n');
      for (const runId of runIds) expect(logs).toContain(runId);
      const responses = h.responses.map((response) => JSON.stringify(response.body)).join('\n');
      const errors = runs.flatMap((run) => [run.error, ...run.attempts.map((attempt: { error: string | null }) => attempt.error)]).join('\n');
      for (const value of forbidden) {
        expect(logs, 'a log line').not.toContain(value);
        expect(errors, 'a run or attempt error').not.toContain(value);
        expect(responses, 'a response body').not.toContain(value);
      }
    });

    it('a credential no HTTP header can carry fails the run at once, without quoting it anywhere', async () => {
      // the HTTP client refuses such a value, and its message quotes it
      await h.putSecret('crlf-token', 'canary-crlf-6d2a\r\nx-injected: yes');
      const receiver = await h.receiver({ status: 200 });
      const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, auth: { type: 'bearer', token: '{{ secrets.crlf-token }}' } }));
      await h.api.jobs.drain();
      const failed = await h.run(run.id);
      expect(failed.status).toBe('failed');
      expect(failed.error).toMatch(/^\[delivery\] the request could not be built: /);
      expect(failed.attempts).toMatchObject([{ attempt: 1, httpStatus: null, outcome: 'failed' }]);
      expect(receiver.requests).toHaveLength(0);
      for (const text of [h.api.logs.join('\n'), JSON.stringify(failed)]) expect(text).not.toContain('canary-crlf-6d2a');
    });
  });
});

describe('the retry schedule', () => {
  let h: Harness;
  const clock = manualClock();
  let jitter = 1;

  beforeAll(async () => {
    h = await createHarness({ clock, env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' }, engine: { random: () => jitter } });
  });
  afterAll(() => h.close());

  const scheduledAt = async (runId: string) => {
    const [job] = await h.api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, runId));
    return job && { attempt: job.attempt, inMs: job.runAt.getTime() - clock.now().getTime() };
  };

  /** Delivers what is due, then says when the run's next attempt is scheduled, counted from now. */
  const step = async (runId: string) => {
    await h.api.jobs.drain();
    return scheduledAt(runId);
  };

  it('exponential: initialDelayMs × 2^(n-1), each due only when its time comes', async () => {
    jitter = 1;
    const receiver = await h.receiver({ status: 500 });
    const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, retry: { maxAttempts: 4, backoff: 'exponential', initialDelayMs: 1000 } }));
    expect(await step(run.id)).toEqual({ attempt: 2, inMs: 1000 });
    clock.advance(999);
    expect(await step(run.id)).toEqual({ attempt: 2, inMs: 1 });
    expect(receiver.requests).toHaveLength(1);
    clock.advance(1);
    expect(await step(run.id)).toEqual({ attempt: 3, inMs: 2000 });
    clock.advance(2000);
    expect(await step(run.id)).toEqual({ attempt: 4, inMs: 4000 });
    clock.advance(4000);
    expect(await step(run.id)).toBeUndefined();
    expect(receiver.requests).toHaveLength(4);
    expect((await h.run(run.id)).error).toMatch(/^\[delivery\] gave up after 4 attempts/);
  });

  it('fixed: initialDelayMs every time', async () => {
    jitter = 1;
    const receiver = await h.receiver({ status: 502 });
    const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, retry: { maxAttempts: 3, backoff: 'fixed', initialDelayMs: 1500 } }));
    expect(await step(run.id)).toEqual({ attempt: 2, inMs: 1500 });
    clock.advance(1500);
    expect(await step(run.id)).toEqual({ attempt: 3, inMs: 1500 });
    clock.advance(1500);
    expect(await step(run.id)).toBeUndefined();
    expect(receiver.requests).toHaveLength(3);
  });

  it('full jitter: the delay is random × the backoff', async () => {
    jitter = 0.25;
    const receiver = await h.receiver({ status: 500 });
    const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, retry: { maxAttempts: 3, backoff: 'exponential', initialDelayMs: 4000 } }));
    expect(await step(run.id)).toEqual({ attempt: 2, inMs: 1000 });
    clock.advance(1000);
    expect(await step(run.id)).toEqual({ attempt: 3, inMs: 2000 });
    clock.advance(2000);
    await h.api.jobs.drain();
  });

  it('Retry-After wins over a shorter backoff, in seconds or as an HTTP date', async () => {
    jitter = 0;
    const date = new Date(clock.now().getTime() + 30_000).toUTCString();
    const receiver = await h.receiver(
      { status: 429, headers: { 'retry-after': '7' } },
      { status: 503, headers: { 'retry-after': date } },
      { status: 200 },
    );
    const run = await h.trigger(await h.action({ url: `${receiver.url}/hook`, retry: { maxAttempts: 3, initialDelayMs: 1000 } }));
    expect(await step(run.id)).toEqual({ attempt: 2, inMs: 7000 });
    clock.advance(7000);
    expect(await step(run.id)).toEqual({ attempt: 3, inMs: 23_000 });
    clock.advance(23_000);
    expect(await step(run.id)).toBeUndefined();
    expect((await h.run(run.id)).status).toBe('running');
  });
});

describe('the SSRF guard', () => {
  let h: Harness;
  let receiver: Receiver;
  const port = () => new URL(receiver.url).port;

  beforeAll(async () => {
    h = await createHarness({
      // the receiver on 127.0.0.1 is not listed
      env: { OUTBOUND_ALLOWED_HOSTS: 'allowed.example.test' },
      engine: {
        resolveHost: async (host) => {
          if (host === 'nxdomain.example.test') throw new Error('ENOTFOUND');
          return host === 'hooks.example.test' ? ['127.0.0.1'] : ['203.0.113.10'];
        },
        // were the guard to let hooks.example.test through, the request would reach the receiver
        fetch: (input, init) => fetch(String(input).replace('hooks.example.test', '127.0.0.1'), init),
      },
    });
    receiver = await h.receiver({ status: 200 });
  });
  afterAll(() => h.close());

  it.each([
    ['loopback', () => `http://127.0.0.1:${port()}/hook`],
    ['loopback in hex', () => `http://0x7f.1:${port()}/hook`],
    ['loopback as one decimal', () => `http://2130706433:${port()}/hook`],
    ['IPv4-mapped IPv6 loopback', () => `http://[::ffff:127.0.0.1]:${port()}/hook`],
    ['the metadata address', () => 'http://169.254.169.254/latest/meta-data/'],
    ['a private address', () => 'http://10.0.0.1/hook'],
  ])('a trigger URL naming %s is refused at trigger: 400 outbound_url_refused, no run', async (_name, url) => {
    const action = await h.action({ url: url() });
    const entity = uniqueSlug('vm');
    await h.api.call('POST', `${h.env}/entities`, { token: h.owner, body: { kind: 'Entity', entityType: 'vm', name: entity } });
    const response = await h.api.call('POST', `${h.env}/entities/${entity}/actions/${action}`, { token: h.owner });
    expectError(response, 400, 'outbound_url_refused');
    expect((await h.api.call('GET', `${h.env}/action-runs?entity=${entity}`, { token: h.owner })).body).toEqual([]);
    await h.api.jobs.drain();
    expect(receiver.requests).toHaveLength(0);
  });

  it('a name resolving to loopback is accepted at trigger and refused at delivery; the receiver gets nothing', async () => {
    const run = await h.trigger(await h.action({ url: `http://hooks.example.test:${port()}/hook` }));
    expect(run.status).toBe('pending');
    await h.api.jobs.drain();
    const failed = await h.run(run.id);
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe('[delivery] refused to call the webhook URL: hooks.example.test resolves to 127.0.0.1, which is not a public address');
    expect(failed.attempts).toMatchObject([{ attempt: 1, httpStatus: null, outcome: 'failed' }]);
    expect(receiver.requests).toHaveLength(0);
  });

  it('a name that does not resolve (yet) is a network error and retried, not refused', async () => {
    const run = await h.trigger(await h.action({ url: 'http://nxdomain.example.test/hook', retry: { maxAttempts: 2, initialDelayMs: 0 } }));
    await h.api.jobs.drain();
    const failed = await h.run(run.id);
    expect(failed.status).toBe('failed');
    expect(failed.attempts.map((a: { outcome: string }) => a.outcome)).toEqual(['retry', 'failed']);
    expect(failed.error).toBe('[delivery] gave up after 2 attempts; the last one: network error (nxdomain.example.test does not resolve)');
  });
});

describe('the SSRF guard at connection time (Node host)', () => {
  let h: Harness;
  let receiver: Receiver;
  const port = () => new URL(receiver.url).port;
  // what the name answers when the connection is made: loopback, whatever it answered the guard before
  const rebinding = (hostname: string, _options: unknown, callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) =>
    callback(null, hostname.endsWith('.example.test') ? [{ address: '127.0.0.1', family: 4 }] : []);

  beforeAll(async () => {
    h = await createHarness({
      env: { OUTBOUND_ALLOWED_HOSTS: 'allowed.example.test' },
      engine: {
        // the guard's own lookup sees a public address
        resolveHost: async () => ['8.8.8.8'],
        fetch: guardedFetch(['allowed.example.test'], rebinding),
      },
    });
    receiver = await h.receiver({ status: 200 });
  });
  afterAll(() => h.close());

  it('a name that resolves to a public address for the guard and to loopback when connecting (DNS rebinding) is refused; nothing is sent', async () => {
    const run = await h.trigger(await h.action({ url: `http://rebind.example.test:${port()}/hook` }));
    await h.api.jobs.drain();
    const failed = await h.run(run.id);
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe('[delivery] refused to call the webhook URL: rebind.example.test resolves to 127.0.0.1, which is not a public address');
    expect(failed.attempts).toMatchObject([{ attempt: 1, httpStatus: null, outcome: 'failed' }]);
    expect(receiver.requests).toHaveLength(0);
  });

  it('a host OUTBOUND_ALLOWED_HOSTS lists is connected to through the same fetch', async () => {
    const run = await h.trigger(await h.action({ url: `http://allowed.example.test:${port()}/hook` }));
    await h.api.jobs.drain();
    expect((await h.run(run.id)).status).toBe('running');
    expect(receiver.requests).toHaveLength(1);
  });
});
