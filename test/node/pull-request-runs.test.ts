import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryJobs, notifications } from '../../src/db/schema';
import { expectError, uniqueSlug } from '../support/fixtures';
import { pullRequestEvent, signEvent } from '../support/github-events';
import { faults, type GitHubServer } from '../support/github-server';
import { createTestApi, TEST_API_BASE_URL, type TestApi } from '../support/node-app';
import { codehostEnv } from '../support/github-server';
import {
  createPullRequestHarness,
  HOOK_SECRET_DEFAULT,
  INSTALLATION,
  OUTSIDE_TOKEN,
  SOLO_TOKEN,
  UNKNOWN_TOKEN,
  type PullRequestHarness,
} from '../support/pull-request-harness';

/**
 * Pull-request runs end to end (issue 12, Deliver 5 and 6; SPEC "ActionRun
 * status", Authentication 13, "Audit events"; DECISIONS §4, §8), against the
 * local GitHub server (test/support/github-server.ts) speaking GitHub's REST
 * protocol, with GitHub's own example events signed as GitHub signs them:
 * trigger → the pull request opened (its number and URL on the run) → a
 * signed `closed` webhook → the run ended and its entity moved; the four
 * credential cases; retries that never open a second pull request; the
 * post-merge repository_dispatch and its callback. Nothing of the service is
 * mocked; time is a manual clock (rate limits), retries do not wait (jitter
 * 0). The world: test/support/pull-request-harness.ts. The two webhook
 * endpoints have their own suite: github-webhook-project.test.ts.
 */

let h: PullRequestHarness;
let api: TestApi;
let github: GitHubServer;
let keys: PullRequestHarness['keys'];
let proj: string;
let org: PullRequestHarness['org'];
let project: PullRequestHarness['project'];
let owner: PullRequestHarness['owner'];
let clock: PullRequestHarness['clock'];
let call: PullRequestHarness['call'];
let ok: PullRequestHarness['ok'];
let prAction: PullRequestHarness['prAction'];
let trigger: PullRequestHarness['trigger'];
let getRun: PullRequestHarness['getRun'];
let stateOf: PullRequestHarness['stateOf'];
let opened: PullRequestHarness['opened'];
let closedEvent: PullRequestHarness['closedEvent'];
let deliverToApp: PullRequestHarness['deliverToApp'];
let deliverToProject: PullRequestHarness['deliverToProject'];
let auditsOf: PullRequestHarness['auditsOf'];
let envId: PullRequestHarness['envId'];
let branchOf: PullRequestHarness['branchOf'];
let pullOf: PullRequestHarness['pullsOf'];

beforeAll(async () => {
  h = await createPullRequestHarness();
  ({ api, github, keys, proj, org, project, owner, clock, call, ok, prAction, trigger, getRun, stateOf, opened, closedEvent, deliverToApp, deliverToProject, auditsOf, envId, branchOf } = h);
  pullOf = h.pullsOf;
});
afterAll(() => h?.close());

/** What a person does on GitHub with a token: a branch with one file, and a pull request from it. */
async function openPullRequestOnGitHub(repo: string, branch: string, file: { path: string; content: string }, title: string): Promise<number> {
  const rest = async (method: string, path: string, body: unknown) => {
    const response = await fetch(`${github.url}${path}`, {
      method,
      headers: { authorization: `token ${OUTSIDE_TOKEN}`, 'content-type': 'application/json', accept: 'application/vnd.github+json' },
      body: JSON.stringify(body),
    });
    expect(response.status, `${method} ${path}`).toBeLessThan(300);
    return response.json() as Promise<any>;
  };
  await rest('POST', `/repos/${repo}/git/refs`, { ref: `refs/heads/${branch}`, sha: github.branchSha(repo, 'main') });
  await rest('PUT', `/repos/${repo}/contents/${file.path}`, { message: title, content: Buffer.from(file.content).toString('base64'), branch });
  return (await rest('POST', `/repos/${repo}/pulls`, { title, head: branch, base: 'main' })).number;
}

// --- the judged flow --------------------------------------------------------------------

