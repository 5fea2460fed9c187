import { and, eq, inArray, isNull, lt, lte, or } from 'drizzle-orm';
import { signCallbackToken } from '../auth/callback-token';
import { actionRuns, ACTIVE_RUN_STATUSES, deliveryJobs, runAttempts } from '../db/schema';
import type { ActionTrigger, WebhookTrigger } from '../modules/actions/schemas';
import { resolveSecrets } from '../modules/secrets/service';
import { SealedSecretError } from '../auth/crypto';
import type { RunEngine } from './engine';
import { interpolate, interpolateText, InterpolationError, referencedSecrets, type InterpolationContext } from './interpolation';
import { checkOutboundUrl } from './outbound-guard';
import { buildOutboundRequest, type InterpolatedWebhookTrigger, type OutboundRequest } from './outbound-request';
import { nextAttempt, type AttemptOutcome } from './retry';
import { notifyRunOutcomes } from './run-notifications';
import type { z } from '@hono/zod-openapi';

/**
 * One delivery attempt of a run's webhook trigger, from a leased job to its
 * recorded outcome (DECISIONS §4; ARCHITECTURE "Delivery"):
 *
 *   job → the run (still pending?) → secrets → interpolation → outbound guard
 *       → fetch (timeout, no redirects) → one transaction: the attempt's log
 *         row, and the run `running`, or the job re-scheduled, or the run
 *         `failed` with `[delivery] ...`.
 *
 * Nothing is written between taking the job and recording the outcome, and
 * no transaction is open during the HTTP call. A process that dies in
 * between leaves its lease to run out; the job is then taken up again and
 * the attempt repeated, with the same `webhook-id` (at least once). A host
 * that stops cleanly aborts the request of an attempt still waiting on its
 * receiver (`signal`): nothing is recorded either, and the lease is handed
 * back at once (docs/decisions.md, "Node host lifecycle").
 */

export type DeliveryJob = typeof deliveryJobs.$inferSelect;
type RunRow = typeof actionRuns.$inferSelect;

export const DELIVERY_PREFIX = '[delivery]';

export type AttemptResult =
  | { kind: 'delivered' }
  | { kind: 'retry'; attempt: number; runAt: Date }
  | { kind: 'failed'; error: string }
  /** The run was no longer pending (cancelled, completed, reaped): the job was dropped unsent. */
  | { kind: 'skipped' }
  /** Another worker holds the job, or it moved on (a stale queue message). */
  | { kind: 'not-claimed' }
  /** The host is stopping: the request was aborted, nothing recorded, the lease handed back; the same attempt runs again. */
  | { kind: 'abandoned' };

export interface AttemptOptions {
  /**
   * Aborts the attempt's HTTP request (the host is stopping). The attempt is
   * then not recorded, so it does not count against `retry.maxAttempts`: its
   * receiver never answered, exactly as when the process dies mid-attempt.
   */
  signal?: AbortSignal;
}

/** Node: up to `limit` due jobs that no live worker holds, leased to the caller. */
export async function claimDueJobs(engine: RunEngine, limit: number): Promise<DeliveryJob[]> {
  const now = engine.clock.now();
  const leaseUntil = new Date(now.getTime() + engine.leaseMs);
  // one statement: the due jobs are picked, locked past other claimers (SKIP LOCKED), leased and returned
  const due = engine.db
    .select({ runId: deliveryJobs.runId })
    .from(deliveryJobs)
    .where(and(lte(deliveryJobs.runAt, now), or(isNull(deliveryJobs.leaseUntil), lt(deliveryJobs.leaseUntil, now))))
    .orderBy(deliveryJobs.runAt)
    .limit(limit)
    .for('update', { skipLocked: true });
  return engine.db.update(deliveryJobs).set({ leaseUntil }).where(inArray(deliveryJobs.runId, due)).returning();
}

/**
 * Worker: the job a queue message names, leased to the caller, when it is
 * still at the message's attempt, due, and held by nobody. `early` says the
 * message came before the job's time (its caller re-queues it).
 */
export async function claimJob(
  engine: RunEngine,
  runId: string,
  attempt: number,
): Promise<{ job: DeliveryJob } | { early: Date } | null> {
  const now = engine.clock.now();
  const [job] = await engine.db
    .update(deliveryJobs)
    .set({ leaseUntil: new Date(now.getTime() + engine.leaseMs) })
    .where(
      and(
        eq(deliveryJobs.runId, runId),
        eq(deliveryJobs.attempt, attempt),
        lte(deliveryJobs.runAt, now),
        or(isNull(deliveryJobs.leaseUntil), lt(deliveryJobs.leaseUntil, now)),
      ),
    )
    .returning();
  if (job) return { job };
  const [waiting] = await engine.db
    .select({ runAt: deliveryJobs.runAt, leaseUntil: deliveryJobs.leaseUntil })
    .from(deliveryJobs)
    .where(and(eq(deliveryJobs.runId, runId), eq(deliveryJobs.attempt, attempt)))
    .limit(1);
  if (waiting && waiting.runAt > now && (!waiting.leaseUntil || waiting.leaseUntil < now)) return { early: waiting.runAt };
  return null;
}

