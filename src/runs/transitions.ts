import { and, eq, inArray, or, sql, type Placeholder, type SQL } from 'drizzle-orm';
import type { Db, Queryable, Tx } from '../db/client';
import { actionRuns, ACTIVE_RUN_STATUSES, deliveryJobs, entities, runAttempts } from '../db/schema';
import type { Logger } from '../logger';
import type { Clock } from '../platform';
import type { RunPorts } from './engine';
import type { RunRow } from './run-context';
import { notifyRunOutcomes, triggeringUser, type EndedRun } from './run-notifications';
import type { KindColumns, ReportSource, RunReport } from './trigger-kind';
import { knownKind } from './trigger-kinds';

/**
 * Every change of a run's state (SPEC "ActionRun status"), and nothing else
 * changes one:
 *
 *   pending → running                        startRun (a delivery carried out)
 *   pending → cancelled                      cancelRun
 *   active  → failed `[delivery] ...`        failDeliveryAttempt, failDelivery, failDeadLettered
 *   active  → succeeded / failed, reported   completeRun (the callback; a kind's inbound event)
 *   active  → succeeded / failed, by a move  completeRunsByEntityMove (the entity API, DECISIONS §8)
 *   active  → failed, timed out              reapTimedOutRuns
 *
 * Each is one guarded UPDATE ... WHERE status IN (<the states it may leave>)
 * RETURNING, so of a callback, a move, a cancel, a reaper and a failing
 * delivery racing for one run exactly one moves it; the others find nothing
 * to move. Whoever ends a run, in the same transaction: drops its delivery
 * job, moves its entity to the action's onSuccess / onFailure when the end
 * was reported (the move's change-log row with it), and notifies the user who
 * triggered it (./run-notifications.ts).
 *
 * Lock order: a run's entity row before the run's row (as the entity API's
 * writes and an entity's delete take them), then its delivery job, then what
 * the entity move and the notification lock.
 */

export const DELIVERY_PREFIX = '[delivery]';

export type { RunRow };

export type Transition =
  | { ok: true; run: RunRow }
  /** `deliveryInProgress`: a cancel refused because a worker is sending the run's trigger right now. */
  | { ok: false; run: RunRow | undefined; deliveryInProgress?: true };

/** The callback's body (DECISIONS §4). */
export type CallbackResult = RunReport;

/** What completing a run may need besides the database: the entity move comes from the modules. */
export interface CompletionDeps {
  clock: Clock;
  logger: Logger;
  /** Where the entity's environment is noted when it moves (the request's changedEnvironments). */
  changes: Set<string>;
  ports: Pick<RunPorts, 'moveEntityState'>;
}

const active = inArray(actionRuns.status, [...ACTIVE_RUN_STATUSES]);
const isActive = (status: string) => (ACTIVE_RUN_STATUSES as readonly string[]).includes(status);

async function current(db: Db, runId: string, envId: string): Promise<RunRow | undefined> {
  const [run] = await db
    .select()
    .from(actionRuns)
    .where(and(eq(actionRuns.id, runId), eq(actionRuns.envId, envId)))
    .limit(1);
  return run;
}

// --- the one way a run ends ------------------------------------------------------

interface Ending {
  status: 'succeeded' | 'failed';
  error: string | null;
  /** Set only when given: a run that ends without a report keeps none. */
  output?: unknown;
}

/**
 * What follows every end, in its transaction: the delivery job dropped, the
 * entity moved (when `moves` is given: a reported end), the triggering user
 * notified.
 */
async function afterEnd(tx: Tx, runs: RunRow[], at: Date, moves?: CompletionDeps): Promise<void> {
  if (runs.length === 0) return;
  await tx.delete(deliveryJobs).where(inArray(deliveryJobs.runId, runs.map((run) => run.id)));
  if (moves) {
    for (const run of runs) {
      const target = run.status === 'succeeded' ? run.onSuccess : run.onFailure;
      if (target === null || run.entityId === null) continue;
      const move = await moves.ports.moveEntityState(tx, moves, run.entityId, target);
      if (!move.moved && move.reason === 'state-not-declared') {
        moves.logger.warn('run completed without moving its entity: the state is no longer one of its type', { runId: run.id, state: target });
      }
    }
  }
  await notifyRunOutcomes(tx, runs, at);
}

/** The guarded UPDATE: the runs `which` selects that are still active end as `ending`. */
async function endRuns(tx: Tx, which: SQL | undefined, ending: Ending, at: Date, moves?: CompletionDeps): Promise<RunRow[]> {
  const runs = await tx
    .update(actionRuns)
    .set({
      status: ending.status,
      completedAt: at,
      error: ending.error,
      ...(ending.output === undefined ? {} : { output: ending.output }),
    })
    .where(and(which, active))
    .returning();
  await afterEnd(tx, runs, at, moves);
  return runs;
}

