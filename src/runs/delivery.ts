import { and, eq, getTableColumns, inArray, isNull, lt, lte, or, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { signCallbackToken } from '../auth/callback-token';
import { SealedSecretError } from '../auth/crypto';
import type { Db } from '../db/client';
import { actionRuns, deliveryJobs } from '../db/schema';
import type { RunEngine } from './engine';
import { scheduleRetry, type RetryPolicy } from './retry';
import { templateContext, type RunRow } from './run-context';
import { Undeliverable, type Attempt, type KindColumns, type Sent, type TriggerDefinition, type Verdict } from './trigger-kind';
import { deliverableKind } from './trigger-kinds';
import { attemptLogged, DELIVERY_PREFIX, failDeliveryAttempt, startRun, type AttemptRecord, type Delivered } from './transitions';

/**
 * One delivery attempt of a run, from a leased job to its recorded outcome
 * (DECISIONS §4; ARCHITECTURE "Delivery"), whatever its trigger kind:
 *
 *   job and its run, leased and read in one statement (the run still
 *       pending?) → its kind (src/runs/trigger-kinds/)
 *       → kind.send (for a webhook: secrets, interpolation, outbound guard,
 *         fetch with a timeout and no redirects) → kind.classify
 *       → one statement: the attempt's log row, and the run `running`, or
 *         the job re-scheduled per the kind's retry policy, or the run
 *         `failed` with `[delivery] ...` (src/runs/transitions.ts; a failed
 *         run's notification in a transaction with it).
 *
 * A delivered attempt is two round trips to the database: its claim and
 * its outcome. The Node job runner shares both: one claim leases a job for
 * each slot free, and while the slots turn over, jobs ahead of them
 * (src/node/job-runner.ts); the delivered attempts answered while another's
 * outcome is being written are written together after it (`recordDelivered`).
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
  /**
   * Called once the request has been answered (or has failed) and only its
   * outcome is left to record: the caller's slot for outbound requests may
   * serve the next attempt while this one is written.
   */
  onSent?: () => void;
  /**
   * Writes a delivered attempt that sets no kind columns, in place of its own
   * startRun statement: the Node job runner's group commit
   * (src/runs/group-commit.ts) writes those answered together in one.
   * Resolves with whether the run was moved to `running`.
   */
  recordDelivered?: (delivered: Delivered) => Promise<boolean>;
}

/** A leased job, and its run as the claim read it (null: the run is gone). */
export interface LeasedJob {
  job: DeliveryJob;
  run: RunRow | null;
  /**
   * The run's callback token, when whoever leased the job signed it already:
   * a trigger handing its run to a free slot signs it while the run is being
   * written, so the attempt goes out without signing first (jose, where the
   * host has no signer of its own, answers from WebCrypto's thread).
   * The same token every attempt signs (signCallbackToken is deterministic).
   */
  callbackToken?: string;
}

const jobColumnNames = Object.keys(getTableColumns(deliveryJobs)) as (keyof DeliveryJob)[];

/**
 * Leases the jobs `which` selects until `leaseUntil`, and returns each with
 * its run, in one statement. The run is read in the statement's snapshot:
 * whatever ends a run drops its job in the same transaction, so a job still
 * there to be leased has a run that was pending when its lease was taken, or
 * one that is no longer pending and is dropped unsent.
 */
function lease(db: Db, which: SQL | undefined, leaseUntil: Date | SQL) {
  const leased = db.$with('leased').as(db.update(deliveryJobs).set({ leaseUntil }).where(which).returning());
  const job = Object.fromEntries(jobColumnNames.map((name) => [name, leased[name]])) as { [K in keyof DeliveryJob]: (typeof leased)[K] };
  return db.with(leased).select({ job, run: actionRuns }).from(leased).leftJoin(actionRuns, eq(actionRuns.id, leased.runId)).orderBy(leased.runAt);
}

/** Held by nobody: never leased, or its lease ran out. */
const unheld = (now: Date | Placeholder) => or(isNull(deliveryJobs.leaseUntil), lt(deliveryJobs.leaseUntil, now));