/** The callback address handed to the receiver: ids, not slugs, so a rename never breaks it. */
export const callbackUrl = (run: Pick<RunRow, 'callbackBaseUrl' | 'orgId' | 'projectId' | 'envId' | 'id'>): string =>
  `${run.callbackBaseUrl.replace(/\/+$/, '')}/${run.orgId}/${run.projectId}/envs/${run.envId}/action-runs/${run.id}/callback`;

/** Thrown while preparing an attempt: the run fails with this message, not retried. */
class Undeliverable extends Error {}

/** Thrown when the attempt's request was aborted through AttemptOptions.signal. */
class Abandoned extends Error {}

interface PreparedAttempt {
  trigger: InterpolatedWebhookTrigger;
  signingSecret?: string;
  /** Every value that must never appear in a recorded error. */
  secrets: string[];
}

/**
 * The run's trigger with every template resolved: secrets decrypted for
 * this run's environment only, the callback token signed for this run.
 */
async function prepareAttempt(engine: RunEngine, run: RunRow): Promise<PreparedAttempt> {
  const stored = run.trigger as ActionTrigger;
  if (stored.type !== 'webhook') throw new Undeliverable('pull-request triggers are not available on this server');
  const trigger = stored as z.output<typeof WebhookTrigger>;
  const tenancy = { orgId: run.orgId, projectId: run.projectId, envId: run.envId };
  let secrets: Map<string, string>;
  try {
    secrets = await resolveSecrets(engine.db, engine.config.encryptionKey, tenancy, referencedSecrets(trigger));
  } catch (error) {
    if (error instanceof SealedSecretError) throw new Undeliverable(error.message);
    throw error;
  }
  const callbackToken = await signCallbackToken(engine.config.authSecret, { runId: run.id, ...tenancy }, run.timeoutAt, run.createdAt);
  const context: InterpolationContext = {
    secrets: Object.fromEntries(secrets),
    parameters: run.parameters as Record<string, unknown>,
    entity: run.entitySnapshot as InterpolationContext['entity'],
    run: { id: run.id, callbackUrl: callbackUrl(run), callbackToken },
  };
  try {
    return { ...interpolateTrigger(trigger, context), secrets: [...secrets.values(), callbackToken] };
  } catch (error) {
    // a secret deleted since the trigger was accepted
    if (error instanceof InterpolationError) throw new Undeliverable(error.message);
    throw error;
  }
}

/**
 * Every template of a webhook trigger resolved (InterpolationError lists the
 * unknown ones). Values inserted into the URL are percent-encoded.
 */
export function interpolateTrigger(
  trigger: z.output<typeof WebhookTrigger>,
  context: InterpolationContext,
): { trigger: InterpolatedWebhookTrigger; signingSecret?: string } {
  const { url, signingSecret, ...rest } = trigger;
  // every unknown reference at once, not the first field's
  const unknown = [url, signingSecret ?? '', rest].flatMap((part) => {
    try {
      interpolate(part, context);
      return [];
    } catch (error) {
      if (error instanceof InterpolationError) return error.unknownReferences;
      throw error;
    }
  });
  if (unknown.length > 0) throw new InterpolationError([...new Set(unknown)]);
  return {
    trigger: { ...interpolate(rest, context), url: interpolateText(url, context, { encode: encodeURIComponent }) },
    signingSecret: signingSecret === undefined ? undefined : interpolateText(signingSecret, context),
  };
}

/** An error text with every secret value of the attempt replaced, whatever the receiver or the network said. */
function scrub(text: string, secrets: string[]): string {
  let result = text;
  for (const secret of secrets) if (secret.length >= 4) result = result.split(secret).join('[redacted]');
  return result;
}

function networkErrorText(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) {
    return `no response within ${timeoutMs / 1000} s`;
  }
  const cause = error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
  const detail = cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
  return `network error (${detail})`;
}

/** Why buildOutboundRequest threw, in words that never include the values it was given. */
function unbuildableReason(error: unknown): string {
  const message = error instanceof Error ? error.message : '';
  if (/invalid header (value|name)/i.test(message)) {
    return 'a header value (configured, or from the auth) holds a line break or another character HTTP headers cannot carry';
  }
  return `the trigger's values were refused (${error instanceof Error ? error.name : 'unknown error'})`;
}

