import { z } from '@hono/zod-openapi';
import { ApiError, type ErrorDetail } from '../../http/errors';
import { recordDispatchAttempt, resolveCodehostCredential, type CodehostCredential, type CredentialType } from '../codehost-credentials';
import { GitHubCallError, GitHubClient, utf8ToBase64 } from '../github-client';
import { interpolate, interpolateText, InterpolationError, referencedSecrets, type InterpolationContext } from '../interpolation';
import type { RetryPolicy } from '../retry';
import type { RunRow } from '../run-context';
import { Undeliverable, type Attempt, type KindColumns, type ReportSource, type RunReport, type Sent, type TriggerKind, type TriggerTime, type Verdict } from '../trigger-kind';
import { Credential, redactCredential, SecretReference, TemplateString } from '../trigger-fields';

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

/** owner/name, or a template that yields it when the run is triggered. */
const RepoName = z
  .string()
  .min(1)
  .max(200)
  .refine((repo) => /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/.test(repo) || repo.includes('{{'), {
    message: 'must be owner/name',
  })
  .openapi({ example: 'acme/infra' });

export const PullRequestTrigger = z
  .strictObject({
    type: z.literal('pull-request'),
    repo: RepoName,
    base: TemplateString.min(1).optional().openapi({ description: "Defaults to the repository's default branch" }),
    branch: TemplateString.min(1).optional(),
    title: TemplateString.min(1),
    body: TemplateString.optional(),
    files: z
      .array(z.strictObject({ path: TemplateString.min(1), content: z.string().max(1_000_000) }))
      .min(1)
      .max(100),
    webhookSecret: SecretReference.optional(),
    auth: z.strictObject({ token: Credential }).optional(),
    postMergeDispatch: z
      .strictObject({ eventType: TemplateString.min(1), repo: RepoName.optional(), payload: z.unknown().optional() })
      .optional(),
  })
  .openapi('ActionPullRequestTrigger');
export type PullRequestTrigger = z.output<typeof PullRequestTrigger>;

/**
 * Five attempts, the first included, 2 s apart and doubling (with jitter),
 * never sooner than GitHub's `retry-after` or rate-limit reset: opening a
 * pull request is a handful of calls, and a short GitHub outage should not
 * fail the run. The trigger has no `retry` of its own (DECISIONS §4).
 */
export const PULL_REQUEST_RETRY: RetryPolicy = { maxAttempts: 5, backoff: 'exponential', initialDelayMs: 2000 };

/** GitHub's limit on `event_type` and on the top-level properties of `client_payload`. */
const EVENT_TYPE_MAX = 100;
const CLIENT_PAYLOAD_MAX_PROPERTIES = 10;

/** The branch a run's pull request comes from when the trigger names none: one per run, so every attempt finds its own. */
export const defaultBranch = (runId: string) => `cellplane/run-${runId}`;

// --- the trigger's values ---------------------------------------------------------

/** A value of the trigger that cannot be sent (a bad repository, branch or path), found when it is interpolated. */
class TriggerValueError extends Error {
  constructor(readonly details: ErrorDetail[]) {
    super(details.map((detail) => `${detail.path} ${detail.message}`).join('; '));
    this.name = 'TriggerValueError';
  }
}

export interface RepoRef {
  owner: string;
  name: string;
  /** `owner/name`, lowercased: how the run keeps it (GitHub compares names case-insensitively). */
  fullName: string;
}

const LOGIN = /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/;
const REPOSITORY = /^[A-Za-z0-9._-]{1,100}$/;

/** `owner/name` by GitHub's rules, or the reason it is not. */
export function parseRepo(text: string): RepoRef | string {
  const [owner, name, ...rest] = text.trim().split('/');
  if (owner === undefined || name === undefined || rest.length > 0) return `must be owner/name (got "${text.slice(0, 200)}")`;
  if (!LOGIN.test(owner)) return `owner "${owner.slice(0, 100)}" is not a GitHub login (letters, digits and single hyphens, at most 39)`;
  if (!REPOSITORY.test(name) || name === '.' || name === '..') return `name "${name.slice(0, 100)}" is not a GitHub repository name (letters, digits, . _ -, at most 100)`;
  return { owner, name, fullName: `${owner}/${name}`.toLowerCase() };
}

