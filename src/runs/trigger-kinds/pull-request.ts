import { ApiError, type ErrorDetail } from '../../http/errors';
import { recordDispatchAttempt, resolveCodehostCredential, type CodehostCredential, type CredentialType } from '../codehost-credentials';
import { GitHubCallError, GitHubClient, utf8ToBase64 } from '../github-client';
import { interpolateText, InterpolationError, referencedSecrets } from '../interpolation';
import type { RunRow } from '../run-context';
import { Undeliverable, type Attempt, type KindColumns, type ReportSource, type RunReport, type Sent, type TriggerKind, type TriggerTime, type Verdict } from '../trigger-kind';
import { redactCredential } from '../trigger-fields';
import {
  PULL_REQUEST_RETRY,
  PullRequestTrigger,
  type PullRequestValues,
  TriggerValueError,
  asUndeliverable,
  deliveryPart,
  resolveDispatch,
  resolveValues,
} from './pull-request-trigger';

/**
 * The pull-request trigger (DECISIONS §4; SPEC "Outbound webhook trigger",
 * Authentication 13): the service opens a pull request through the GitHub
 * App (or a token the trigger names) and observes its merge or close. It
 * never applies anything itself: the merged change is applied by the
 * repository's own pipeline.
 *
 *   trigger    prepare: every template resolved once (400 unknown_reference),
 *              the repository, branch and file paths checked (400
 *              validation_failed); the run keeps its repository.
 *   delivery   send: the credential (installation token preferred), then,
 *              idempotently so that any attempt may repeat an earlier one:
 *              the repository (its default branch is the base unless `base`
 *              says otherwise) → the branch (422 "Reference already exists"
 *              is the branch an earlier attempt made) → each file committed
 *              through the contents API unless it already holds the content
 *              → the open pull request of the branch, found, or opened.
 *              classify: opened → `running` with prNumber, prUrl, headSha,
 *              repo; 5xx, rate limits and no answer → retried (a rate limit's
 *              reset honoured); 401, 404 and other refusals → failed at once.
 *   completion the pull_request `closed` webhook (src/runs/pull-request-events.ts):
 *              merged → succeeded, closed unmerged → failed; with
 *              `postMergeDispatch` a merge is not the end (complete → null):
 *              the repository_dispatch goes out and the pipeline's callback
 *              ends the run.
 *
 * Every attempt writes the audit event `github-dispatch-attempted`. Choices
 * where SPEC is silent: docs/pull-request-runs.md.
 */


// --- definition --------------------------------------------------------------------

const redact = (trigger: PullRequestTrigger): PullRequestTrigger =>
  trigger.auth ? { ...trigger, auth: { token: redactCredential(trigger.auth.token) } } : trigger;

// --- trigger time ---------------------------------------------------------------------

const unknownReference = (error: InterpolationError) =>
  new ApiError(
    'unknown_reference',
    `the action's trigger refers to what this run does not have: ${error.unknownReferences.join(', ')}`,
    error.unknownReferences.map((reference) => ({
      path: reference,
      message: reference.startsWith('secrets.') ? 'no such secret in this environment' : 'unknown reference',
    })),
  );

/**
 * The dry run: every template of the trigger resolves (auth and the
 * post-merge dispatch included), the repository, branches and paths are
 * well formed, the dispatch payload is one GitHub takes. The credential is
 * decided at each dispatch (SPEC Authentication 13), not here: an
 * installation may be linked before the delivery. The run keeps its
 * repository from now on.
 */
async function prepare(time: TriggerTime, trigger: PullRequestTrigger): Promise<KindColumns> {
  const context = await time.templateContext(referencedSecrets(trigger));
  // every unknown reference at once, then every bad value at once
  const unknown: string[] = [];
  const problems: ErrorDetail[] = [];
  const check = <T>(resolve: () => T): T | undefined => {
    try {
      return resolve();
    } catch (error) {
      if (error instanceof InterpolationError) unknown.push(...error.unknownReferences);
      else if (error instanceof TriggerValueError) problems.push(...error.details);
      else throw error;
      return undefined;
    }
  };
  const values = check(() => resolveValues(trigger, context, time.run.id));
  if (trigger.auth) check(() => interpolateText(trigger.auth!.token, context));
  if (trigger.postMergeDispatch) check(() => resolveDispatch(trigger, context));
  if (unknown.length > 0) throw unknownReference(new InterpolationError([...new Set(unknown)]));
  if (problems.length > 0 || !values) {
    throw new ApiError(
      'validation_failed',
      `the action's trigger cannot open a pull request for this run: ${problems.map((detail) => `${detail.path} ${detail.message}`).join('; ')}`,
      problems,
    );
  }
  return { repo: values.repo.fullName };
}

// --- delivery ---------------------------------------------------------------------------

interface PullRequestSent extends Sent {
  result:
    | { kind: 'opened'; columns: KindColumns }
    | { kind: 'failed'; problem: string; retryable: boolean; retryAfterMs?: number };
}