interface Sent {
  outcome: AttemptOutcome;
  httpStatus: number | null;
  /** What went wrong, when something did. */
  problem: string | null;
  latencyMs: number;
}

async function send(engine: RunEngine, prepared: PreparedAttempt, webhookId: string, options: AttemptOptions): Promise<Sent> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const verdict = await checkOutboundUrl(prepared.trigger.url, {
    allowedHosts: engine.config.outboundAllowedHosts,
    resolve: engine.resolveHost,
  });
  if (!verdict.ok && verdict.transient) {
    // DNS may answer later: retried like any network error
    return { outcome: { kind: 'network-error' }, httpStatus: null, problem: `network error (${verdict.reason})`, latencyMs: elapsed() };
  }
  if (!verdict.ok) throw new Undeliverable(`refused to call the webhook URL: ${verdict.reason}`);
  let request: OutboundRequest;
  try {
    request = await buildOutboundRequest(prepared.trigger, {
      webhookId,
      now: engine.clock.now(),
      signingSecret: prepared.signingSecret,
    });
  } catch (error) {
    // The same inputs fail the same way on every attempt, so the run fails now
    // rather than the job looping until the reaper. The cause's message is not
    // used: the HTTP client quotes the offending header value, often a secret.
    throw new Undeliverable(`the request could not be built: ${unbuildableReason(error)}`);
  }
  const timeout = AbortSignal.timeout(engine.attemptTimeoutMs);
  try {
    const response = await engine.fetch(request.url, {
      method: request.method,
      headers: request.headers,
      body: request.body,
      redirect: 'manual',
      signal: options.signal ? AbortSignal.any([timeout, options.signal]) : timeout,
    });
    // the body is not read: only the status counts, and a receiver may echo what it was sent
    await response.body?.cancel().catch(() => {});
    const status = response.status;
    const outcome: AttemptOutcome = { kind: 'response', status, retryAfter: response.headers.get('retry-after') };
    let problem: string | null = null;
    if (status >= 300 && status < 400) problem = `the receiver answered HTTP ${status} (redirects are not followed)`;
    else if (status >= 400) problem = `the receiver answered HTTP ${status}`;
    return { outcome, httpStatus: status, problem, latencyMs: elapsed() };
  } catch (error) {
    if (options.signal?.aborted) throw new Abandoned();
    // the host's connection-time guard (src/node/outbound-fetch.ts) refused the address the name resolved to now
    const cause = error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
    if (cause?.code === 'EADDRNOTPUBLIC') throw new Undeliverable(`refused to call the webhook URL: ${cause.message}`);
    return {
      outcome: { kind: 'network-error' },
      httpStatus: null,
      problem: networkErrorText(error, engine.attemptTimeoutMs),
      latencyMs: elapsed(),
    };
  }
}

/** Performs the leased job's attempt and records its outcome (or, aborted, hands the job back unrecorded). */
export async function runDeliveryAttempt(engine: RunEngine, job: DeliveryJob, options: AttemptOptions = {}): Promise<AttemptResult> {
  const [run] = await engine.db.select().from(actionRuns).where(eq(actionRuns.id, job.runId)).limit(1);
  if (!run || run.status !== 'pending') {
    await engine.db.delete(deliveryJobs).where(and(eq(deliveryJobs.runId, job.runId), eq(deliveryJobs.attempt, job.attempt)));
    return { kind: 'skipped' };
  }
  const startedAt = engine.clock.now();
  let sent: Sent;
  let secrets: string[] = [];
  try {
    const prepared = await prepareAttempt(engine, run);
    secrets = prepared.secrets;
    sent = await send(engine, prepared, run.id, options);
  } catch (error) {
    if (error instanceof Abandoned) return abandon(engine, job);
    if (!(error instanceof Undeliverable)) throw error;
    return recordOutcome(engine, run, job, {
      startedAt,
      latencyMs: 0,
      httpStatus: null,
      outcome: 'failed',
      problem: scrub(error.message, secrets),
      runError: `${DELIVERY_PREFIX} ${scrub(error.message, secrets)}`,
    });
  }
  const problem = sent.problem === null ? null : scrub(sent.problem, secrets);
  if (problem === null) {
    return recordOutcome(engine, run, job, { startedAt, latencyMs: sent.latencyMs, httpStatus: sent.httpStatus, outcome: 'delivered', problem });
  }
  const policy = (run.trigger as z.output<typeof WebhookTrigger>).retry;
  const next = nextAttempt(job.attempt, sent.outcome, policy, { now: engine.clock.now(), random: engine.random });
  if (next.retry) {
    return recordOutcome(engine, run, job, {
      startedAt,
      latencyMs: sent.latencyMs,
      httpStatus: sent.httpStatus,
      outcome: 'retry',
      problem,
      retryAt: new Date(engine.clock.now().getTime() + next.delayMs),
    });
  }
  const runError =
    next.reason === 'attempts-exhausted'
      ? `${DELIVERY_PREFIX} gave up after ${job.attempt} attempt${job.attempt === 1 ? '' : 's'}; the last one: ${problem}`
      : `${DELIVERY_PREFIX} ${problem} (not retried)`;
  return recordOutcome(engine, run, job, { startedAt, latencyMs: sent.latencyMs, httpStatus: sent.httpStatus, outcome: 'failed', problem, runError });
}