/** git check-ref-format's rules for a branch name, or the reason it breaks one. */
function branchProblem(name: string): string | undefined {
  if (name.length === 0 || name.length > 255) return 'must be 1 to 255 characters';
  if (/[\x00-\x20\x7f~^:?*[\\]/.test(name)) return 'may not contain spaces, control characters or any of ~ ^ : ? * [ \\';
  if (name.includes('..') || name.includes('@{') || name === '@') return 'may not contain "..", "@{" or be "@"';
  if (name.startsWith('/') || name.endsWith('/') || name.includes('//')) return 'may not begin or end with "/" or contain "//"';
  if (name.endsWith('.')) return 'may not end with "."';
  if (name.split('/').some((part) => part.startsWith('.') || part.endsWith('.lock'))) return 'no part may begin with "." or end with ".lock"';
  return undefined;
}

/** A path in the repository, relative, without `.`/`..` segments or control characters, or the reason it is not one. */
function pathProblem(path: string): string | undefined {
  if (path.length === 0 || path.length > 1024) return 'must be 1 to 1024 characters';
  if (/[\x00-\x1f\x7f]/.test(path)) return 'may not contain control characters';
  if (path.startsWith('/') || path.endsWith('/') || path.includes('//')) return 'must be relative (no leading "/"), without empty segments or a trailing "/"';
  if (path.split('/').some((part) => part === '.' || part === '..' || part.toLowerCase() === '.git')) return 'may not have "." , ".." or ".git" segments';
  return undefined;
}

/** The trigger's values for one run, every template resolved. */
interface PullRequestValues {
  repo: RepoRef;
  base: string | undefined;
  branch: string;
  title: string;
  body: string | undefined;
  files: { path: string; content: string }[];
}

/**
 * Resolves every template of what the delivery sends (InterpolationError
 * lists all the unknown references at once) and checks the results
 * (TriggerValueError lists every bad value). `auth` and `postMergeDispatch`
 * are resolved where they are used.
 */
function resolveValues(trigger: PullRequestTrigger, context: InterpolationContext, runId: string): PullRequestValues {
  const unknown: string[] = [];
  const text = (template: string): string => {
    try {
      return interpolateText(template, context);
    } catch (error) {
      if (!(error instanceof InterpolationError)) throw error;
      unknown.push(...error.unknownReferences);
      return '';
    }
  };
  const repoText = text(trigger.repo);
  const base = trigger.base === undefined ? undefined : text(trigger.base);
  const branch = trigger.branch === undefined ? defaultBranch(runId) : text(trigger.branch);
  const title = text(trigger.title);
  const body = trigger.body === undefined ? undefined : text(trigger.body);
  const files = trigger.files.map((file) => ({ path: text(file.path), content: text(file.content) }));
  if (unknown.length > 0) throw new InterpolationError([...new Set(unknown)]);

  const problems: ErrorDetail[] = [];
  const repo = parseRepo(repoText);
  if (typeof repo === 'string') problems.push({ path: 'trigger.repo', message: repo });
  if (base !== undefined) {
    const problem = branchProblem(base);
    if (problem) problems.push({ path: 'trigger.base', message: `"${base.slice(0, 100)}" ${problem}` });
  }
  const branchIssue = branchProblem(branch);
  if (branchIssue) problems.push({ path: 'trigger.branch', message: `"${branch.slice(0, 100)}" ${branchIssue}` });
  if (base !== undefined && base === branch) problems.push({ path: 'trigger.branch', message: 'must differ from the base branch' });
  if (title.trim().length === 0) problems.push({ path: 'trigger.title', message: 'is empty once interpolated' });
  const seen = new Set<string>();
  files.forEach((file, index) => {
    const problem = pathProblem(file.path);
    if (problem) problems.push({ path: `trigger.files.${index}.path`, message: `"${file.path.slice(0, 100)}" ${problem}` });
    else if (seen.has(file.path)) problems.push({ path: `trigger.files.${index}.path`, message: `"${file.path.slice(0, 100)}" is listed twice` });
    seen.add(file.path);
  });
  if (problems.length > 0) throw new TriggerValueError(problems);
  return { repo: repo as RepoRef, base, branch, title, body, files };
}

/** The post-merge repository_dispatch of a run, resolved (src/runs/pull-request-events.ts sends it). */
export interface DispatchValues {
  repo: RepoRef;
  eventType: string;
  clientPayload: Record<string, unknown>;
}

/**
 * `postMergeDispatch` for one run: the event type, the repository (the
 * trigger's own by default) and the payload, interpolated. Without a
 * `payload`, the pipeline gets the run's id and its callback:
 * `{ runId, callbackUrl, callbackToken }`.
 */
export function resolveDispatch(trigger: PullRequestTrigger, context: InterpolationContext): DispatchValues {
  const dispatch = trigger.postMergeDispatch!;
  const unknown: string[] = [];
  const attempt = <T>(resolve: () => T, fallback: T): T => {
    try {
      return resolve();
    } catch (error) {
      if (!(error instanceof InterpolationError)) throw error;
      unknown.push(...error.unknownReferences);
      return fallback;
    }
  };
  const eventType = attempt(() => interpolateText(dispatch.eventType, context), '');
  const repoText = attempt(() => interpolateText(dispatch.repo ?? trigger.repo, context), '');
  const payload =
    dispatch.payload === undefined
      ? { runId: context.run.id, callbackUrl: context.run.callbackUrl, callbackToken: context.run.callbackToken }
      : attempt(() => interpolate(dispatch.payload, context), {});
  if (unknown.length > 0) throw new InterpolationError([...new Set(unknown)]);

  const problems: ErrorDetail[] = [];
  if (eventType.trim().length === 0 || eventType.length > EVENT_TYPE_MAX) {
    problems.push({ path: 'trigger.postMergeDispatch.eventType', message: `must be 1 to ${EVENT_TYPE_MAX} characters once interpolated` });
  }
  const repo = parseRepo(repoText);
  if (typeof repo === 'string') problems.push({ path: 'trigger.postMergeDispatch.repo', message: repo });
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
    problems.push({ path: 'trigger.postMergeDispatch.payload', message: "must be a JSON object (GitHub's client_payload)" });
  } else if (Object.keys(payload).length > CLIENT_PAYLOAD_MAX_PROPERTIES) {
    problems.push({ path: 'trigger.postMergeDispatch.payload', message: `may have at most ${CLIENT_PAYLOAD_MAX_PROPERTIES} top-level properties (GitHub's limit)` });
  }
  if (problems.length > 0) throw new TriggerValueError(problems);
  return { repo: repo as RepoRef, eventType, clientPayload: payload as Record<string, unknown> };
}

/** Why a template or value cannot be sent (a secret deleted since the trigger, a parameter that makes a bad name); undefined for any other error. */
export const unsendableReason = (error: unknown): string | undefined =>
  error instanceof InterpolationError || error instanceof TriggerValueError ? error.message : undefined;

/** Undeliverable for what unsendableReason names; any other error as it is. */
function asUndeliverable(error: unknown, prefix = ''): never {
  const reason = unsendableReason(error);
  if (reason !== undefined) throw new Undeliverable(`${prefix}${reason}`);
  throw error;
}

/** The part of the trigger a delivery interpolates (`auth` only when no installation applies; the post-merge dispatch after the merge; the webhook secret by the webhook). */
const deliveryPart = ({ postMergeDispatch: _dispatch, auth: _auth, webhookSecret: _secret, ...rest }: PullRequestTrigger) => rest;

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