// --- delivery --------------------------------------------------------------------

/** An attempt's row in the attempt log (run_attempts), written by the statement of the outcome it led to. */
export type AttemptRecord = typeof runAttempts.$inferInsert;

/** An attempt's row as a statement takes it: its values, or placeholders for them. */
export type AttemptValues = { [K in keyof AttemptRecord]: AttemptRecord[K] | Placeholder };

/** What an attempt logged again replaces: everything but its key. */
const loggedAgain = Object.fromEntries(
  (['startedAt', 'latencyMs', 'httpStatus', 'outcome', 'error'] as const).map((key) => [key, sql`excluded.${sql.identifier(runAttempts[key].name)}`]),
);

/**
 * The attempt's log row, as a part of its outcome's statement. A worker
 * whose lease ran out may record an attempt another worker recorded first:
 * the row is then written again.
 */
export const attemptLogged = (db: Queryable, attempt: AttemptValues) =>
  db.$with('attempt_logged').as(
    db
      .insert(runAttempts)
      .values(attempt)
      .onConflictDoUpdate({ target: [runAttempts.runId, runAttempts.attempt], set: loggedAgain })
      .returning({ runId: runAttempts.runId }),
  );

/** A placeholder for each of `names`, under its own name. */
const placeholders = <K extends string>(names: readonly K[]) =>
  Object.fromEntries(names.map((name) => [name, sql.placeholder(name)])) as { [N in K]: Placeholder<N> };

const attemptKeys = ['runId', 'attempt', 'startedAt', 'latencyMs', 'httpStatus', 'outcome', 'error'] as const satisfies readonly (keyof AttemptRecord)[];

/**
 * startRun's statement for one set of kind columns: the run moved, the
 * attempt logged, the attempt's job dropped. Reading `started` makes the
 * run's UPDATE go before the job's DELETE: the run's row before its job's,
 * the lock order of every transition.
 */
function buildStart(db: Queryable, columns: readonly (keyof KindColumns)[], name: string) {
  const attempt = placeholders(attemptKeys);
  const started = db.$with('started').as(
    db
      .update(actionRuns)
      // SET takes SQL, not bare placeholders: the values come as the driver takes them (the time as ISO text)
      .set({
        ...Object.fromEntries(columns.map((name) => [name, sql`${sql.placeholder(name)}`])),
        status: 'running',
        startedAt: sql`${sql.placeholder('at')}`,
      })
      .where(and(eq(actionRuns.id, attempt.runId), eq(actionRuns.status, 'pending')))
      .returning({ id: actionRuns.id }),
  );
  const logged = attemptLogged(db, attempt);
  const dropped = db.$with('dropped').as(
    db
      .delete(deliveryJobs)
      .where(and(eq(deliveryJobs.runId, attempt.runId), eq(deliveryJobs.attempt, attempt.attempt), sql`(select count(*) from ${started}) >= 0`)),
  );
  return db
    .with(started, logged, dropped)
    .select({ started: sql<number>`(select count(*) from ${started})`.mapWith(Number) })
    .from(logged)
    .prepare(name);
}

/** startRun's statements, built once per database handle and set of kind columns: each attempt only fills one in. */
const startStatements = new WeakMap<Queryable, Map<string, ReturnType<typeof buildStart>>>();

/**
 * pending → running: its trigger was carried out; `columns` are its kind's
 * (a pull request's number, URL, ...). One statement: the run moved, the
 * attempt logged, the attempt's job dropped, each as guarded as on its own.
 */
export async function startRun(db: Queryable, attempt: AttemptRecord, at: Date, columns: KindColumns = {}, named = false): Promise<boolean> {
  const names = (Object.keys(columns) as (keyof KindColumns)[]).sort();
  let byColumns = startStatements.get(db);
  if (!byColumns) startStatements.set(db, (byColumns = new Map()));
  let statement = byColumns.get(names.join());
  if (!statement) byColumns.set(names.join(), (statement = buildStart(db, names, named ? ['cellplane_run_start', ...names].join('_') : '')));
  const [row] = await statement.execute({ ...attempt, ...columns, at: at.toISOString() });
  return (row?.started ?? 0) > 0;
}

/** A delivered attempt that sets no kind columns (a webhook's): its log row, and `at`, when it was recorded (startRun's `at`). */
export type Delivered = AttemptRecord & { outcome: 'delivered'; at: Date };

/**
 * startRuns's statement: startRun's three writes for every attempt in the
 * arrays its placeholders take (one element per attempt, unnest'ed in step).
 * Reading `started` makes the runs' UPDATE go before the jobs' DELETE, as in
 * startRun.
 */
