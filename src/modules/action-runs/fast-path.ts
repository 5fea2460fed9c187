import { and, eq, sql, type SQL } from 'drizzle-orm';
import { plainAccessColumns, plainEnvironmentAccess, type EnvRef } from '../../auth/access';
import { accessEpochRow, accessEpochValue, currentAccessEpoch, plainCallerKey, settleAndRemember } from '../../auth/plain-callers';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { accessEpoch, actionRuns, actions, deliveryJobs, entities } from '../../db/schema';
import type { DeliveryJob } from '../../runs/delivery';
import type { RunRow } from '../../runs/transitions';
import { oncePerHandle, perHandle, plainAccessValues } from '../one-statement';

/**
 * The trigger's round trips (POST ENV/entities/{name}/actions/{action}), as
 * the entity fast paths do it (src/modules/entities/fast-paths.ts): what
 * the trigger reads, the token and tenancy check folded in, in one
 * statement; and the run with its delivery job in another, built once.
 * A read that matches nothing (any answer but a plain success: an unknown
 * or scoped token, another tenant, a missing entity or action) sends the
 * request down the usual path, which gives the answer as before. A caller
 * whose plain answer is remembered (src/auth/plain-callers.ts) is checked
 * by the access epoch instead of the four tables, as the entity GET does.
 */

const plainTriggerRead = perHandle((db, shape, name) => {
  const caller = plainEnvironmentAccess(db, shape, 'data:write').as('caller');
  return db
    .select({ caller: plainAccessColumns(caller), epoch: currentAccessEpoch().as('access_epoch'), entity: entities, action: actions })
    .from(caller)
    .innerJoin(entities, and(eq(entities.envId, caller.envId), eq(entities.name, sql.placeholder('entity'))))
    .innerJoin(actions, and(eq(actions.projectId, caller.projectId), eq(actions.name, sql.placeholder('action'))))
    .limit(1)
    .prepare(name);
}, 'cellplane_trigger_read');

/**
 * The same read for a remembered caller: the access epoch now, and the
 * entity and action in its environment and project (null where missing).
 * Exported unprepared for the bench's least work (bench/http/least-trigger.ts).
 */
export function rememberedTriggerReadQuery(db: Queryable) {
  return db
    .select({ epoch: accessEpochValue().as('access_epoch'), entity: entities, action: actions })
    .from(accessEpoch)
    .leftJoin(entities, and(eq(entities.envId, sql.placeholder('envId')), eq(entities.name, sql.placeholder('entity'))))
    .leftJoin(actions, and(eq(actions.projectId, sql.placeholder('projectId')), eq(actions.name, sql.placeholder('action'))))
    .where(accessEpochRow())
    .limit(1);
}

const rememberedTriggerRead = oncePerHandle((db, name) => rememberedTriggerReadQuery(db).prepare(name), 'cellplane_trigger_read_remembered');

export type TriggerRead = {
  tenancy: { orgId: string; projectId: string; envId: string };
  entity: typeof entities.$inferSelect;
  action: typeof actions.$inferSelect;
};

/**
 * The tenancy, entity and action of a trigger by a caller without cell
 * scopes, holding data:write here, when both exist: the caller settled.
 * Undefined for anything else.
 */
export async function readTriggerPlainly(ctx: ServiceContext, ref: EnvRef, entityName: string, actionName: string): Promise<TriggerRead | undefined> {
  const access = plainAccessValues(ctx, ref);
  if (!access) return undefined;
  const key = plainCallerKey(access.tokenHash, ref, 'data:write');
  const remembered = ctx.plainCallers?.recall(key, access.now);
  if (remembered) {
    const { orgId, projectId, envId } = remembered.row;
    const [row] = await rememberedTriggerRead(ctx).execute({ envId, projectId, entity: entityName, action: actionName });
    if (row?.epoch === remembered.epoch) {
      // nothing the answer rests on has changed; a missing entity or action is the usual way's 404
      if (!row.entity || !row.action) return undefined;
      ctx.callerState.settle(remembered.caller);
      return { tenancy: { orgId, projectId, envId }, entity: row.entity, action: row.action };
    }
    // something moved the epoch since: the token is checked in full, and remembered again
    ctx.plainCallers?.forget(key);
  }
  const [row] = await plainTriggerRead(ctx, ref).execute({ ...access.values, entity: entityName, action: actionName });
  if (!row) return undefined;
  settleAndRemember(ctx, key, row.caller, row.epoch, ref, access.now);
  const { orgId, projectId, envId } = row.caller;
  return { tenancy: { orgId, projectId, envId }, entity: row.entity, action: row.action };
}