describe('a pull-request action, as a new user tries it', () => {
  it('opens the pull request when delivered (its number and URL on the run), and a signed merged webhook ends the run succeeded with the entity in onSuccess', async () => {
    const action = await prAction();
    const run = await trigger(action);

    await api.jobs.drain();
    const running = await getRun(run);
    const [pull, ...others] = pullOf('acme/infra', run.id);
    expect(others).toEqual([]);
    expect(running).toMatchObject({
      status: 'running',
      error: null,
      repo: 'acme/infra',
      prNumber: pull!.number,
      prUrl: `https://github.com/acme/infra/pull/${pull!.number}`,
      headSha: github.branchSha('acme/infra', branchOf(run.id)),
      attempts: [{ attempt: 1, outcome: 'delivered', httpStatus: 201, error: null }],
    });
    expect(running.startedAt).not.toBeNull();
    expect(pull).toMatchObject({ title: `Resize ${run.entity} to large`, body: `Opened by run ${run.id}`, base: 'main', state: 'open' });
    expect(github.fileContent('acme/infra', branchOf(run.id), `envs/${run.entity}.tfvars`)).toBe('size = "large"\n');
    // the list shows the pull request too
    const list = await ok(200, call('GET', `${proj}/envs/default/action-runs?action=${action}`));
    expect(list).toEqual([expect.objectContaining({ id: run.id, repo: 'acme/infra', prNumber: pull!.number, prUrl: running.prUrl })]);

    const merged = await deliverToApp(await closedEvent('acme/infra', pull!.number, { merged: true, installationId: INSTALLATION }));
    expect(merged.status, JSON.stringify(merged.body)).toBe(200);
    expect(merged.body).toEqual({ ok: true, outcome: { runId: run.id, kind: 'run-succeeded', matchedBy: 'project-link' } });
    const done = await getRun(run);
    expect(done).toMatchObject({ status: 'succeeded', error: null, prNumber: pull!.number, output: { pullRequest: { repo: 'acme/infra', number: pull!.number, merged: true } } });
    expect(done.completedAt).not.toBeNull();
    expect(await stateOf(run)).toBe('running');
    // the user who triggered it is told
    const told = await api.db.select().from(notifications).where(eq(notifications.userId, owner.id));
    expect(told.filter((row) => JSON.stringify(row.data).includes(run.id))).toHaveLength(1);

    // GitHub delivers the event again: nothing left to end
    const again = await deliverToApp(await signEvent('pull_request', pullRequestEvent({ installationId: INSTALLATION, repository: github.repositoryJson('acme/infra'), pullRequest: github.pullRequestJson('acme/infra', pull!.number) })));
    expect(again.body).toEqual({ ok: true, outcome: { kind: 'no-matching-run' } });
  });

  it('a close without merge ends the run failed, the entity in onFailure', async () => {
    const run = await opened(await prAction());
    const closed = await deliverToApp(await closedEvent('acme/infra', run.prNumber, { merged: false, installationId: INSTALLATION }));
    expect(closed.body).toEqual({ ok: true, outcome: { runId: run.id, kind: 'run-failed', matchedBy: 'project-link' } });
    const failed = await getRun(run);
    expect(failed).toMatchObject({
      status: 'failed',
      error: `the pull request acme/infra#${run.prNumber} was closed without being merged`,
      output: { pullRequest: { merged: false } },
    });
    expect(await stateOf(run)).toBe('failed');
  });
});


// --- delivery ----------------------------------------------------------------------------

