import { and, eq, inArray, isNull, or, sql } from 'drizzle-orm';
import { signCallbackToken, type SignHs256 } from '../auth/callback-token';
import { SealedSecretError } from '../auth/crypto';
import type { Config } from '../config';
import type { Db, Queryable } from '../db/client';
import { actionRuns, ACTIVE_RUN_STATUSES } from '../db/schema';
import { ApiError } from '../http/errors';
import type { Logger } from '../logger';
import type { Clock } from '../platform';
import { recordDispatchAttempt, resolveCodehostCredential, type CodehostCredential } from './codehost-credentials';
import type { RunPorts } from './engine';
import { GitHubCallError, GitHubClient } from './github-client';
import { interpolateText, referencedSecrets, type InterpolationContext } from './interpolation';
import { templateContext, type RunRow } from './run-context';
import { credentialLabel, describeFailure, retryAfterOf } from './trigger-kinds/pull-request';
import { resolveDispatch, unsendableReason, type DispatchValues, type PullRequestTrigger } from './trigger-kinds/pull-request-trigger';
import { completeRun, DELIVERY_PREFIX, failDelivery } from './transitions';

/**
 * A pull request of a run was closed (SPEC "ActionRun status", the
 * pull_request rows; "Inbound webhooks"): what the App webhook and the
 * project webhook do once they have verified the event and found the run
 * (src/modules/github/pull-request-closed.ts).
 *
 *   closed, not merged → the run fails; its entity moves to onFailure.
 *   merged             → the run succeeds; its entity moves to onSuccess.
 *   merged, with `postMergeDispatch` → the run stays `running` (the kind's
 *                        `complete` says so) and the repository_dispatch
 *                        goes out, carrying the run's callback; the
 *                        pipeline's callback ends the run.
 *
 * Both endings go through completeRun (src/runs/transitions.ts) as a
 * `kind-event` report: of this event, a second delivery of it, the other
 * webhook, the callback, a move of the entity and the reaper, exactly one
 * ends the run.
 *
 * The dispatch is sent once per merge: a run claims it in its `output`
 * (`postMergeDispatch.state`: `sending`, then `sent`) with a guarded
 * UPDATE, so the two webhooks, or a redelivery, never send it twice. A
 * dispatch GitHub could not take now (5xx, rate limit, no answer) releases
 * the claim (`retryable-failure`) and the webhook answers 500: GitHub
 * marks the delivery failed, and redelivering it sends the dispatch. One
 * GitHub refuses for good fails the run with `[delivery] ...`, as does
 * the lack of API_BASE_URL (no callback URL the pipeline could reach) or of
 * a credential.
 */

export interface PullRequestClosed {
  /** `repository.full_name`. */
  repo: string;
  number: number;
  merged: boolean;
  /** `pull_request.html_url`. */
  url?: string;
  mergeCommitSha?: string | null;
}

export interface PullRequestEventDeps {
  db: Db;
  config: Config;
  logger: Logger;
  clock: Clock;
  /** Where the entity's environment is noted when it moves (the request's changedEnvironments). */
  changes: Set<string>;
  ports: RunPorts;
  /** Platform.signHs256: the run's callback token signed as its delivery attempts sign it. */
  signHs256?: SignHs256;
}

export type PullRequestRunOutcome =
  | { runId: string; kind: 'run-succeeded' | 'run-failed' }
  /** Ended by another path first (the callback, the other webhook, a move, the reaper, a cancel). */
  | { runId: string; kind: 'run-already-ended'; status: string | null }
  | { runId: string; kind: 'post-merge-dispatch-sent'; repo: string; eventType: string }
  /** The dispatch of this merge was sent already, or is being sent by another delivery right now. */
  | { runId: string; kind: 'post-merge-dispatch-already-sent' | 'post-merge-dispatch-in-progress' }
  /** The dispatch could not be sent and never will be: the run failed with `error`. */
  | { runId: string; kind: 'post-merge-dispatch-failed'; error: string };

/** A `postMergeDispatch` claim older than this is taken to be of a process that died while sending. */
export const DISPATCH_CLAIM_STALE_MS = 2 * 60 * 1000;

