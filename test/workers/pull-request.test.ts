import { createExecutionContext, createMessageBatch, getQueueResult } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { describe, expect, inject, it, vi } from 'vitest';
import worker from '../../src/worker';
import type { WorkerEnv } from '../../src/worker-platform';
import { pullRequestEvent, signEvent, type SignedEvent } from '../support/github-events';

/**
 * Pull-request runs in workerd, through the real Worker entry (src/worker.ts):
 * the GitHub App of the global setup (a PKCS#1 key, converted in workerd)
 * pointed at the local GitHub server in Node, which checks the App's JWT and
 * the installation tokens it mints. The judged flow: a new user installs the
 * App for an organization and links the repository; a pull-request action
 * is triggered; the Worker's queue handler delivers it (the pull request is
 * opened on GitHub, its number and URL on the run); GitHub's signed
 * `closed` events end the runs — merged → succeeded with the entity in
 * onSuccess, closed → failed with the entity in onFailure — through the App
 * webhook and through the project webhook. The steps build on each other.
 */

const BASE = 'http://cellplane.test';
const DELIVERIES = 'cellplane-deliveries';
const github = inject('github');
const suffix = Math.random().toString(36).slice(2, 8);
const installationId = 700_000 + Math.floor(Math.random() * 100_000);
const account = `acme-${suffix}`;
const repo = `${account}/infra`;
const HOOK_SECRET = `hook-secret-${suffix}-5e1f`;

async function call(method: string, path: string, options: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...(options.headers ?? {}) };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  let body = options.rawBody;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  const response = await exports.default.fetch(`${BASE}${path}`, { method, headers, body, redirect: 'manual' });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? (JSON.parse(text) as any) : undefined };
}

async function ok(status: number, pending: ReturnType<typeof call>) {
  const response = await pending;
  expect(response.status, JSON.stringify(response.body)).toBe(status);
  return response.body;
}