describe('delivery', () => {
  it('audits every dispatch (github-dispatch-attempted: credential type, repository, installation, outcome), never a token', async () => {
    const run = await opened(await prAction());
    const audits = await auditsOf(run.id);
    expect(audits).toEqual([
      expect.objectContaining({
        credential_type: 'installation',
        repo: 'acme/infra',
        installation_id: INSTALLATION,
        outcome: 'opened',
        dispatch: 'pull-request',
        pr_number: run.prNumber,
        attempt: 1,
      }),
    ]);
    const text = JSON.stringify(audits);
    for (const issued of github.issuedTokens) expect(text).not.toContain(issued.token);
  });

  it('takes `base` and `branch` from the trigger, interpolated', async () => {
    const action = await prAction({ base: 'main', branch: 'resize/{{ entity.name }}-{{ parameters.size }}' });
    const run = await opened(action);
    const branch = `resize/${run.entity}-large`;
    expect(pullOf('acme/infra', run.id, branch)).toHaveLength(1);
    expect(github.fileContent('acme/infra', branch, `envs/${run.entity}.tfvars`)).toBe('size = "large"\n');
  });

  it('retries a 502 on opening the pull request, and opens exactly one', async () => {
    const run = await trigger(await prAction({ files: [{ path: 'a.txt', content: 'A' }, { path: 'dir/b.txt', content: 'B {{ entity.name }}' }] }));
    github.fail('create_pull', faults.serverError(502));
    const refsBefore = github.requestsTo('create_ref').length;
    const putsBefore = github.requestsTo('put_contents').length;
    await api.jobs.drain();
    const body = await getRun(run);
    expect(body.status).toBe('running');
    expect(body.attempts.map((a: any) => [a.attempt, a.httpStatus, a.outcome])).toEqual([
      [1, 502, 'retry'],
      [2, 201, 'delivered'],
    ]);
    expect(body.attempts[0].error).toBe('could not open the pull request in acme/infra: GitHub answered HTTP 502');
    expect(pullOf('acme/infra', run.id)).toHaveLength(1);
    // the second attempt found its branch (422 Reference already exists) and its files, and committed nothing again
    expect(github.requestsTo('create_ref').slice(refsBefore).map((r) => r.status)).toEqual([201, 422]);
    expect(github.requestsTo('put_contents').length - putsBefore).toBe(2);
    expect(github.fileContent('acme/infra', branchOf(run.id), 'dir/b.txt')).toBe(`B ${run.entity}`);
    expect((await auditsOf(run.id)).map((audit) => audit.outcome)).toEqual(['retryable-failure', 'opened']);
  });

  it('a rate limit (403, x-ratelimit-remaining 0) is retried no sooner than x-ratelimit-reset', async () => {
    const run = await trigger(await prAction());
    github.fail('create_ref', faults.rateLimited(120));
    await api.jobs.drain();
    const waiting = await getRun(run);
    expect(waiting).toMatchObject({ status: 'pending', attempts: [{ attempt: 1, httpStatus: 403, outcome: 'retry' }] });
    expect(waiting.attempts[0].error).toContain('GitHub rate-limited the attempt to create the branch');
    const [job] = await api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, run.id));
    // the reset is GitHub's clock (real time) + 120 s
    expect(job!.runAt.getTime()).toBeGreaterThanOrEqual(Date.now() + 115_000);
    // nothing is due before the reset
    clock.set(new Date(Math.max(clock.now().getTime(), Date.now() + 60_000)));
    await api.jobs.drain();
    expect((await getRun(run)).status).toBe('pending');
    clock.set(new Date(Date.now() + 125_000));
    await api.jobs.drain();
    const running = await getRun(run);
    expect(running.status).toBe('running');
    expect(running.attempts.map((a: any) => a.outcome)).toEqual(['retry', 'delivered']);
    expect(pullOf('acme/infra', run.id)).toHaveLength(1);
  });

  it('finds the branch and the pull request an earlier attempt made (a lost answer): no second pull request, no empty commit', async () => {
    const action = await prAction({ branch: 'resize/{{ entity.name }}' });
    const entity = uniqueSlug('vm');
    // what an attempt that died before recording its outcome left on GitHub
    const branch = `resize/${entity}`;
    const number = await openPullRequestOnGitHub('acme/infra', branch, { path: `envs/${entity}.tfvars`, content: 'size = "large"\n' }, `Resize ${entity} to large`);
    const commitsBefore = github.requestsTo('put_contents').length;
    await ok(201, call('POST', `${proj}/envs/default/entities`, { kind: 'Entity', entityType: 'vm', name: entity }));
    const run = await ok(202, call('POST', `${proj}/envs/default/entities/${entity}/actions/${action}`, { parameters: { size: 'large' } }));
    await api.jobs.drain();
    const body = await getRun({ id: run.id, envName: 'default' });
    expect(body).toMatchObject({ status: 'running', prNumber: number });
    expect(github.pulls('acme/infra').filter((pull) => pull.head === branch)).toHaveLength(1);
    expect(github.requestsTo('put_contents').length).toBe(commitsBefore);
    expect((await auditsOf(run.id)).map((audit) => audit.outcome)).toEqual(['existing-pull-request']);
  });

  it('404 from GitHub fails the run at once, with a [delivery] error that says what to check', async () => {
    const run = await trigger(await prAction({ repo: 'acme-solo/missing', auth: { token: '{{ secrets.solo-token }}' } }));
    await api.jobs.drain();
    const failed = await getRun(run);
    expect(failed.status).toBe('failed');
    expect(failed.attempts).toHaveLength(1);
    expect(failed.error).toBe(
      '[delivery] GitHub answered HTTP 404 (Not Found) while trying to read the repository in acme-solo/missing: the repository does not exist, or trigger.auth.token cannot see it (not retried)',
    );
    expect(await stateOf(run)).toBe('provisioning');
  });

  it('401 from GitHub fails the run at once', async () => {
    const run = await trigger(await prAction({ repo: 'acme-solo/app', auth: { token: UNKNOWN_TOKEN } }));
    await api.jobs.drain();
    const failed = await getRun(run);
    expect(failed).toMatchObject({ status: 'failed', attempts: [{ attempt: 1, httpStatus: 401, outcome: 'failed' }] });
    expect(failed.error).toBe(
      '[delivery] GitHub refused trigger.auth.token with HTTP 401 (Bad credentials) while trying to read the repository in acme-solo/app: the token is invalid, expired or revoked (not retried)',
    );
    expect(JSON.stringify(failed)).not.toContain(UNKNOWN_TOKEN);
  });

  it('a base branch GitHub does not have fails the run at once', async () => {
    const run = await trigger(await prAction({ base: 'release/{{ parameters.size }}' }));
    await api.jobs.drain();
    expect(await getRun(run)).toMatchObject({ status: 'failed', error: '[delivery] the base branch "release/large" does not exist in acme/infra (not retried)' });
  });

  it('refuses at trigger time what could not open a pull request: unknown references, a repository, branch or path that is not one', async () => {
    const entity = uniqueSlug('vm');
    await ok(201, call('POST', `${proj}/envs/default/entities`, { kind: 'Entity', entityType: 'vm', name: entity }));
    const fire = async (fields: Record<string, unknown>) => call('POST', `${proj}/envs/default/entities/${entity}/actions/${await prAction(fields)}`, {});

    const unknown = await fire({ title: '{{ parameters.nope }}', auth: { token: '{{ secrets.missing-token }}' } });
    expectError(unknown, 400, 'unknown_reference');
    expect(unknown.body.details.map((d: { path: string }) => d.path).sort()).toEqual(['parameters.nope', 'secrets.missing-token']);

    const dispatchRef = await fire({ postMergeDispatch: { eventType: 'deploy', payload: { token: '{{ secrets.nope }}' } } });
    expectError(dispatchRef, 400, 'unknown_reference');

    const badRepo = await fire({ repo: '{{ entity.name }}' });
    expectError(badRepo, 400, 'validation_failed');
    expect(badRepo.body.details).toEqual([{ path: 'trigger.repo', message: `must be owner/name (got "${entity}")` }]);

    const badBranch = await fire({ branch: 'has space..{{ entity.name }}' });
    expectError(badBranch, 400, 'validation_failed');
    expect(badBranch.body.details[0].path).toBe('trigger.branch');

    const badPath = await fire({ files: [{ path: '../{{ entity.name }}', content: 'x' }, { path: 'ok.txt', content: 'x' }, { path: 'ok.txt', content: 'y' }] });
    expectError(badPath, 400, 'validation_failed');
    expect(badPath.body.details.map((d: { path: string }) => d.path)).toEqual(['trigger.files.0.path', 'trigger.files.2.path']);

    const badPayload = await fire({ postMergeDispatch: { eventType: 'deploy', payload: ['not', 'an', 'object'] } });
    expectError(badPayload, 400, 'validation_failed');
    // nothing was written for any of them
    expect(await ok(200, call('GET', `${proj}/envs/default/action-runs?entity=${entity}`))).toEqual([]);
  });
});