type RunInsert = typeof actionRuns.$inferInsert;
/** Every column the trigger writes, by name: each a placeholder of the prepared insert. */
const RUN_COLUMNS = [
  'id',
  'orgId',
  'projectId',
  'envId',
  'callbackBaseUrl',
  'actionId',
  'actionName',
  'entityId',
  'operationEntityName',
  'status',
  'parameters',
  'recommendations',
  'triggeredBy',
  'trigger',
  'entitySnapshot',
  'onSuccess',
  'onFailure',
  'idempotencyKey',
  'requestFingerprint',
  'timeoutMinutes',
  'timeoutAt',
  'createdAt',
  'repo',
  'prNumber',
  'prUrl',
  'headSha',
] as const satisfies readonly (keyof RunInsert)[];

export type NewRun = { [K in (typeof RUN_COLUMNS)[number]]-?: Exclude<RunInsert[K], undefined | SQL> };

/**
 * The run and its first delivery job, one statement; every value a
 * placeholder (RUN_COLUMNS, and `leaseUntil`). Exported unprepared for the
 * bench's least work (bench/http/least-trigger.ts).
 */
export function runInsertQuery(db: Queryable) {
  const values = Object.fromEntries(RUN_COLUMNS.map((column) => [column, sql.placeholder(column)])) as unknown as RunInsert;
  // the two jsonb values the 202 echoes, as Postgres stores them (its order of an object's members): the rest are the trigger's own
  const inserted = db
    .$with('inserted')
    .as(db.insert(actionRuns).values(values).returning({ parameters: actionRuns.parameters, recommendations: actionRuns.recommendations }));
  const queued = db.$with('queued').as(
    db
      .insert(deliveryJobs)
      .values({
        runId: sql.placeholder('id'),
        envId: sql.placeholder('envId'),
        attempt: 1,
        runAt: sql.placeholder('createdAt'),
        // null, or a slot of this host's runner (DeliveryScheduler.reserve): as text, since a timestamp column's encoder takes no null
        leaseUntil: sql`${sql.placeholder('leaseUntil')}::timestamptz`,
        createdAt: sql.placeholder('createdAt'),
      } as unknown as typeof deliveryJobs.$inferInsert)
      .returning({ runId: deliveryJobs.runId }),
  );
  return db.with(inserted, queued).select({ parameters: inserted.parameters, recommendations: inserted.recommendations }).from(inserted);
}

const runInsert = oncePerHandle((db, name) => runInsertQuery(db).prepare(name), 'cellplane_trigger_insert');

/**
 * The run and its first delivery job in one statement: both commit, or
 * neither (the outbox). The job is leased until `leaseUntil` when a runner's
 * slot takes it at once, else held by nobody. Built once per database handle.
 *
 * The run written is `run` and the columns a new run leaves empty, with the
 * two jsonb values the 202 echoes (parameters, recommendations) read back as
 * stored: Postgres orders an object's members its own way, and the 202 must
 * be the bytes a GET gives. The rest is not read back: returning the whole
 * row decoded 30 columns, the trigger and the entity snapshot among them,
 * for values the trigger already has (bench/http-results.md, "2026-11-29,
 * evening").
 */
export async function insertRunWithJob(ctx: ServiceContext, run: NewRun, leaseUntil: Date | null): Promise<{ run: RunRow; job: DeliveryJob }> {
  const [stored] = await runInsert(ctx).execute({ ...run, leaseUntil: leaseUntil?.toISOString() ?? null });
  if (!stored) throw new Error(`the run ${run.id} was not written`);
  const job = { runId: run.id, envId: run.envId, attempt: 1, runAt: run.createdAt, leaseUntil, dispatchedAt: null, createdAt: run.createdAt };
  return { run: { ...run, ...stored, startedAt: null, completedAt: null, error: null, output: null }, job };
}