const credentialFields = (credential: CodehostCredential): { credentialType: CredentialType; installationId?: number } =>
  credential.type === 'installation' ? { credentialType: 'installation', installationId: credential.installationId } : { credentialType: 'token' };

/** How a credential is named in an error: never its value. */
export const credentialLabel = (credential: Pick<CodehostCredential, 'type'> & { installationId?: number }) =>
  credential.type === 'installation' ? `the installation token of installation ${credential.installationId}` : 'trigger.auth.token';

/** A GitHub failure, in words that say what was being done and what to check. */
export function describeFailure(step: string, repo: string, error: GitHubCallError, credential: string): string {
  const said = error.detail ? `${error.api.githubMessage ?? ''}: ${error.detail}` : (error.api.githubMessage ?? '');
  const status = error.status;
  const answered = status === undefined ? 'no answer' : `HTTP ${status}${said ? ` (${said})` : ''}`;
  if (error.outOfTime) return `ran out of time to ${step} in ${repo}; the next attempt carries on where this one stopped`;
  if (status === undefined) return `could not ${step} in ${repo}: GitHub did not answer (a network error, or no answer within the attempt's timeout)`;
  if (status === 401) return `GitHub refused ${credential} with ${answered} while trying to ${step} in ${repo}: the token is invalid, expired or revoked`;
  if (status === 404) return `GitHub answered ${answered} while trying to ${step} in ${repo}: the repository does not exist, or ${credential} cannot see it`;
  if (status === 403 && !error.api.retryable) {
    return `GitHub refused to ${step} in ${repo} (${answered}): ${credential} lacks the permission (contents and pull requests: write; metadata: read)`;
  }
  if (error.api.retryable && (status === 403 || status === 429)) return `GitHub rate-limited the attempt to ${step} in ${repo} (${answered})`;
  return `could not ${step} in ${repo}: GitHub answered ${answered}`;
}

/** A GitHub failure is worth another attempt: 5xx, rate limits, no answer; and a 409 of the contents API (the branch moved under the commit). */
export const retryableFailure = (error: GitHubCallError, step: string) => error.api.retryable || (error.status === 409 && step.startsWith('commit'));

/** How long GitHub asked to wait, from now. */
export const retryAfterOf = (error: GitHubCallError, now: Date): number | undefined =>
  error.api.retryAt ? Math.max(0, error.api.retryAt.getTime() - now.getTime()) : undefined;

/**
 * One attempt: resolve, pick the credential, then walk GitHub's steps. Every
 * step tolerates an earlier attempt having done it (a lost answer, a crash
 * between opening the pull request and recording it), so a retry never opens
 * a second pull request.
 */