/** claimDueJobs's statement: the due jobs picked and locked past other claimers (SKIP LOCKED), leased, and returned with their runs. */
function buildClaim(db: Db, name: string) {
  const now = sql.placeholder('now');
  const due = db
    .select({ runId: deliveryJobs.runId })
    .from(deliveryJobs)
    .where(and(lte(deliveryJobs.runAt, now), unheld(now)))
    .orderBy(deliveryJobs.runAt)
    .limit(sql.placeholder('limit'))
    .for('update', { skipLocked: true });
  // SET takes SQL, not a bare placeholder: the time comes as ISO text
  return lease(db, inArray(deliveryJobs.runId, due), sql`${sql.placeholder('leaseUntil')}`).prepare(name);
}

/** The claim, built once per database handle (named where the engine allows): each poll only fills it in. */
const claimStatements = new WeakMap<Db, ReturnType<typeof buildClaim>>();

/** Node: up to `limit` due jobs that no live worker holds, leased to the caller, with their runs. */
export async function claimDueJobs(engine: RunEngine, limit: number): Promise<LeasedJob[]> {
  let claim = claimStatements.get(engine.db);
  if (!claim) claimStatements.set(engine.db, (claim = buildClaim(engine.db, engine.namedStatements ? 'cellplane_delivery_claim' : '')));
  const now = engine.clock.now();
  return claim.execute({ now, limit, leaseUntil: new Date(now.getTime() + engine.leaseMs).toISOString() });
}

/**
 * Worker: the job a queue message names, leased to the caller with its run,
 * when it is still at the message's attempt, due, and held by nobody.
 * `early` says the message came before the job's time (its caller re-queues it).
 */