const active = inArray(actionRuns.status, [...ACTIVE_RUN_STATUSES]);

/**
 * The active pull-request runs whose pull request this is: the run's
 * repository (kept lowercased) and number. A run still pending has opened
 * no pull request yet (or not recorded it) and is not matched. `projectId`
 * narrows to one project (the project webhook).
 */
export async function runsOfPullRequest(db: Queryable, pull: { repo: string; number: number }, options: { projectId?: string } = {}): Promise<RunRow[]> {
  return db
    .select()
    .from(actionRuns)
    .where(
      and(
        eq(actionRuns.repo, pull.repo.toLowerCase()),
        eq(actionRuns.prNumber, pull.number),
        active,
        sql`${actionRuns.trigger}->>'type' = 'pull-request'`,
        options.projectId === undefined ? undefined : eq(actionRuns.projectId, options.projectId),
      ),
    )
    .orderBy(actionRuns.createdAt);
}

const pullRequestOutput = (event: PullRequestClosed) => ({
  pullRequest: {
    repo: event.repo.toLowerCase(),
    number: event.number,
    ...(event.url ? { url: event.url } : {}),
    merged: event.merged,
    ...(event.merged && event.mergeCommitSha ? { mergeCommitSha: event.mergeCommitSha } : {}),
  },
});

/** Applies a verified `closed` event to one of its runs. */
export async function applyPullRequestClosed(deps: PullRequestEventDeps, run: RunRow, event: PullRequestClosed): Promise<PullRequestRunOutcome> {
  const output = pullRequestOutput(event);
  const report = event.merged
    ? ({ status: 'succeeded', output } as const)
    : ({ status: 'failed', error: `the pull request ${event.repo.toLowerCase()}#${event.number} was closed without being merged`, output } as const);
  const result = await completeRun(deps.db, deps, run.id, run.envId, report, 'kind-event');
  if (!result.ok) return { runId: run.id, kind: 'run-already-ended', status: result.run?.status ?? null };
  const status = result.run.status;
  if (status === 'succeeded') return { runId: run.id, kind: 'run-succeeded' };
  if (status === 'failed') return { runId: run.id, kind: 'run-failed' };
  // kept: a merge of a run with a post-merge dispatch
  return sendPostMergeDispatch(deps, result.run, event);
}

type DispatchState = 'sending' | 'sent' | 'retryable-failure';

const dispatchState = sql<string | null>`${actionRuns.output}->'postMergeDispatch'->>'state'`;

/** The run's output while its dispatch is under way: the merge, and where the dispatch stands. */
const dispatchOutput = (event: PullRequestClosed, dispatch: Record<string, unknown> & { state: DispatchState }) => ({
  ...pullRequestOutput(event),
  postMergeDispatch: dispatch,
});

