import { and, eq, inArray, isNull, lt, lte, or } from 'drizzle-orm';
import { signCallbackToken } from '../auth/callback-token';
import { SealedSecretError } from '../auth/crypto';
import { actionRuns, deliveryJobs, runAttempts } from '../db/schema';
import type { RunEngine } from './engine';
import { scheduleRetry, type RetryPolicy } from './retry';
import { templateContext, type RunRow } from './run-context';
import { Undeliverable, type Attempt, type KindColumns, type Sent, type TriggerDefinition, type Verdict } from './trigger-kind';
import { deliverableKind } from './trigger-kinds';
import { DELIVERY_PREFIX, failDelivery, startRun } from './transitions';

/**
 * One delivery attempt of a run, from a leased job to its recorded outcome
 * (DECISIONS §4; ARCHITECTURE "Delivery"), whatever its trigger kind:
 *
 *   job → the run (still pending?) → its kind (src/runs/trigger-kinds/)
 *       → kind.send (for a webhook: secrets, interpolation, outbound guard,
 *         fetch with a timeout and no redirects) → kind.classify
 *       → one transaction: the attempt's log row, and the run `running`, or
 *         the job re-scheduled per the kind's retry policy, or the run
 *         `failed` with `[delivery] ...` (src/runs/transitions.ts).
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
   * Aborts the attempt's request (the host is stopping). The attempt is then
   * not recorded, so it does not count against the retry policy's
   * `maxAttempts`: nobody answered, exactly as when the process dies
   * mid-attempt.
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

/** An error text with every concealed value of the attempt replaced, whatever the receiver or the network said. */
function scrub(text: string, concealed: readonly string[]): string {
  let result = text;
  for (const secret of concealed) if (secret.length >= 4) result = result.split(secret).join('[redacted]');
  return result;
}

/** What a kind's `send` is given: the run, the attempt, the engine, and the run's template context. */
function attemptOf(engine: RunEngine, run: RunRow, job: DeliveryJob, options: AttemptOptions, concealed: string[]): Attempt<TriggerDefinition> {
  const conceal = (...values: string[]) => void concealed.push(...values);
  return {
    trigger: run.trigger as TriggerDefinition,
    run,
    number: job.attempt,
    engine,
    signal: options.signal,
    conceal,
    async templateContext(secretNames) {
      const tenancy = { runId: run.id, orgId: run.orgId, projectId: run.projectId, envId: run.envId };
      const callbackToken = await signCallbackToken(engine.config.authSecret, tenancy, run.timeoutAt, run.createdAt);
      conceal(callbackToken);
      try {
        const context = await templateContext(engine, run, callbackToken, secretNames);
        conceal(...Object.values(context.secrets));
        return context;
      } catch (error) {
        if (error instanceof SealedSecretError) throw new Undeliverable(error.message);
        throw error;
      }
    },
  };
}

/** Performs the leased job's attempt and records its outcome (or, aborted, hands the job back unrecorded). */
export async function runDeliveryAttempt(engine: RunEngine, job: DeliveryJob, options: AttemptOptions = {}): Promise<AttemptResult> {
  const [run] = await engine.db.select().from(actionRuns).where(eq(actionRuns.id, job.runId)).limit(1);
  if (!run || run.status !== 'pending') {
    await engine.db.delete(deliveryJobs).where(and(eq(deliveryJobs.runId, job.runId), eq(deliveryJobs.attempt, job.attempt)));
    return { kind: 'skipped' };
  }
  const startedAt = engine.clock.now();
  const concealed: string[] = [];
  const trigger = run.trigger as TriggerDefinition;
  let attempted: { sent: Sent; verdict: Verdict; policy: RetryPolicy };
  try {
    const kind = deliverableKind(trigger.type);
    const sent = await kind.send(attemptOf(engine, run, job, options, concealed));
    attempted = { sent, verdict: kind.classify(sent, trigger), policy: kind.retryPolicy(trigger) };
  } catch (error) {
    if (error instanceof Undeliverable) {
      const problem = scrub(error.message, concealed);
      return recordOutcome(engine, run, job, {
        startedAt,
        latencyMs: 0,
        httpStatus: null,
        outcome: 'failed',
        problem,
        runError: `${DELIVERY_PREFIX} ${problem}`,
      });
    }
    // the host is stopping and the attempt was cut short: as if the process had died mid-attempt
    if (options.signal?.aborted) return abandon(engine, job);
    throw error;
  }
  const { sent, verdict, policy } = attempted;
  const measured = { startedAt, latencyMs: sent.latencyMs, httpStatus: sent.httpStatus };
  if (verdict.kind === 'delivered') return recordOutcome(engine, run, job, { ...measured, outcome: 'delivered', problem: null, columns: verdict.columns });
  const problem = scrub(verdict.problem, concealed);
  if (verdict.kind === 'rejected') {
    return recordOutcome(engine, run, job, { ...measured, outcome: 'failed', problem, runError: `${DELIVERY_PREFIX} ${problem} (not retried)` });
  }
  const next = scheduleRetry(job.attempt, policy, verdict.retryAfterMs, { random: engine.random });
  if (next.retry) {
    return recordOutcome(engine, run, job, { ...measured, outcome: 'retry', problem, retryAt: new Date(engine.clock.now().getTime() + next.delayMs) });
  }
  const runError = `${DELIVERY_PREFIX} gave up after ${job.attempt} attempt${job.attempt === 1 ? '' : 's'}; the last one: ${problem}`;
  return recordOutcome(engine, run, job, { ...measured, outcome: 'failed', problem, runError });
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
} & ({ outcome: 'delivered'; columns?: KindColumns } | { outcome: 'retry'; retryAt: Date } | { outcome: 'failed'; runError: string });

/**
 * One transaction: the attempt's log row, and the run and the job moved
 * on (the run's state by src/runs/transitions.ts). Each write is guarded
 * (the job at this attempt, the run still pending or active), so a worker
 * that lost its lease, or a run completed or cancelled meanwhile, changes
 * nothing it should not.
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
        await startRun(tx, run.id, now, outcome.columns);
        await tx.delete(deliveryJobs).where(thisJob);
        break;
      case 'retry':
        await tx
          .update(deliveryJobs)
          .set({ attempt: job.attempt + 1, runAt: outcome.retryAt, leaseUntil: null, dispatchedAt: null })
          .where(thisJob);
        break;
      case 'failed':
        await failDelivery(tx, run.id, outcome.runError, now);
        // the attempt's own job, also when the run had ended meanwhile
        await tx.delete(deliveryJobs).where(thisJob);
        break;
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
