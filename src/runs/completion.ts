import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { actionRuns, ACTIVE_RUN_STATUSES, deliveryJobs } from '../db/schema';
import type { Logger } from '../logger';
import { moveEntityState } from '../modules/entities/state-move';
import type { Clock } from '../platform';
import { DELIVERY_PREFIX } from './delivery';
import { notifyRunOutcomes, type EndedRun } from './run-notifications';

/**
 * The terminal transitions of a run (SPEC "ActionRun status"). Each is one
 * guarded UPDATE ... WHERE status IN (<the states it may leave>), so of a
 * callback, a cancel, a reaper and a failing delivery racing for one run,
 * exactly one moves it; the others find nothing to move. Whoever ends a run
 * also drops its delivery job, and notifies the user who triggered it
 * (./run-notifications.ts), in the same transaction.
 */

export type RunRow = typeof actionRuns.$inferSelect;

export type Transition =
  | { ok: true; run: RunRow }
  /** `deliveryInProgress`: a cancel refused because a worker is sending the run's trigger right now. */
  | { ok: false; run: RunRow | undefined; deliveryInProgress?: true };

const active = inArray(actionRuns.status, [...ACTIVE_RUN_STATUSES]);

async function current(db: Db, runId: string, envId: string): Promise<RunRow | undefined> {
  const [run] = await db
    .select()
    .from(actionRuns)
    .where(and(eq(actionRuns.id, runId), eq(actionRuns.envId, envId)))
    .limit(1);
  return run;
}

/**
 * pending → cancelled, unless a worker holds the run's job: its request may
 * already be at the receiver, and a run both cancelled and delivered is the
 * one outcome a cancel must not produce. The caller gets the run still
 * pending, with `deliveryInProgress`; once the attempt is recorded (or a dead
 * worker's lease runs out) the run can be cancelled again, or is running.
 *
 * Locks the run's row, then its job's, the order of every other transition;
 * a worker's claim skips the locked job (FOR UPDATE SKIP LOCKED), or, having
 * leased it first, is seen here.
 */
export async function cancelRun(db: Db, clock: Clock, runId: string, envId: string): Promise<Transition> {
  const now = clock.now();
  const outcome = await db.transaction(async (tx): Promise<{ run?: RunRow; deliveryInProgress?: true }> => {
    const [pending] = await tx
      .select({ id: actionRuns.id })
      .from(actionRuns)
      .where(and(eq(actionRuns.id, runId), eq(actionRuns.envId, envId), eq(actionRuns.status, 'pending')))
      .for('no key update');
    if (!pending) return {};
    const [job] = await tx
      .select({ leaseUntil: deliveryJobs.leaseUntil })
      .from(deliveryJobs)
      .where(eq(deliveryJobs.runId, runId))
      .for('update');
    // leased means held: a claim takes only jobs whose lease_until < now
    if (job?.leaseUntil && job.leaseUntil >= now) return { deliveryInProgress: true };
    const [run] = await tx
      .update(actionRuns)
      .set({ status: 'cancelled', completedAt: now })
      .where(eq(actionRuns.id, runId))
      .returning();
    await tx.delete(deliveryJobs).where(eq(deliveryJobs.runId, runId));
    return { run };
  });
  if (outcome.run) return { ok: true, run: outcome.run };
  return { ok: false, run: await current(db, runId, envId), ...(outcome.deliveryInProgress ? { deliveryInProgress: true } : {}) };
}

export type CallbackResult = { status: 'succeeded'; output?: unknown } | { status: 'failed'; error: string; output?: unknown };

/**
 * active → succeeded / failed, as the external workflow reports; the entity
 * moves to the action's onSuccess / onFailure in the same transaction.
 */