async function send(attempt: Attempt<PullRequestTrigger>): Promise<PullRequestSent> {
  const { trigger, run, engine } = attempt;
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const context = await attempt.templateContext([...new Set([...referencedSecrets(deliveryPart(trigger)), ...referencedSecrets(trigger.auth ?? {})])]);
  let values: PullRequestValues;
  try {
    values = resolveValues(trigger, context, run.id);
  } catch (error) {
    asUndeliverable(error);
  }
  const repo = values.repo;
  const audit = (fields: { credentialType: CredentialType; installationId?: number; outcome: string; httpStatus?: number | null; prNumber?: number }) =>
    recordDispatchAttempt(engine.db, run, { purpose: 'pull-request', repo: repo.fullName, attempt: attempt.number, ...fields });

  let resolution;
  try {
    resolution = await resolveCodehostCredential(
      { db: engine.db, config: engine.config, clock: engine.clock, logger: engine.logger },
      { run, repo: repo.fullName, purpose: 'pull-request', hasStaticToken: trigger.auth !== undefined, staticToken: () => interpolateText(trigger.auth!.token, context) },
    );
  } catch (error) {
    asUndeliverable(error, 'trigger.auth.token: ');
  }
  if (!resolution.ok) {
    if (!resolution.mint) {
      await audit({ credentialType: 'none', outcome: 'no-credential' });
      throw new Undeliverable(resolution.problem);
    }
    const retryable = resolution.mint.retryable;
    await audit({ credentialType: 'installation', installationId: resolution.installationId, outcome: retryable ? 'retryable-failure' : 'failed', httpStatus: resolution.mint.status });
    const retryAt = resolution.mint.retryAt;
    return {
      result: { kind: 'failed', problem: resolution.problem, retryable, retryAfterMs: retryAt ? Math.max(0, retryAt.getTime() - engine.clock.now().getTime()) : undefined },
      httpStatus: resolution.mint.status ?? null,
      latencyMs: elapsed(),
    };
  }
  const credential = resolution.credential;
  attempt.conceal(credential.token);

  const client = new GitHubClient({
    config: engine.config,
    logger: engine.logger,
    token: credential.token,
    timeoutMs: engine.attemptTimeoutMs,
    now: () => engine.clock.now(),
    signal: attempt.signal,
    // within the job's lease, so no other worker takes the job while this attempt still talks to GitHub
    deadline: Date.now() + Math.max(engine.attemptTimeoutMs, engine.leaseMs - 5000),
  });
  let step = 'read the repository';
  try {
    const repository = await client.getRepository(repo.owner, repo.name);
    const [owner, name] = repository.fullName.split('/') as [string, string];
    const base = values.base ?? repository.defaultBranch;
    if (base === values.branch) throw new Undeliverable(`the branch "${values.branch}" is the base branch of ${repository.fullName}: name another (trigger.branch)`);
    step = `read the base branch "${base}"`;
    const baseSha = await client.branchSha(owner, name, base);
    if (!baseSha) {
      await audit({ ...credentialFields(credential), outcome: 'failed', httpStatus: 404 });
      return {
        result: { kind: 'failed', problem: `the base branch "${base}" does not exist in ${repository.fullName}`, retryable: false },
        httpStatus: 404,
        latencyMs: elapsed(),
      };
    }
    step = `create the branch "${values.branch}"`;
    await client.createBranch(owner, name, values.branch, baseSha);
    for (const file of values.files) {
      step = `commit ${file.path} to "${values.branch}"`;
      const base64 = utf8ToBase64(file.content);
      const existing = await client.file(owner, name, file.path, values.branch);
      // already committed by an earlier attempt (or already so): no empty commit
      if (existing?.base64 === base64) continue;
      const message = values.files.length === 1 ? values.title : `${values.title} (${file.path})`;
      await client.putFile(owner, name, file.path, { branch: values.branch, message, base64, sha: existing?.sha });
    }
    step = 'open the pull request';
    let pull = await client.openPullRequest(owner, name, repository.ownerLogin, values.branch, base);
    let outcome = 'existing-pull-request';
    if (!pull) {
      try {
        pull = await client.createPullRequest(owner, name, { title: values.title, body: values.body, head: values.branch, base });
        outcome = 'opened';
      } catch (error) {
        // opened meanwhile (a concurrent attempt, or an answer that was lost): it is this run's
        if (!(error instanceof GitHubCallError && error.status === 422 && /already exists/i.test(error.detail ?? ''))) throw error;
        pull = await client.openPullRequest(owner, name, repository.ownerLogin, values.branch, base);
        if (!pull) throw error;
      }
    }
    await audit({ ...credentialFields(credential), outcome, httpStatus: client.lastStatus, prNumber: pull.number });
    engine.logger.info('pull request opened for run', { runId: run.id, repo: repository.fullName, prNumber: pull.number, credentialType: credential.type, outcome });
    return {
      result: { kind: 'opened', columns: { repo: repository.fullName.toLowerCase(), prNumber: pull.number, prUrl: pull.url, headSha: pull.headSha } },
      httpStatus: client.lastStatus,
      latencyMs: elapsed(),
    };
  } catch (error) {
    // the host is stopping: the engine hands the attempt back unrecorded
    if (attempt.signal?.aborted) throw error;
    if (error instanceof Undeliverable) {
      await audit({ ...credentialFields(credential), outcome: 'failed', httpStatus: client.lastStatus });
      throw error;
    }
    if (!(error instanceof GitHubCallError)) throw error;
    const retryable = retryableFailure(error, step);
    await audit({ ...credentialFields(credential), outcome: retryable ? 'retryable-failure' : 'failed', httpStatus: error.status ?? null });
    return {
      result: {
        kind: 'failed',
        problem: describeFailure(step, repo.fullName, error, credentialLabel(credential)),
        retryable,
        retryAfterMs: retryAfterOf(error, engine.clock.now()),
      },
      httpStatus: error.status ?? null,
      latencyMs: elapsed(),
    };
  }
}

function classify(sent: PullRequestSent): Verdict {
  const { result } = sent;
  if (result.kind === 'opened') return { kind: 'delivered', columns: result.columns };
  if (result.retryable) return { kind: 'retryable', problem: result.problem, retryAfterMs: result.retryAfterMs };
  return { kind: 'rejected', problem: result.problem };
}

/**
 * A merge reported by the pull_request event is the end of the run, unless
 * the trigger asks for a post-merge dispatch: then the pipeline it starts
 * ends the run through the callback. Any other report ends it as reported.
 */
function complete(run: RunRow, report: RunReport, source: ReportSource): RunReport | null {
  const trigger = run.trigger as PullRequestTrigger;
  if (source === 'kind-event' && report.status === 'succeeded' && trigger.postMergeDispatch) return null;
  return report;
}

export const pullRequestTriggerKind: TriggerKind<PullRequestTrigger, PullRequestSent> = {
  type: 'pull-request',
  schema: PullRequestTrigger,
  redact,
  prepare,
  send,
  classify,
  retryPolicy: () => PULL_REQUEST_RETRY,
  complete,
};