function buildStarts(db: Queryable, name: string) {
  const input = db.$with('delivered').as(
    db
      .select({
        runId: sql<string>`run_id`.as('run_id'),
        attempt: sql<number>`attempt`.as('attempt'),
        startedAt: sql<Date>`started_at`.as('started_at'),
        latencyMs: sql<number>`latency_ms`.as('latency_ms'),
        httpStatus: sql<number | null>`http_status`.as('http_status'),
        at: sql<Date>`at`.as('at'),
      })
      .from(
        sql`unnest(${sql.placeholder('runIds')}::uuid[], ${sql.placeholder('attempts')}::integer[], ${sql.placeholder('startedAts')}::timestamptz[],
          ${sql.placeholder('latencies')}::integer[], ${sql.placeholder('statuses')}::integer[], ${sql.placeholder('ats')}::timestamptz[])
          as i(run_id, attempt, started_at, latency_ms, http_status, at)`,
      ),
  );
  const started = db.$with('started').as(
    db
      .update(actionRuns)
      .set({ status: 'running', startedAt: sql`${input.at}` })
      .from(input)
      .where(and(eq(actionRuns.id, input.runId), eq(actionRuns.status, 'pending')))
      .returning({ id: actionRuns.id }),
  );
  const logged = db.$with('attempt_logged').as(
    db
      .insert(runAttempts)
      .select(
        db
          .select({
            runId: input.runId,
            attempt: input.attempt,
            startedAt: input.startedAt,
            latencyMs: input.latencyMs,
            httpStatus: input.httpStatus,
            outcome: sql<'delivered'>`'delivered'`.as('outcome'),
            error: sql<null>`null`.as('error'),
          })
          .from(input),
      )
      .onConflictDoUpdate({ target: [runAttempts.runId, runAttempts.attempt], set: loggedAgain })
      .returning({ runId: runAttempts.runId }),
  );
  const dropped = db.$with('dropped').as(
    db
      .delete(deliveryJobs)
      .where(
        and(
          sql`(${deliveryJobs.runId}, ${deliveryJobs.attempt}) in (select ${input.runId}, ${input.attempt} from ${input})`,
          sql`(select count(*) from ${started}) >= 0`,
        ),
      ),
  );
  return db.with(input, started, logged, dropped).select({ id: started.id }).from(started).prepare(name);
}

const startsStatements = new WeakMap<Queryable, ReturnType<typeof buildStarts>>();

/**
 * startRun for several delivered attempts at once, in one statement (the Node
 * job runner's group commit, src/runs/group-commit.ts): each run moved,
 * logged and its job dropped exactly as startRun does it. Resolves with the
 * ids of the runs it moved to `running` (one that had ended meanwhile is
 * logged, and its job dropped, but not moved).
 */
export async function startRuns(db: Queryable, delivered: readonly Delivered[], named = false): Promise<Set<string>> {
  let statement = startsStatements.get(db);
  if (!statement) startsStatements.set(db, (statement = buildStarts(db, named ? 'cellplane_run_starts' : '')));
  // in the order of their ids: a plan that walks the arrays in order locks shared runs in one order; a deadlock
  // another plan allows fails the group, which its caller then writes one run at a time (GroupCommit)
  const sorted = [...delivered].sort((a, b) => (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0));
  const rows = await statement.execute({
    runIds: sorted.map((one) => one.runId),
    attempts: sorted.map((one) => one.attempt),
    startedAts: sorted.map((one) => one.startedAt.toISOString()),
    latencies: sorted.map((one) => one.latencyMs),
    statuses: sorted.map((one) => one.httpStatus ?? null),
    ats: sorted.map((one) => one.at.toISOString()),
  });
  return new Set(rows.map((row) => row.id));
}

/**
 * active → failed: the attempt's delivery failed for good (`error` starts
 * with DELIVERY_PREFIX); the entity stays where it is. The run, the attempt's
 * log row and its job (dropped also when the run had ended meanwhile) in one
 * statement, afterEnd's notification with it: in one transaction when the
 * run's triggering user may be notified, else that statement alone.
 */