export async function claimJob(engine: RunEngine, runId: string, attempt: number): Promise<LeasedJob | { early: Date } | null> {
  const now = engine.clock.now();
  const thisAttempt = and(eq(deliveryJobs.runId, runId), eq(deliveryJobs.attempt, attempt));
  const [leased] = await lease(engine.db, and(thisAttempt, lte(deliveryJobs.runAt, now), unheld(now)), new Date(now.getTime() + engine.leaseMs));
  if (leased) return leased;
  const [waiting] = await engine.db
    .select({ runAt: deliveryJobs.runAt, leaseUntil: deliveryJobs.leaseUntil })
    .from(deliveryJobs)
    .where(thisAttempt)
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
function attemptOf(engine: RunEngine, { job, callbackToken: signed }: LeasedJob, run: RunRow, options: AttemptOptions, concealed: string[]): Attempt<TriggerDefinition> {
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
      const callbackToken = signed ?? (await signCallbackToken(engine.config.authSecret, tenancy, run.timeoutAt, run.createdAt, engine.signHs256));
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
export async function runDeliveryAttempt(engine: RunEngine, leased: LeasedJob, options: AttemptOptions = {}): Promise<AttemptResult> {
  const { job, run } = leased;
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
    const sent = await kind.send(attemptOf(engine, leased, run, options, concealed));
    options.onSent?.();
    attempted = { sent, verdict: kind.classify(sent, trigger), policy: kind.retryPolicy(trigger) };
  } catch (error) {
    if (error instanceof Undeliverable) {
      const problem = scrub(error.message, concealed);
      return recordOutcome(engine, run, job, options, {
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
  if (verdict.kind === 'delivered') return recordOutcome(engine, run, job, options, { ...measured, outcome: 'delivered', problem: null, columns: verdict.columns });
  const problem = scrub(verdict.problem, concealed);
  if (verdict.kind === 'rejected') {
    return recordOutcome(engine, run, job, options, { ...measured, outcome: 'failed', problem, runError: `${DELIVERY_PREFIX} ${problem} (not retried)` });
  }
  const next = scheduleRetry(job.attempt, policy, verdict.retryAfterMs, { random: engine.random });
  if (next.retry) {
    return recordOutcome(engine, run, job, options, { ...measured, outcome: 'retry', problem, retryAt: new Date(engine.clock.now().getTime() + next.delayMs) });
  }
  const runError = `${DELIVERY_PREFIX} gave up after ${job.attempt} attempt${job.attempt === 1 ? '' : 's'}; the last one: ${problem}`;
  return recordOutcome(engine, run, job, options, { ...measured, outcome: 'failed', problem, runError });
}

/**
 * Hands leases back unused: each job is held by nobody again, unless its
 * lease is no longer the one this worker took (it ran out and another worker
 * leased the job, or the job moved on), in one statement. Nothing else of the
 * job changes, so whichever worker claims it next makes the same attempt.
 */
export async function handBackLeases(db: Db, jobs: readonly DeliveryJob[]): Promise<void> {
  if (jobs.length === 0) return;
  const stillOurs = jobs.map((job) =>
    and(
      eq(deliveryJobs.runId, job.runId),
      eq(deliveryJobs.attempt, job.attempt),
      job.leaseUntil ? eq(deliveryJobs.leaseUntil, job.leaseUntil) : isNull(deliveryJobs.leaseUntil),
    ),
  );
  await db.update(deliveryJobs).set({ leaseUntil: null }).where(or(...stillOurs));
}

/**
 * An attempt aborted by a stopping host: no attempt row, the job unchanged
 * but for its lease, which is handed back (when it is still this worker's)
 * so that the next worker need not wait for it to run out. The same attempt
 * is made again, under the same webhook-id: the receiver may have seen the
 * aborted request (at least once).
 */
export async function abandon(engine: RunEngine, job: DeliveryJob): Promise<AttemptResult> {
  await handBackLeases(engine.db, [job]);
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
 * The attempt's log row, and the run and the job moved on (the run's state
 * by src/runs/transitions.ts), in one statement. Each write is guarded (the
 * job at this attempt, the run still pending or active), so a worker that
 * lost its lease, or a run completed or cancelled meanwhile, changes nothing
 * it should not.
 */
async function recordOutcome(engine: RunEngine, run: RunRow, job: DeliveryJob, options: AttemptOptions, outcome: Outcome): Promise<AttemptResult> {
  const now = engine.clock.now();
  const attempt: AttemptRecord = {
    runId: run.id,
    attempt: job.attempt,
    startedAt: outcome.startedAt,
    latencyMs: outcome.latencyMs,
    httpStatus: outcome.httpStatus,
    outcome: outcome.outcome,
    error: outcome.problem,
  };
  switch (outcome.outcome) {
    case 'delivered':
      if (options.recordDelivered && !outcome.columns) await options.recordDelivered({ ...attempt, outcome: 'delivered', at: now });
      else await startRun(engine.db, attempt, now, outcome.columns, engine.namedStatements);
      break;
    case 'retry':
      await scheduleNextAttempt(engine.db, attempt, outcome.retryAt);
      break;
    case 'failed':
      await failDeliveryAttempt(engine.db, run, attempt, outcome.runError, now);
      break;
  }
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

/**
 * The job moved on to its next attempt, due at `runAt` and held by nobody,
 * with the attempt's log row, in one statement. The run's row is key-share
 * locked first, as the log row's foreign key locks it: the run's row before
 * its job's, the lock order of every transition.
 */
async function scheduleNextAttempt(db: Db, attempt: AttemptRecord, runAt: Date): Promise<void> {
  const run = db.$with('run').as(db.select({ id: actionRuns.id }).from(actionRuns).where(eq(actionRuns.id, attempt.runId)).for('key share'));
  const logged = attemptLogged(db, attempt);
  const rescheduled = db.$with('rescheduled').as(
    db
      .update(deliveryJobs)
      .set({ attempt: attempt.attempt + 1, runAt, leaseUntil: null, dispatchedAt: null })
      .where(and(eq(deliveryJobs.runId, attempt.runId), eq(deliveryJobs.attempt, attempt.attempt), sql`(select count(*) from ${run}) >= 0`)),
  );
  await db.with(run, logged, rescheduled).select({ runId: logged.runId }).from(logged);
}
