import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { notifications, orgs } from '../../src/db/schema';
import { sign } from '@octokit/webhooks-methods';
import { expectError } from '../support/fixtures';
import { pullRequestEvent, signEvent } from '../support/github-events';
import type { GitHubServer } from '../support/github-server';
import type { TestApi } from '../support/node-app';
import {
  createPullRequestHarness,
  HOOK_SECRET_DEFAULT,
  HOOK_SECRET_STAGING,
  INSTALLATION,
  type PullRequestHarness,
} from '../support/pull-request-harness';

/**
 * The two endpoints a pull request's `closed` event comes through (SPEC
 * "Inbound webhooks", "Inbound code-hosting webhook events"; issue 12,
 * Deliver 3 and 4), with GitHub's own example payloads signed as GitHub
 * signs them, against runs whose pull requests the local GitHub opened:
 *
 * - the project webhook `POST /{o}/{p}/webhooks/github`, SPEC's five rules:
 *   only `closed` matters; the active run of the repository (and pull
 *   request); its secret from the run's own environment; 401 only when a
 *   secret exists; merge → succeeded, close → failed; 400 for a bad body;
 * - the App webhook's `pull_request closed` row: matched through the
 *   project's repository link or the run's own metadata;
 * - both at once, and after another ending: one completion.
 */

let h: PullRequestHarness;
let api: TestApi;
let github: GitHubServer;
let proj: string;
let org: PullRequestHarness['org'];
let project: PullRequestHarness['project'];
let owner: PullRequestHarness['owner'];
let call: PullRequestHarness['call'];
let ok: PullRequestHarness['ok'];
let prAction: PullRequestHarness['prAction'];
let getRun: PullRequestHarness['getRun'];
let stateOf: PullRequestHarness['stateOf'];
let opened: PullRequestHarness['opened'];
let closedEvent: PullRequestHarness['closedEvent'];
let deliverToApp: PullRequestHarness['deliverToApp'];
let deliverToProject: PullRequestHarness['deliverToProject'];

beforeAll(async () => {
  h = await createPullRequestHarness();
  ({ api, github, proj, org, project, owner, call, ok, prAction, getRun, stateOf, opened, closedEvent, deliverToApp, deliverToProject } = h);
});
afterAll(() => h?.close());