async function sendPostMergeDispatch(deps: PullRequestEventDeps, run: RunRow, event: PullRequestClosed): Promise<PullRequestRunOutcome> {
  const trigger = run.trigger as PullRequestTrigger;
  const now = deps.clock.now();
  const claimedAt = now.toISOString();
  const fail = async (problem: string, audit?: Parameters<typeof recordDispatchAttempt>[2]): Promise<PullRequestRunOutcome> => {
    const error = `${DELIVERY_PREFIX} ${problem}`;
    const ended = await deps.db.transaction(async (tx) => {
      const runs = await failDelivery(tx, run.id, error, deps.clock.now());
      if (runs.length > 0 && audit) await recordDispatchAttempt(tx, run, audit);
      return runs;
    });
    if (ended.length === 0) return { runId: run.id, kind: 'run-already-ended', status: null };
    deps.logger.warn('post-merge repository_dispatch failed; the run failed', { runId: run.id, error });
    return { runId: run.id, kind: 'post-merge-dispatch-failed', error };
  };

  // SPEC: without API_BASE_URL the dispatch is blocked, rather than hand the pipeline a callback it cannot reach
  if (!deps.config.apiBaseUrl) {
    return fail(
      'post-merge repository_dispatch refused: API_BASE_URL is not set, so the pipeline would get no callback URL it could reach; set API_BASE_URL to the public URL of this API',
      { purpose: 'repository-dispatch', repo: trigger.postMergeDispatch?.repo ?? run.repo ?? trigger.repo, credentialType: 'none', outcome: 'refused-no-api-base-url' },
    );
  }

  // the claim: one sender per merge, whichever webhook (or redelivery) comes first
  const staleBefore = new Date(now.getTime() - DISPATCH_CLAIM_STALE_MS).toISOString();
  const [claimed] = await deps.db
    .update(actionRuns)
    .set({ output: dispatchOutput(event, { state: 'sending', claimedAt }) })
    .where(
      and(
        eq(actionRuns.id, run.id),
        eq(actionRuns.status, 'running'),
        or(
          isNull(actionRuns.output),
          sql`${dispatchState} is null`,
          sql`${dispatchState} = 'retryable-failure'`,
          and(sql`${dispatchState} = 'sending'`, sql`${actionRuns.output}->'postMergeDispatch'->>'claimedAt' < ${staleBefore}`),
        ),
      ),
    )
    .returning({ id: actionRuns.id });
  if (!claimed) {
    const [current] = await deps.db.select({ status: actionRuns.status, state: dispatchState }).from(actionRuns).where(eq(actionRuns.id, run.id));
    if (!current || current.status !== 'running') return { runId: run.id, kind: 'run-already-ended', status: current?.status ?? null };
    return { runId: run.id, kind: current.state === 'sent' ? 'post-merge-dispatch-already-sent' : 'post-merge-dispatch-in-progress' };
  }
  const setState = (dispatch: Record<string, unknown> & { state: DispatchState }) =>
    deps.db
      .update(actionRuns)
      .set({ output: dispatchOutput(event, { claimedAt, ...dispatch }) })
      .where(and(eq(actionRuns.id, run.id), eq(actionRuns.status, 'running'), sql`${actionRuns.output}->'postMergeDispatch'->>'claimedAt' = ${claimedAt}`));

  // the run's callback, signed as every delivery attempt signs it; concealed from every error text
  const concealed: string[] = [];
  const scrub = (text: string) => concealed.reduce((out, value) => (value.length >= 4 ? out.split(value).join('[redacted]') : out), text);
  let dispatch: DispatchValues;
  let context: InterpolationContext | undefined;
  try {
    const callbackToken = await signCallbackToken(
      deps.config.authSecret,
      { runId: run.id, orgId: run.orgId, projectId: run.projectId, envId: run.envId },
      run.timeoutAt,
      run.createdAt,
      deps.signHs256,
    );
    concealed.push(callbackToken);
    const names = [...new Set([...referencedSecrets(trigger.postMergeDispatch), ...referencedSecrets(trigger.auth ?? {})])];
    context = await templateContext(deps, run, callbackToken, names);
    concealed.push(...Object.values(context.secrets));
    dispatch = resolveDispatch(trigger, context);
  } catch (error) {
    const reason = error instanceof SealedSecretError ? error.message : unsendableReason(error);
    if (reason === undefined) throw error;
    return fail(scrub(`post-merge repository_dispatch cannot be sent: ${reason}`), {
      purpose: 'repository-dispatch',
      repo: trigger.postMergeDispatch?.repo ?? run.repo ?? trigger.repo,
      credentialType: 'none',
      outcome: 'failed',
    });
  }
  const audit = (credential: { credentialType: 'installation' | 'token' | 'none'; installationId?: number }, outcome: string, httpStatus?: number | null) => ({
    purpose: 'repository-dispatch' as const,
    repo: dispatch.repo.fullName,
    eventType: dispatch.eventType,
    ...credential,
    outcome,
    httpStatus,
  });

  let resolution;
  try {
    resolution = await resolveCodehostCredential(deps, {
      run,
      repo: dispatch.repo.fullName,
      purpose: 'repository-dispatch',
      hasStaticToken: trigger.auth !== undefined,
      staticToken: () => interpolateText(trigger.auth!.token, context!),
    });
  } catch (error) {
    const reason = unsendableReason(error);
    if (reason === undefined) throw error;
    return fail(scrub(`post-merge repository_dispatch cannot be sent: trigger.auth.token: ${reason}`), audit({ credentialType: 'none' }, 'failed'));
  }
  if (!resolution.ok) {
    if (!resolution.mint) return fail(`post-merge repository_dispatch cannot be sent: ${resolution.problem}`, audit({ credentialType: 'none' }, 'no-credential'));
    const fields = { credentialType: 'installation' as const, installationId: resolution.installationId };
    if (!resolution.mint.retryable) {
      return fail(`post-merge repository_dispatch cannot be sent: ${resolution.problem} (not retried)`, audit(fields, 'failed', resolution.mint.status));
    }
    return deferDispatch(deps, run, setState, audit(fields, 'retryable-failure', resolution.mint.status), resolution.problem);
  }
  const credential: CodehostCredential = resolution.credential;
  concealed.push(credential.token);
  const fields = credential.type === 'installation' ? { credentialType: 'installation' as const, installationId: credential.installationId } : { credentialType: 'token' as const };

  const client = new GitHubClient({
    config: deps.config,
    logger: deps.logger,
    token: credential.token,
    timeoutMs: deps.config.deliveryAttemptTimeoutMs,
    now: () => deps.clock.now(),
  });
  const { owner, name, fullName } = dispatch.repo;
  try {
    await client.dispatch(owner, name, dispatch.eventType, dispatch.clientPayload);
  } catch (error) {
    if (!(error instanceof GitHubCallError)) throw error;
    const problem = scrub(describeFailure(`send the repository_dispatch "${dispatch.eventType}"`, fullName, error, credentialLabel(credential)));
    if (!error.api.retryable) return fail(`post-merge repository_dispatch: ${problem} (not retried)`, audit(fields, 'failed', error.status ?? null));
    return deferDispatch(deps, run, setState, audit(fields, 'retryable-failure', error.status ?? null), problem, retryAfterOf(error, deps.clock.now()));
  }
  const dispatchedAt = deps.clock.now().toISOString();
  await deps.db.transaction(async (tx) => {
    await tx
      .update(actionRuns)
      .set({ output: dispatchOutput(event, { state: 'sent', claimedAt, dispatchedAt, repo: fullName, eventType: dispatch.eventType }) })
      .where(and(eq(actionRuns.id, run.id), sql`${actionRuns.output}->'postMergeDispatch'->>'claimedAt' = ${claimedAt}`));
    await recordDispatchAttempt(tx, run, audit(fields, 'dispatched', client.lastStatus));
  });
  deps.logger.info('post-merge repository_dispatch sent; the run waits for its callback', { runId: run.id, repo: fullName, eventType: dispatch.eventType, credentialType: credential.type });
  return { runId: run.id, kind: 'post-merge-dispatch-sent', repo: fullName, eventType: dispatch.eventType };
}

/**
 * GitHub could not take the dispatch now: the claim is released and the
 * webhook answers 500, so the delivery shows as failed on GitHub and
 * redelivering it sends the dispatch. The run stays `running` meanwhile
 * (its timeout still applies).
 */
async function deferDispatch(
  deps: PullRequestEventDeps,
  run: RunRow,
  setState: (dispatch: Record<string, unknown> & { state: DispatchState }) => Promise<unknown>,
  audit: Parameters<typeof recordDispatchAttempt>[2],
  problem: string,
  retryAfterMs?: number,
): Promise<never> {
  await setState({ state: 'retryable-failure', problem });
  await recordDispatchAttempt(deps.db, run, audit);
  deps.logger.warn('post-merge repository_dispatch deferred: GitHub could not take it now; redeliver the pull_request event to send it', {
    runId: run.id,
    problem,
    retryAfterMs: retryAfterMs ?? null,
  });
  throw new ApiError(
    'internal',
    `the post-merge repository_dispatch of action run ${run.id} could not be sent now (${problem}); the run stays running: redeliver this event to send it`,
  );
}