// --- credentials -------------------------------------------------------------------------

describe('credentials (SPEC Authentication 13)', () => {
  it('1. an installation grants the repository and no auth.token: an installation token', async () => {
    const before = github.requestsTo('create_pull').length;
    await opened(await prAction());
    const [create] = github.requestsTo('create_pull').slice(before);
    expect(create).toMatchObject({ auth: 'installation', installationId: INSTALLATION, status: 201 });
  });

  it('2. no installation and auth.token (a secret reference): that token', async () => {
    const before = github.requestsTo('create_pull').length;
    const run = await opened(await prAction({ repo: 'acme-solo/app', auth: { token: '{{ secrets.solo-token }}' } }));
    expect(github.requestsTo('create_pull').slice(before)).toEqual([expect.objectContaining({ auth: 'token', status: 201 })]);
    expect(run.run.repo).toBe('acme-solo/app');
    const [audit] = await auditsOf(run.id);
    expect(audit).toMatchObject({ credential_type: 'token', repo: 'acme-solo/app', outcome: 'opened' });
    expect(audit).not.toHaveProperty('installation_id');
  });

  it('2. a literal auth.token is used as is, and shown redacted', async () => {
    const action = await prAction({ repo: 'acme-solo/app', auth: { token: SOLO_TOKEN } });
    expect((await ok(200, call('GET', `${proj}/actions/${action}`))).trigger.auth).toEqual({ token: '[redacted]' });
    const before = github.requestsTo('create_pull').length;
    await opened(action);
    expect(github.requestsTo('create_pull').slice(before)).toEqual([expect.objectContaining({ auth: 'token', status: 201 })]);
  });

  it('3. both: the installation token wins, and a structured warning without token values is logged', async () => {
    const before = github.requestsTo('create_pull').length;
    const logsBefore = api.logs.length;
    const run = await opened(await prAction({ auth: { token: '{{ secrets.solo-token }}' } }));
    expect(github.requestsTo('create_pull').slice(before)).toEqual([expect.objectContaining({ auth: 'installation', installationId: INSTALLATION })]);
    const warnings = api.logs
      .slice(logsBefore)
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => String(line.msg ?? line.message).includes('the installation token is used'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 'warn', runId: run.id, repo: 'acme/infra', installationId: INSTALLATION, credentialType: 'installation', ignored: 'trigger.auth.token' });
    const text = JSON.stringify(warnings[0]);
    expect(text).not.toContain(SOLO_TOKEN);
    for (const issued of github.issuedTokens) expect(text).not.toContain(issued.token);
    expect((await auditsOf(run.id))[0]).toMatchObject({ credential_type: 'installation', installation_id: INSTALLATION });
  });

  it('4. neither: the run fails with a message naming both remedies, and nothing reaches GitHub', async () => {
    const before = github.requests.length;
    const run = await trigger(await prAction({ repo: 'acme-solo/app' }));
    await api.jobs.drain();
    const failed = await getRun(run);
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe(
      '[delivery] no GitHub credential for acme-solo/app: link the repository through the GitHub App (install the App on it for this organization, then PUT /{org}/{project}/github/repos/acme-solo/app), or supply trigger.auth.token (a {{ secrets.<name> }} reference to a token with contents and pull requests write access)',
    );
    expect(github.requests.slice(before)).toEqual([]);
    expect(await auditsOf(run.id)).toEqual([expect.objectContaining({ credential_type: 'none', repo: 'acme-solo/app', outcome: 'no-credential' })]);
  });

  it('an installation no longer active is not used: a suspended one leaves case 4 (or the token)', async () => {
    github.addInstallation({ id: 102, account: 'acme-paused', repositories: ['acme-paused/app'] });
    await ok(200, call('POST', '/github/installations/recover', { orgId: org.slug, installationId: 102 }));
    github.suspendInstallation(102);
    const suspended = await signEvent('installation', { action: 'suspend', installation: { id: 102, account: { login: 'acme-paused' } } });
    expect((await deliverToApp(suspended)).status).toBe(200);
    const run = await trigger(await prAction({ repo: 'acme-paused/app' }));
    await api.jobs.drain();
    expect((await getRun(run)).error).toMatch(/^\[delivery\] no GitHub credential for acme-paused\/app/);
  });
});