describe('the project webhook, POST /{o}/{p}/webhooks/github (SPEC "Inbound webhooks")', () => {
  it('a merge signed with the secret of the run\'s environment ends the run succeeded (rule 5)', async () => {
    const run = await opened(await prAction());
    const response = await deliverToProject(await closedEvent('acme/infra', run.prNumber, { merged: true, secret: HOOK_SECRET_DEFAULT }));
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    expect(response.body).toEqual({ ok: true });
    expect((await getRun(run)).status).toBe('succeeded');
    expect(await stateOf(run)).toBe('running');
  });

  it('two environments hold two values under one name: each run verifies with its own environment\'s (rule 3); another value is 401 (rule 4)', async () => {
    const action = await prAction();
    const staging = await opened(action, { envName: 'staging' });
    const closedStaging = await closedEvent('acme/infra', staging.prNumber, { merged: false, secret: HOOK_SECRET_DEFAULT });
    expectError(await deliverToProject(closedStaging), 401, 'invalid_signature');
    expect((await getRun(staging)).status).toBe('running');
    const resigned = await signEvent('pull_request', JSON.parse(closedStaging.body), HOOK_SECRET_STAGING);
    expect((await deliverToProject(resigned)).body).toEqual({ ok: true });
    expect((await getRun(staging)).status).toBe('failed');
    expect(await stateOf(staging)).toBe('failed');

    // unsigned, or a malformed signature, is 401 as well once a secret exists
    const other = await opened(action);
    const event = await closedEvent('acme/infra', other.prNumber, { merged: true, secret: HOOK_SECRET_DEFAULT });
    expectError(await deliverToProject(event, { 'x-hub-signature-256': '' }), 401, 'invalid_signature');
    expectError(await deliverToProject(event, { 'x-hub-signature-256': 'sha1=abc' }), 401, 'invalid_signature');
    expect((await getRun(other)).status).toBe('running');
    expect((await deliverToProject(event)).body).toEqual({ ok: true });
    expect((await getRun(other)).status).toBe('succeeded');
  });

  it('no secret configured for the run (no webhookSecret, or none in its environment): acknowledged, no transition (rule 4)', async () => {
    const without = await opened(await prAction({ webhookSecret: undefined }));
    const event = await closedEvent('acme/infra', without.prNumber, { merged: true, secret: 'whatever-secret-1234' });
    expect((await deliverToProject(event)).body).toEqual({ ok: true });
    expect((await getRun(without)).status).toBe('running');

    const missing = await opened(await prAction({ webhookSecret: '{{ secrets.not-in-this-env }}' }));
    const event2 = await closedEvent('acme/infra', missing.prNumber, { merged: true, secret: 'whatever-secret-1234' });
    expect((await deliverToProject(event2)).body).toEqual({ ok: true });
    expect((await getRun(missing)).status).toBe('running');
    // such a run is completed another way SPEC names: the entity API, the callback or the timeout
    await ok(200, call('PUT', `${proj}/envs/default/entities/${missing.entity}`, { state: 'running' }));
    expect((await getRun(missing)).status).toBe('succeeded');
  });

  it('only `closed` is significant (rule 1); a pull request no active run opened, an unknown project, a ping: acknowledged (rule 2)', async () => {
    const run = await opened(await prAction());
    const reopened = pullRequestEvent({ action: 'reopened', repository: github.repositoryJson('acme/infra'), pullRequest: github.pullRequestJson('acme/infra', run.prNumber) });
    expect((await deliverToProject(await signEvent('pull_request', reopened, 'not-the-secret'))).body).toEqual({ ok: true });
    const elsewhere = pullRequestEvent({ repository: 'acme/unrelated', pullRequest: { number: run.prNumber, merged: true } });
    expect((await deliverToProject(await signEvent('pull_request', elsewhere, 'not-the-secret'))).body).toEqual({ ok: true });
    const otherNumber = pullRequestEvent({ repository: github.repositoryJson('acme/infra'), pullRequest: { number: 99_999, merged: true } });
    expect((await deliverToProject(await signEvent('pull_request', otherNumber, 'not-the-secret'))).body).toEqual({ ok: true });
    const merged = await closedEvent('acme/infra', run.prNumber, { merged: true, secret: HOOK_SECRET_DEFAULT });
    expect((await deliverToProject(merged, {}, `/${org.slug}/no-such-project/webhooks/github`)).body).toEqual({ ok: true });
    expect((await deliverToProject(merged, {}, `/no-such-org/${project.slug}/webhooks/github`)).body).toEqual({ ok: true });
    expect((await deliverToProject(await signEvent('ping', { zen: 'Design for failure.', hook_id: 1 }, HOOK_SECRET_DEFAULT))).body).toEqual({ ok: true });
    expect((await getRun(run)).status).toBe('running');
    // and by the project's id as well as its slug
    expect((await deliverToProject(merged, {}, `/${org.id}/${project.id}/webhooks/github`)).body).toEqual({ ok: true });
    expect((await getRun(run)).status).toBe('succeeded');
  });

  it('400 for an invalid or malformed payload', async () => {
    const headers = { 'content-type': 'application/json', 'x-github-event': 'pull_request', 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` };
    const post = (rawBody: string) => api.call('POST', `${proj}/webhooks/github`, { rawBody, headers });
    expectError(await post('{not json'), 400, 'invalid_json');
    expectError(await post('[]'), 400, 'validation_failed');
    expectError(await post(JSON.stringify({ action: 'closed' })), 400, 'validation_failed');
    expectError(await post(JSON.stringify({ repository: { full_name: 'acme/infra' } })), 400, 'validation_failed');
    const closedWithout = await post(JSON.stringify({ action: 'closed', repository: { full_name: 'acme/infra' } }));
    expectError(closedWithout, 400, 'validation_failed');
    expect(closedWithout.body.details).toEqual([{ path: 'pull_request', message: expect.any(String) }]);
    expectError(await post(JSON.stringify({ action: 'closed', repository: { full_name: 'acme/infra' }, pull_request: { number: 'one', merged: true } })), 400, 'validation_failed');
  });

  it("a suspended organization's runs are not moved (403 org_suspended, as the run callback): GitHub can redeliver once it is unsuspended", async () => {
    const run = await opened(await prAction());
    const event = await closedEvent('acme/infra', run.prNumber, { merged: true, secret: HOOK_SECRET_DEFAULT });
    await api.db.update(orgs).set({ suspendedAt: new Date() }).where(eq(orgs.id, org.id));
    try {
      expectError(await deliverToProject(event), 403, 'org_suspended');
    } finally {
      await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, org.id));
    }
    expect((await getRun(run)).status).toBe('running');
    expect((await deliverToProject(event)).body).toEqual({ ok: true });
    expect((await getRun(run)).status).toBe('succeeded');
  });

  it('takes a form-encoded delivery (payload=…), signed over its bytes, as GitHub sends it for that content type', async () => {
    const run = await opened(await prAction());
    const json = (await closedEvent('acme/infra', run.prNumber, { merged: false, secret: HOOK_SECRET_DEFAULT })).body;
    const form = `payload=${encodeURIComponent(json)}`;
    const signed = await signEvent('pull_request', JSON.parse(json), HOOK_SECRET_DEFAULT);
    const formSigned = { ...signed, body: form, headers: { ...signed.headers, 'content-type': 'application/x-www-form-urlencoded', 'x-hub-signature-256': await sign(HOOK_SECRET_DEFAULT, form) } };
    expect((await deliverToProject(formSigned)).body).toEqual({ ok: true });
    expect((await getRun(run)).status).toBe('failed');
  });

  it('checks its own HMAC: no service token is needed, and one does not stand in for the signature', async () => {
    const run = await opened(await prAction());
    const event = await closedEvent('acme/infra', run.prNumber, { merged: true, secret: 'a-wrong-secret-000' });
    const response = await api.call('POST', `${proj}/webhooks/github`, { rawBody: event.body, headers: event.headers, token: owner.token });
    expectError(response, 401, 'invalid_signature');
    expect((await getRun(run)).status).toBe('running');
  });
});

describe('the App webhook, POST /webhooks/github', () => {
  it('matches a run by its own repository and number when no project links the repository (a static-token run)', async () => {
    const run = await opened(await prAction({ repo: 'acme-solo/app', auth: { token: '{{ secrets.solo-token }}' } }));
    const response = await deliverToApp(await closedEvent('acme-solo/app', run.prNumber, { merged: true, installationId: INSTALLATION }));
    expect(response.body).toEqual({ ok: true, outcome: { runId: run.id, kind: 'run-succeeded', matchedBy: 'run-metadata' } });
    expect((await getRun(run)).status).toBe('succeeded');
  });

  it("a suspended organization's run is not moved: 403 org_suspended, and GitHub's redelivery applies it once the organization is unsuspended", async () => {
    const run = await opened(await prAction());
    const event = await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION });
    await api.db.update(orgs).set({ suspendedAt: new Date() }).where(eq(orgs.id, org.id));
    try {
      expectError(await deliverToApp(event), 403, 'org_suspended');
    } finally {
      await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, org.id));
    }
    expect((await getRun(run)).status).toBe('running');
    expect((await deliverToApp(event)).body).toEqual({ ok: true, outcome: { runId: run.id, kind: 'run-succeeded', matchedBy: 'project-link' } });
  });

  it('400 for a closed pull_request event without its pull request', async () => {
    const payload = pullRequestEvent({ installationId: INSTALLATION, repository: 'acme/infra', pullRequest: { number: 1, merged: true } });
    delete payload.pull_request;
    expectError(await deliverToApp(await signEvent('pull_request', payload)), 400, 'validation_failed');
  });

  it('both webhooks deliver the same merge at once: the run ends once, one notification', async () => {
    const run = await opened(await prAction());
    const pull = github.mergePullRequest('acme/infra', run.prNumber);
    const appEvent = await signEvent('pull_request', pullRequestEvent({ installationId: INSTALLATION, repository: github.repositoryJson('acme/infra'), pullRequest: pull }));
    const repoEvent = await signEvent('pull_request', pullRequestEvent({ repository: github.repositoryJson('acme/infra'), pullRequest: pull }), HOOK_SECRET_DEFAULT);
    const [fromApp, fromRepo] = await Promise.all([deliverToApp(appEvent), deliverToProject(repoEvent)]);
    expect([fromApp.status, fromRepo.status]).toEqual([200, 200]);
    const done = await getRun(run);
    expect(done.status).toBe('succeeded');
    const told = await api.db.select().from(notifications).where(eq(notifications.userId, owner.id));
    expect(told.filter((row) => JSON.stringify(row.data).includes(run.id))).toHaveLength(1);
  });

  it('a run ended first another way (a move through the entity API) is not moved again by the webhook', async () => {
    const run = await opened(await prAction());
    // the pipeline reports first, through the entity API
    await ok(200, call('PUT', `${proj}/envs/default/entities/${run.entity}`, { state: 'failed' }));
    expect((await getRun(run)).status).toBe('failed');
    const response = await deliverToApp(await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION }));
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'no-matching-run' } });
    expect(await stateOf(run)).toBe('failed');
  });
});

describe('secrets stay secret', () => {
  it('no token, webhook secret or key in any response or log line of this suite (the scan on close covers every line)', () => {
    h.expectNoSecretsSoFar();
  });
});