async function control(method: string, path: string, body?: unknown) {
  const response = await fetch(`${github.url}/__control${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  expect(response.status, `${method} /__control${path}`).toBeLessThan(300);
  return response.json() as Promise<any>;
}

/** The Worker's queue handler, given the run's first delivery message (the real queue may carry it too: only one of them takes the job). */
async function deliver(runId: string) {
  const entry = worker as Required<Pick<ExportedHandler<WorkerEnv>, 'queue'>>;
  const batch = createMessageBatch(DELIVERIES, [{ id: `pr-${runId}`, timestamp: new Date(), attempts: 1, body: { runId, attempt: 1 } }]);
  const ctx = createExecutionContext();
  await entry.queue(batch, env as WorkerEnv, ctx);
  await getQueueResult(batch, ctx);
}

describe.sequential('pull-request runs on the Worker host', () => {
  let token = '';
  const org = `pr-${suffix}`;
  const proj = `/${org}/platform`;
  let entityCount = 0;

  const getRun = (id: string) => ok(200, call('GET', `${proj}/envs/default/action-runs/${id}`, { token }));
  const stateOf = async (entity: string) => (await ok(200, call('GET', `${proj}/envs/default/entities/${entity}`, { token }))).state;

  /** A new vm, `action` triggered on it and delivered: the run is running with its pull request. */
  async function openedRun(action: string) {
    const entity = `vm-${++entityCount}`;
    await ok(201, call('POST', `${proj}/envs/default/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name: entity } }));
    const triggered = await ok(202, call('POST', `${proj}/envs/default/entities/${entity}/actions/${action}`, { token, body: { parameters: { size: 'large' } } }));
    expect(triggered.status).toBe('pending');
    await deliver(triggered.id);
    await vi.waitFor(async () => expect((await getRun(triggered.id)).status).toBe('running'), { timeout: 10_000, interval: 100 });
    return { entity, run: await getRun(triggered.id) };
  }

  /** GitHub merges or closes the pull request; the `closed` event as GitHub signs it. */
  async function closed(number: number, merged: boolean, secret?: string): Promise<SignedEvent> {
    const pull = await control('POST', `/pulls/${merged ? 'merge' : 'close'}`, { repo, number });
    const payload = pullRequestEvent({ installationId: secret ? undefined : installationId, repository: pull.base.repo, pullRequest: pull });
    return secret ? signEvent('pull_request', payload, secret) : signEvent('pull_request', payload);
  }

  it('a new user installs the App for an organization and links the repository to a project', async () => {
    const signUp = await exports.default.fetch(`${BASE}/api/auth/sign-up/email`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: `pr-${suffix}@example.com`, password: 'correct horse battery staple', name: 'PR' }),
    });
    expect(signUp.status).toBe(200);
    token = signUp.headers.get('set-auth-token') ?? '';
    await ok(201, call('POST', '/orgs', { token, body: { name: 'PR Org', slug: org } }));
    await ok(201, call('POST', `/orgs/${org}/projects`, { token, body: { name: 'Platform', slug: 'platform' } }));
    await control('POST', '/installations', { id: installationId, account, repositories: [repo] });
    await ok(200, call('POST', '/github/installations/recover', { token, body: { orgId: org, installationId } }));
    expect(await ok(201, call('PUT', `${proj}/github/repos/${repo}`, { token }))).toMatchObject({ fullName: repo, installationId });
    await ok(201, call('POST', `${proj}/entity-types`, { token, body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' } }));
    await ok(201, call('PUT', `${proj}/envs/default/secrets/gh-hook`, { token, body: { value: HOOK_SECRET } }));
    await ok(
      201,
      call('POST', `${proj}/actions`, {
        token,
        body: {
          kind: 'Action',
          name: 'resize',
          entityType: 'vm',
          onSuccess: 'running',
          onFailure: 'failed',
          parameters: [{ name: 'size', type: 'string', default: 'small' }],
          trigger: {
            type: 'pull-request',
            repo,
            title: 'Resize {{ entity.name }} to {{ parameters.size }}',
            files: [{ path: 'envs/{{ entity.name }}.tfvars', content: 'size = "{{ parameters.size }}"\n' }],
            webhookSecret: '{{ secrets.gh-hook }}',
          },
        },
      }),
    );
  });

  it('opens the pull request on delivery, with its number and URL on the run; a signed merged webhook ends the run succeeded, the entity in onSuccess', async () => {
    await control('DELETE', '/requests');
    const { entity, run } = await openedRun('resize');
    expect(run).toMatchObject({ repo, prNumber: expect.any(Number), prUrl: `https://github.com/${repo}/pull/${run.prNumber}`, headSha: expect.any(String) });
    expect(run.attempts).toMatchObject([{ attempt: 1, outcome: 'delivered', httpStatus: 201 }]);
    const requests = (await control('GET', '/requests')) as { route: string; auth: string; status: number }[];
    // the installation token the recovery minted is still cached in this isolate, or minted again: either way as the App
    expect(requests.filter((request) => request.route === 'create_installation_token').every((request) => request.auth === 'app')).toBe(true);
    expect(requests.filter((request) => request.route !== 'create_installation_token').map((request) => [request.route, request.auth, request.status])).toEqual([
      ['get_repo', 'installation', 200],
      ['get_ref', 'installation', 200],
      ['create_ref', 'installation', 201],
      ['get_contents', 'installation', 404],
      ['put_contents', 'installation', 201],
      ['list_pulls', 'installation', 200],
      ['create_pull', 'installation', 201],
    ]);

    const event = await closed(run.prNumber, true);
    const response = await call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    expect(response.body).toEqual({ ok: true, outcome: { runId: run.id, kind: 'run-succeeded', matchedBy: 'project-link' } });
    expect(await getRun(run.id)).toMatchObject({ status: 'succeeded', error: null });
    expect(await stateOf(entity)).toBe('running');
  });

  it('a close without merge ends the run failed, the entity in onFailure', async () => {
    const { entity, run } = await openedRun('resize');
    const event = await closed(run.prNumber, false);
    const response = await call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
    expect(response.body).toEqual({ ok: true, outcome: { runId: run.id, kind: 'run-failed', matchedBy: 'project-link' } });
    expect(await getRun(run.id)).toMatchObject({ status: 'failed', error: `the pull request ${repo}#${run.prNumber} was closed without being merged` });
    expect(await stateOf(entity)).toBe('failed');
  });

  it("the project webhook: a merge signed with the run's webhook secret ends it; another secret is 401", async () => {
    const { entity, run } = await openedRun('resize');
    const forged = await closed(run.prNumber, true, 'not-the-hook-secret');
    const refused = await call('POST', `${proj}/webhooks/github`, { rawBody: forged.body, headers: forged.headers });
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 401, code: 'invalid_signature' });
    expect((await getRun(run.id)).status).toBe('running');

    const signed = await signEvent('pull_request', JSON.parse(forged.body), HOOK_SECRET);
    const response = await call('POST', `${proj}/webhooks/github`, { rawBody: signed.body, headers: signed.headers });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    expect(response.body).toEqual({ ok: true });
    expect((await getRun(run.id)).status).toBe('succeeded');
    expect(await stateOf(entity)).toBe('running');
  });
});