export async function completeRun(
  db: Db,
  /** `changes`: where the entity's environment is noted when it moves (the request's changedEnvironments). */
  deps: { clock: Clock; logger: Logger; changes: Set<string> },
  runId: string,
  envId: string,
  result: CallbackResult,
): Promise<Transition> {
  const now = deps.clock.now();
  const completed = await db.transaction(async (tx) => {
    const [run] = await tx
      .update(actionRuns)
      .set({
        status: result.status,
        completedAt: now,
        output: result.output === undefined ? null : result.output,
        error: result.status === 'failed' ? result.error : null,
      })
      .where(and(eq(actionRuns.id, runId), eq(actionRuns.envId, envId), active))
      .returning();
    if (!run) return undefined;
    await tx.delete(deliveryJobs).where(eq(deliveryJobs.runId, run.id));
    const target = result.status === 'succeeded' ? run.onSuccess : run.onFailure;
    if (target !== null && run.entityId !== null) {
      const move = await moveEntityState(tx, deps, run.entityId, target);
      if (!move.moved && move.reason === 'state-not-declared') {
        deps.logger.warn('run completed without moving its entity: the state is no longer one of its type', {
          runId: run.id,
          state: target,
        });
      }
    }
    await notifyRunOutcomes(tx, [run], now);
    return run;
  });
  return completed ? { ok: true, run: completed } : { ok: false, run: await current(db, runId, envId) };
}

/**
 * Active runs past their deadline become failed, in one statement; run
 * twice, or by two reapers at once, it fails each run once. A run still
 * pending never got its trigger delivered, and its error says so. The
 * notifications of the reaped runs are written in the same transaction.
 */
export async function reapTimedOutRuns(db: Db, clock: Clock): Promise<string[]> {
  const now = clock.now();
  return db.transaction(async (tx) => {
    const result = await tx.execute(sql`
      with reaped as (
        update ${actionRuns}
        set status = 'failed',
            completed_at = ${now},
            error = case when status = 'pending'
              then ${`${DELIVERY_PREFIX} timed out after `} || timeout_minutes || (case when timeout_minutes = 1 then ' minute' else ' minutes' end)
                || ' before the trigger could be delivered'
              else 'timed out after ' || timeout_minutes || (case when timeout_minutes = 1 then ' minute' else ' minutes' end)
                || ' without a completion'
            end
        where status in ('pending', 'running') and timeout_at <= ${now}
        returning id, org_id, project_id, env_id, action_name, operation_entity_name, triggered_by, status, error
      ), dropped as (
        delete from ${deliveryJobs} where run_id in (select id from reaped)
      )
      select * from reaped`);
    const reaped = (result as unknown as { rows: ReapedRow[] }).rows.map(endedRunOf);
    await notifyRunOutcomes(tx, reaped, now);
    return reaped.map((run) => run.id);
  });
}

/** A row of the reaper's raw statement: its columns by their SQL names. */
interface ReapedRow {
  id: string;
  org_id: string;
  project_id: string;
  env_id: string;
  action_name: string;
  operation_entity_name: string | null;
  triggered_by: string;
  status: 'failed';
  error: string | null;
}

const endedRunOf = (row: ReapedRow): EndedRun => ({
  id: row.id,
  orgId: row.org_id,
  projectId: row.project_id,
  envId: row.env_id,
  actionName: row.action_name,
  operationEntityName: row.operation_entity_name,
  triggeredBy: row.triggered_by,
  status: row.status,
  error: row.error,
});

/**
 * Worker: a delivery message that failed in the consumer past the queue's
 * retries. Only the attempt it stood for is given up: when the job has moved
 * on (a duplicate or swept message delivered it, or scheduled a later
 * attempt), the dead letter is stale and the run is left alone.
 */
export async function failDeadLettered(db: Db, clock: Clock, runId: string, attempt: number): Promise<boolean> {
  return db.transaction(async (tx) => {
    const [job] = await tx
      .delete(deliveryJobs)
      .where(and(eq(deliveryJobs.runId, runId), eq(deliveryJobs.attempt, attempt)))
      .returning({ runId: deliveryJobs.runId });
    if (!job) return false;
    const now = clock.now();
    const [run] = await tx
      .update(actionRuns)
      .set({
        status: 'failed',
        completedAt: now,
        error: `${DELIVERY_PREFIX} the delivery could not be processed (its queue message was dead-lettered after repeated consumer failures)`,
      })
      .where(and(eq(actionRuns.id, runId), eq(actionRuns.status, 'pending')))
      .returning();
    if (!run) return false;
    await notifyRunOutcomes(tx, [run], now);
    return true;
  });
}