export async function failDeliveryAttempt(
  db: Db,
  run: Pick<RunRow, 'triggeredBy'>,
  attempt: AttemptRecord,
  error: string,
  at: Date,
): Promise<RunRow[]> {
  const fail = (q: Queryable) => {
    const ended = q.$with('ended').as(
      q
        .update(actionRuns)
        .set({ status: 'failed', completedAt: at, error })
        .where(and(eq(actionRuns.id, attempt.runId), active))
        .returning(),
    );
    const logged = attemptLogged(q, attempt);
    // the main query reads `ended` first: the run's row before its job's
    const dropped = q.$with('dropped').as(
      q
        .delete(deliveryJobs)
        .where(and(eq(deliveryJobs.runId, attempt.runId), or(eq(deliveryJobs.attempt, attempt.attempt), sql`exists (select 1 from ${ended})`))),
    );
    return q.with(ended, logged, dropped).select().from(ended);
  };
  // notifyRunOutcomes writes nothing, and reads nothing, for a run no user triggered (a token's, bootstrap's)
  if (triggeringUser(run.triggeredBy) === null) return fail(db);
  return db.transaction(async (tx) => {
    const runs = await fail(tx);
    await notifyRunOutcomes(tx, runs, at);
    return runs;
  });
}

/**
 * active → failed: its delivery failed for good outside an attempt the engine
 * records (a pull request's post-merge dispatch; `error` starts with
 * DELIVERY_PREFIX). The entity stays where it is.
 */
export async function failDelivery(tx: Tx, runId: string, error: string, at: Date): Promise<RunRow[]> {
  return endRuns(tx, eq(actionRuns.id, runId), { status: 'failed', error }, at);
}

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
    const failed = await endRuns(
      tx,
      and(eq(actionRuns.id, runId), eq(actionRuns.status, 'pending')),
      {
        status: 'failed',
        error: `${DELIVERY_PREFIX} the delivery could not be processed (its queue message was dead-lettered after repeated consumer failures)`,
      },
      clock.now(),
    );
    return failed.length > 0;
  });
}

// --- cancel ----------------------------------------------------------------------

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

// --- completion ------------------------------------------------------------------

/**
 * active → succeeded / failed, as reported (the callback, or an inbound
 * event of the run's kind); the entity moves to the action's onSuccess /
 * onFailure in the same transaction. The run's kind may read the report
 * first (TriggerKind.complete): a report it does not take as the end leaves
 * the run as it is.
 */
export async function completeRun(
  db: Db,
  deps: CompletionDeps,
  runId: string,
  envId: string,
  report: RunReport,
  source: ReportSource = 'callback',
): Promise<Transition> {
  const now = deps.clock.now();
  const outcome = await db.transaction(async (tx): Promise<{ ended?: RunRow; kept?: RunRow }> => {
    // unlocked: its entity and trigger never change but for the entity's deletion, and the guarded UPDATE decides
    const [run] = await tx
      .select()
      .from(actionRuns)
      .where(and(eq(actionRuns.id, runId), eq(actionRuns.envId, envId)))
      .limit(1);
    if (!run || !isActive(run.status)) return {};
    if (run.entityId !== null) await tx.select({ id: entities.id }).from(entities).where(eq(entities.id, run.entityId)).for('update');
    const kind = knownKind((run.trigger as { type: string }).type);
    const ending = kind && 'complete' in kind && kind.complete ? kind.complete(run, report, source) : report;
    if (ending === null) return { kept: run };
    const [ended] = await endRuns(
      tx,
      and(eq(actionRuns.id, runId), eq(actionRuns.envId, envId)),
      {
        status: ending.status,
        error: ending.status === 'failed' ? ending.error : null,
        output: ending.output === undefined ? null : ending.output,
      },
      now,
      deps,
    );
    return { ended };
  });
  if (outcome.ended) return { ok: true, run: outcome.ended };
  if (outcome.kept) return { ok: true, run: outcome.kept };
  return { ok: false, run: await current(db, runId, envId) };
}

/**
 * The entity API moved an entity to `state` (DECISIONS §8): each of its
 * active runs whose action ends there completes — succeeded at its
 * onSuccess, failed at its onFailure (onSuccess first, should both name the
 * state). Called inside the move's transaction with the entity's row locked;
 * the move itself, and its change-log row, are the caller's: nothing is
 * moved again. A run ended by another path first is not touched.
 */
export async function completeRunsByEntityMove(tx: Tx, clock: Clock, move: { entityId: string; state: string }): Promise<RunRow[]> {
  const now = clock.now();
  const reachedSuccess = sql`${actionRuns.onSuccess} = ${move.state}`;
  const runs = await tx
    .update(actionRuns)
    .set({
      status: sql`case when ${reachedSuccess} then 'succeeded' else 'failed' end`,
      completedAt: now,
      error: sql`case when ${reachedSuccess} then null else ${`the entity was moved to "${move.state}", the action's onFailure state, through the API`} end`,
    })
    .where(
      and(
        eq(actionRuns.entityId, move.entityId),
        active,
        sql`(${actionRuns.onSuccess} = ${move.state} or ${actionRuns.onFailure} = ${move.state})`,
      ),
    )
    .returning();
  await afterEnd(tx, runs, now);
  return runs;
}

// --- timeouts --------------------------------------------------------------------

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