// --- post-merge dispatch -----------------------------------------------------------------

describe('post-merge dispatch', () => {
  const dispatching = (fields: Record<string, unknown> = {}) =>
    prAction({
      postMergeDispatch: {
        eventType: 'apply-{{ entity.name }}',
        repo: 'acme/pipelines',
        payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}', entity: '{{ entity.name }}', size: '{{ parameters.size }}' },
      },
      ...fields,
    });

  it('after the merge, sends repository_dispatch with the run\'s callback; the run stays running until the pipeline calls back', async () => {
    const run = await opened(await dispatching());
    const event = await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION });
    const response = await deliverToApp(event);
    expect(response.body).toEqual({
      ok: true,
      outcome: { runId: run.id, kind: 'post-merge-dispatch-sent', repo: 'acme/pipelines', eventType: `apply-${run.entity}`, matchedBy: 'project-link' },
    });
    const [dispatch, ...more] = github.dispatches('acme/pipelines').filter((d) => d.event_type === `apply-${run.entity}`);
    expect(more).toEqual([]);
    const payload = dispatch!.client_payload as { callbackUrl: string; callbackToken: string; entity: string; size: string };
    expect(payload).toMatchObject({ entity: run.entity, size: 'large' });
    expect(payload.callbackUrl).toBe(`${TEST_API_BASE_URL}/${org.id}/${project.id}/envs/${(await envId('default'))}/action-runs/${run.id}/callback`);
    expect(github.requestsTo('dispatches').at(-1)).toMatchObject({ auth: 'installation', installationId: INSTALLATION, status: 204 });

    const waiting = await getRun(run);
    expect(waiting).toMatchObject({ status: 'running', output: { pullRequest: { merged: true }, postMergeDispatch: { state: 'sent', repo: 'acme/pipelines' } } });
    expect(await stateOf(run)).toBe('provisioning');
    expect((await auditsOf(run.id)).at(-1)).toMatchObject({ dispatch: 'repository-dispatch', credential_type: 'installation', repo: 'acme/pipelines', installation_id: INSTALLATION, outcome: 'dispatched' });

    // the same event again, and through the project webhook: the dispatch is not sent twice
    expect((await deliverToApp(event)).body.outcome).toMatchObject({ kind: 'post-merge-dispatch-already-sent' });
    const repoEvent = await signEvent('pull_request', JSON.parse(event.body), HOOK_SECRET_DEFAULT);
    expect((await deliverToProject(repoEvent)).body).toEqual({ ok: true });
    expect(github.dispatches('acme/pipelines').filter((d) => d.event_type === `apply-${run.entity}`)).toHaveLength(1);

    // the pipeline calls back
    const done = await ok(200, call('POST', new URL(payload.callbackUrl).pathname, { status: 'succeeded', output: { applied: true } }, payload.callbackToken));
    expect(done).toMatchObject({ status: 'succeeded', output: { applied: true } });
    expect(await stateOf(run)).toBe('running');
  });

  it('the pipeline reports a failure: the run fails and the entity moves to onFailure', async () => {
    const run = await opened(await dispatching());
    await deliverToApp(await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION }));
    const payload = github.dispatches('acme/pipelines').find((d) => d.event_type === `apply-${run.entity}`)!.client_payload as { callbackUrl: string; callbackToken: string };
    const done = await ok(200, call('POST', new URL(payload.callbackUrl).pathname, { status: 'failed', error: 'terraform apply failed' }, payload.callbackToken));
    expect(done).toMatchObject({ status: 'failed', error: 'terraform apply failed' });
    expect(await stateOf(run)).toBe('failed');
  });

  it('a close without merge ends the run failed: nothing is dispatched', async () => {
    const run = await opened(await dispatching());
    await deliverToApp(await closedEvent('acme/infra', run.prNumber, { merged: false, installationId: INSTALLATION }));
    expect((await getRun(run)).status).toBe('failed');
    expect(github.dispatches('acme/pipelines').filter((d) => d.event_type === `apply-${run.entity}`)).toEqual([]);
  });

  it('without a payload, the pipeline gets the run id and its callback', async () => {
    const run = await opened(await prAction({ postMergeDispatch: { eventType: 'apply' } }));
    await deliverToApp(await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION }));
    const dispatch = github.dispatches('acme/infra').find((d) => (d.client_payload as { runId?: string }).runId === run.id);
    expect(dispatch).toMatchObject({ event_type: 'apply', client_payload: { runId: run.id, callbackUrl: expect.stringContaining(`/action-runs/${run.id}/callback`), callbackToken: expect.any(String) } });
  });

  it('a dispatch GitHub cannot take now (502): the webhook answers 500, the run stays running, a redelivery sends it', async () => {
    const run = await opened(await dispatching());
    const event = await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION });
    github.fail('dispatches', faults.serverError(502));
    const failed = await deliverToApp(event);
    expectError(failed, 500, 'internal');
    expect(failed.body.error).toContain('redeliver this event');
    expect(await getRun(run)).toMatchObject({ status: 'running', output: { postMergeDispatch: { state: 'retryable-failure' } } });
    const redelivered = await deliverToApp(event);
    expect(redelivered.body.outcome).toMatchObject({ kind: 'post-merge-dispatch-sent' });
    expect(github.dispatches('acme/pipelines').filter((d) => d.event_type === `apply-${run.entity}`)).toHaveLength(1);
    expect((await auditsOf(run.id)).map((audit) => `${audit.dispatch}:${audit.outcome}`)).toEqual(['pull-request:opened', 'repository-dispatch:retryable-failure', 'repository-dispatch:dispatched']);
  });

  it('a dispatch GitHub refuses for good (404): the run fails with a [delivery] error', async () => {
    const run = await opened(await dispatching({ postMergeDispatch: { eventType: 'apply', repo: 'acme/not-granted' } }));
    const response = await deliverToApp(await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION }));
    expect(response.body.outcome).toMatchObject({ runId: run.id, kind: 'post-merge-dispatch-failed' });
    const failed = await getRun(run);
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe(
      '[delivery] post-merge repository_dispatch cannot be sent: no GitHub credential for acme/not-granted: link the repository through the GitHub App (install the App on it for this organization, then PUT /{org}/{project}/github/repos/acme/not-granted), or supply trigger.auth.token (a {{ secrets.<name> }} reference to a token with contents and pull requests write access)',
    );
    // the merge is in; the pipeline never started: the entity stays where it was
    expect(await stateOf(run)).toBe('provisioning');

    const token = await opened(await dispatching({ postMergeDispatch: { eventType: 'apply', repo: 'acme-solo/app' }, auth: { token: UNKNOWN_TOKEN } }));
    await deliverToApp(await closedEvent('acme/infra', token.prNumber, { merged: true, installationId: INSTALLATION }));
    expect((await getRun(token)).error).toBe(
      '[delivery] post-merge repository_dispatch: GitHub refused trigger.auth.token with HTTP 401 (Bad credentials) while trying to send the repository_dispatch "apply" in acme-solo/app: the token is invalid, expired or revoked (not retried)',
    );
  });

  it('without API_BASE_URL the dispatch is refused: the run fails with an error naming API_BASE_URL, nothing is sent', async () => {
    const run = await opened(await dispatching());
    // the same database served by an instance without API_BASE_URL
    const bare = await createTestApi({ clock, database: api.testDatabase, env: { ...codehostEnv(github, keys), API_BASE_URL: '' } });
    try {
      expect(bare.platform.config.apiBaseUrl).toBeUndefined();
      const event = await closedEvent('acme/infra', run.prNumber, { merged: true, installationId: INSTALLATION });
      const response = await bare.call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
      expect(response.body.outcome).toMatchObject({ runId: run.id, kind: 'post-merge-dispatch-failed' });
    } finally {
      await bare.close();
    }
    const failed = await getRun(run);
    expect(failed).toMatchObject({
      status: 'failed',
      error:
        '[delivery] post-merge repository_dispatch refused: API_BASE_URL is not set, so the pipeline would get no callback URL it could reach; set API_BASE_URL to the public URL of this API',
    });
    expect(github.dispatches('acme/pipelines').filter((d) => d.event_type === `apply-${run.entity}`)).toEqual([]);
    expect((await auditsOf(run.id)).at(-1)).toMatchObject({ dispatch: 'repository-dispatch', credential_type: 'none', outcome: 'refused-no-api-base-url' });
  });
});


describe('secrets stay secret', () => {
  it('no token, webhook secret or key in any response or log line of this suite (the scan on close covers every line)', () => {
    h.expectNoSecretsSoFar();
    expect(github.issuedTokens.length).toBeGreaterThan(0);
  });
});