/**
 * An attempt aborted by a stopping host: no attempt row, the job unchanged
 * but for its lease, which is handed back (when it is still this worker's)
 * so that the next worker need not wait for it to run out. The same attempt
 * is made again, under the same webhook-id: the receiver may have seen the
 * aborted request (at least once).
 */
async function abandon(engine: RunEngine, job: DeliveryJob): Promise<AttemptResult> {
  await engine.db
    .update(deliveryJobs)
    .set({ leaseUntil: null })
    .where(
      and(
        eq(deliveryJobs.runId, job.runId),
        eq(deliveryJobs.attempt, job.attempt),
        job.leaseUntil ? eq(deliveryJobs.leaseUntil, job.leaseUntil) : isNull(deliveryJobs.leaseUntil),
      ),
    );
  engine.logger.info('delivery attempt abandoned: the host is stopping; it is made again later', { runId: job.runId, attempt: job.attempt });
  return { kind: 'abandoned' };
}

type Outcome = {
  startedAt: Date;
  latencyMs: number;
  httpStatus: number | null;
  problem: string | null;
} & ({ outcome: 'delivered' } | { outcome: 'retry'; retryAt: Date } | { outcome: 'failed'; runError: string });

/**
 * One transaction: the attempt's log row, and the run and the job moved
 * on (a run that fails notifies the user who triggered it). Each write is
 * guarded (the job at this attempt, the run still active), so a worker that
 * lost its lease, or a run completed or cancelled meanwhile, changes nothing
 * it should not.
 */
async function recordOutcome(engine: RunEngine, run: RunRow, job: DeliveryJob, outcome: Outcome): Promise<AttemptResult> {
  const now = engine.clock.now();
  const thisJob = and(eq(deliveryJobs.runId, job.runId), eq(deliveryJobs.attempt, job.attempt));
  await engine.db.transaction(async (tx) => {
    const attemptRow = {
      runId: run.id,
      attempt: job.attempt,
      startedAt: outcome.startedAt,
      latencyMs: outcome.latencyMs,
      httpStatus: outcome.httpStatus,
      outcome: outcome.outcome,
      error: outcome.problem,
    };
    await tx
      .insert(runAttempts)
      .values(attemptRow)
      .onConflictDoUpdate({ target: [runAttempts.runId, runAttempts.attempt], set: attemptRow });
    switch (outcome.outcome) {
      case 'delivered':
        await tx
          .update(actionRuns)
          .set({ status: 'running', startedAt: now })
          .where(and(eq(actionRuns.id, run.id), eq(actionRuns.status, 'pending')));
        await tx.delete(deliveryJobs).where(thisJob);
        break;
      case 'retry':
        await tx
          .update(deliveryJobs)
          .set({ attempt: job.attempt + 1, runAt: outcome.retryAt, leaseUntil: null, dispatchedAt: null })
          .where(thisJob);
        break;
      case 'failed': {
        const failed = await tx
          .update(actionRuns)
          .set({ status: 'failed', error: outcome.runError, completedAt: now })
          .where(and(eq(actionRuns.id, run.id), inArray(actionRuns.status, [...ACTIVE_RUN_STATUSES])))
          .returning();
        await tx.delete(deliveryJobs).where(thisJob);
        await notifyRunOutcomes(tx, failed, now);
        break;
      }
    }
  });
  const level = outcome.outcome === 'delivered' ? 'info' : 'warn';
  engine.logger[level]('delivery attempt', {
    runId: run.id,
    attempt: job.attempt,
    outcome: outcome.outcome,
    httpStatus: outcome.httpStatus,
    latencyMs: outcome.latencyMs,
    problem: outcome.problem,
  });
  switch (outcome.outcome) {
    case 'delivered':
      return { kind: 'delivered' };
    case 'retry':
      return { kind: 'retry', attempt: job.attempt + 1, runAt: outcome.retryAt };
    case 'failed':
      return { kind: 'failed', error: outcome.runError };
  }
}
