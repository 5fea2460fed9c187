import { and, asc, desc, eq, gte, inArray, lt, or, sql, type SQL } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import { bearerCredential } from '../../auth/caller';
import { signCallbackToken, verifyCallbackToken, type CallbackClaims } from '../../auth/callback-token';
import type { Caller, ServiceContext } from '../../context';
import { violatedUniqueConstraint } from '../../db/errors';
import type { Queryable } from '../../db/client';
import { actionRuns, entities, environments, orgs, projects, runAttempts } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { decodeCursor, splitPage } from '../../http/pagination';
import type { TriggerDefinition } from '../../runs/trigger-kind';
import { dryRunTrigger, kindForTrigger } from '../../runs/trigger';
import { cancelRun, completeRun, type RunRow, type Transition } from '../../runs/transitions';
import { conditionSubject, failedConditions, getActionRow } from '../actions/service';
import type { CellConstraint } from '../catalog-items';
import { callerCellScope } from '../cells/membership';
import { entityForWrite } from '../entities/service';
import { isUuid } from '../names';
import { validateProperties, type PropertyDefinition } from '../properties';
import { insertRunWithJob, readTriggerPlainly, type NewRun, type TriggerRead } from './fast-path';
import { runPorts } from './run-ports';
import type { ActionRun, ActionRunListRow, CallbackRequest, RunListQuery, TriggerRequest } from './schemas';

/**
 * Action runs: trigger (a run and its delivery job, one transaction), list,
 * get, cancel, and the per-run callback. What depends on the trigger's kind
 * (its dry run, its delivery), the reaper and every change of a run's state
 * live in src/runs/.
 */

type AttemptRow = typeof runAttempts.$inferSelect;

const runFields = (row: RunRow) => ({
  id: row.id,
  actionName: row.actionName,
  entityId: row.entityId,
  status: row.status,
  parameters: row.parameters as Record<string, unknown>,
  recommendations: row.recommendations as Record<string, unknown>,
  triggeredBy: row.triggeredBy,
  createdAt: timestamp(row.createdAt),
  startedAt: optionalTimestamp(row.startedAt),
  completedAt: optionalTimestamp(row.completedAt),
  error: row.error,
  output: row.output as Record<string, unknown> | null,
  // a pull-request run's pull request (DECISIONS §8)
  ...(row.repo === null ? {} : { repo: row.repo, prNumber: row.prNumber, prUrl: row.prUrl, headSha: row.headSha }),
});

const toAttempt = (row: AttemptRow) => ({
  attempt: row.attempt,
  startedAt: timestamp(row.startedAt),
  latencyMs: row.latencyMs,
  httpStatus: row.httpStatus,
  outcome: row.outcome,
  error: row.error,
});

async function withAttempts(db: Queryable, row: RunRow): Promise<ActionRun> {
  const attempts = await db.select().from(runAttempts).where(eq(runAttempts.runId, row.id)).orderBy(asc(runAttempts.attempt));
  return { ...runFields(row), attempts: attempts.map(toAttempt) };
}

const triggeredBy = ({ principal }: Caller): string =>
  principal.kind === 'service-token' ? `token:${principal.tokenId}` : principal.kind === 'user-session' ? `user:${principal.userId}` : principal.kind === 'local-operator' ? 'local' : 'bootstrap';

/**
 * JSON with every object's members sorted by name: a client that retries
 * with the same body re-serialized (a map in another order) sends the same
 * request, and must not be told its key was used for another one.
 */
const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_key, member: unknown) =>
    member !== null && typeof member === 'object' && !Array.isArray(member)
      ? Object.fromEntries(Object.entries(member).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : member,
  );

/** What an Idempotency-Key stands for: the action, the entity and the body, hashed. */
async function fingerprint(parts: { action: string; entity: string; input: TriggerRequest }): Promise<string> {
  const text = canonicalJson([parts.action, parts.entity, parts.input.parameters ?? {}, parts.input.recommendations ?? {}]);
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, '0')).join('');
}

/** The run an earlier trigger with this key created; 422 when the key was used for another request. */
async function replayOf(db: Queryable, envId: string, key: string, requestFingerprint: string): Promise<RunRow | undefined> {
  const [earlier] = await db
    .select()
    .from(actionRuns)
    .where(and(eq(actionRuns.envId, envId), eq(actionRuns.idempotencyKey, key)))
    .limit(1);
  if (earlier && earlier.requestFingerprint !== requestFingerprint) {
    throw new ApiError(
      'idempotency_key_reused',
      'this Idempotency-Key was already used for a different trigger (another action, entity, or body); use a new key',
    );
  }
  return earlier;
}

function validatedParameters(definitions: PropertyDefinition[], values: Record<string, unknown>): Record<string, unknown> {
  const result = validateProperties(definitions, values, { fillDefaults: true, path: 'parameters' });
  if (!result.ok) {
    throw new ApiError(
      'validation_failed',
      `parameters do not match the action's definitions: ${result.details.map((d) => `${d.path} ${d.message}`).join('; ')}`,
      result.details,
    );
  }
  return result.values;
}

/**
 * The base of `{{ run.callbackUrl }}`: API_BASE_URL, which every host sets
 * (the Worker and a Node host with DATABASE_URL refuse to start without it;
 * the embedded Node host defaults it to its listening address). A host that
 * gets here without one is wired wrong: fail, never fall back to the Host
 * header, which the caller chooses.
 */
function callbackBase(ctx: ServiceContext): string {
  if (!ctx.config.apiBaseUrl) throw new Error('API_BASE_URL is not configured; callback URLs cannot be built');
  return ctx.config.apiBaseUrl;
}

/**
 * Two independent reads at once; when both fail, the first one's error is
 * the answer, as if they had run in order.
 */
async function bothOrFirstError<A, B>(first: Promise<A>, second: Promise<B>): Promise<[A, B]> {
  const [a, b] = await Promise.allSettled([first, second]);
  if (a.status === 'rejected') throw a.reason;
  if (b.status === 'rejected') throw b.reason;
  return [a.value, b.value];
}

/**
 * What a trigger reads, the usual way: access to the environment (401, 403,
 * 404 as everywhere), the caller's cells, then the entity (404, or outside
 * the caller's cells) and the action (404), read at once.
 */
async function readTrigger(ctx: ServiceContext, ref: EnvRef, entityName: string, actionName: string): Promise<TriggerRead> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const scope = await callerCellScope(ctx, project.id);
  const [entity, action] = await bothOrFirstError(
    entityForWrite(ctx.db, env.id, entityName, scope, { lock: false }),
    getActionRow(ctx.db, project.id, actionName),
  );
  return { tenancy: { orgId: project.orgId, projectId: project.id, envId: env.id }, entity, action };
}

export interface TriggerOptions {
  idempotencyKey?: string;
}

/**
 * `POST ENV/entities/{name}/actions/{action}`: checks everything a delivery
 * could know now (the trigger's kind runs here, the action applies and its
 * conditions hold, parameters, and the kind's dry run: for a webhook, every
 * template reference and the URL's form), then writes the run and its
 * delivery job in one transaction (the outbox) and tells the host.
 */
export async function triggerAction(
  ctx: ServiceContext,
  ref: EnvRef,
  entityName: string,
  actionName: string,
  input: TriggerRequest,
  options: TriggerOptions,
): Promise<{ run: ActionRun; replayed: boolean }> {
  const { tenancy, entity, action } = (await readTriggerPlainly(ctx, ref, entityName, actionName)) ?? (await readTrigger(ctx, ref, entityName, actionName));
  if (action.entityTypeName !== entity.entityTypeName) {
    throw notFound(`action "${actionName}" for entities of type "${entity.entityTypeName}"`);
  }
  // what an Idempotency-Key stands for; without one there is nothing to compare
  const requestFingerprint = options.idempotencyKey === undefined ? null : await fingerprint({ action: action.id, entity: entity.id, input });
  if (options.idempotencyKey !== undefined) {
    const earlier = await replayOf(ctx.db, tenancy.envId, options.idempotencyKey, requestFingerprint!);
    if (earlier) return { run: await withAttempts(ctx.db, earlier), replayed: true };
  }
  const trigger = action.trigger as TriggerDefinition;
  // a kind this server does not run is 501 before anything else is judged
  const kind = kindForTrigger(trigger);
  const conditions = action.conditions as CellConstraint[];
  const failures = conditions.length === 0 ? [] : failedConditions(conditions, await conditionSubject(ctx.db, entity));
  if (failures.length > 0) {
    throw new ApiError(
      'action_unavailable',
      `action "${actionName}" is not available for entity "${entityName}": ${failures.join('; ')}`,
      failures.map((message) => ({ path: 'conditions', message })),
    );
  }
  const parameters = validatedParameters(action.parameters as PropertyDefinition[], input.parameters ?? {});

  const runId = crypto.randomUUID();
  const now = ctx.clock.now();
  const run = { id: runId, ...tenancy, callbackBaseUrl: callbackBase(ctx) };
  const entitySnapshot = { id: entity.id, name: entity.name, properties: entity.properties as Record<string, unknown> };
  const kindColumns = await dryRunTrigger(kind, { db: ctx.db, config: ctx.config, ports: runPorts }, trigger, { ...run, parameters, entitySnapshot });

  const timeoutAt = new Date(now.getTime() + action.timeoutMinutes * 60_000);
  const newRun: NewRun = {
    ...run,
    repo: kindColumns.repo ?? null,
    prNumber: kindColumns.prNumber ?? null,
    prUrl: kindColumns.prUrl ?? null,
    headSha: kindColumns.headSha ?? null,
    actionId: action.id,
    actionName: action.name,
    entityId: entity.id,
    operationEntityName: entity.name,
    status: 'pending',
    parameters,
    recommendations: input.recommendations ?? {},
    triggeredBy: triggeredBy(ctx.caller),
    trigger,
    entitySnapshot,
    onSuccess: action.onSuccess,
    onFailure: action.onFailure,
    idempotencyKey: options.idempotencyKey ?? null,
    requestFingerprint,
    timeoutMinutes: action.timeoutMinutes,
    timeoutAt,
    createdAt: now,
  };
  let row: RunRow;
  // a free slot of this host's job runner takes the job as it is written, leased to it: no claim before the first attempt
  const slot = ctx.deliveries.reserve?.();
  try {
    const [written, callbackToken] = await Promise.all([
      // the run and its delivery job in one statement: both commit, or neither (the outbox)
      insertRunWithJob(ctx, newRun, slot?.leaseUntil ?? null),
      // the slot's first attempt goes out at once, its callback token signed while the insert is out (meanwhile:
      // signed in this turn, before the pool's next tick writes the insert, it held the insert back);
      // should signing fail here, the attempt signs for itself and meets the failure there
      slot?.meanwhile(() => signCallbackToken(ctx.config.authSecret, { runId, ...tenancy }, timeoutAt, now, ctx.signHs256)).catch(() => undefined),
    ]);
    row = written.run;
    slot?.start({ ...written, callbackToken });
  } catch (error) {
    slot?.release();
    // the same key, sent twice at once: the second finds the first's run
    if (options.idempotencyKey !== undefined && violatedUniqueConstraint(error) !== undefined) {
      const earlier = await replayOf(ctx.db, tenancy.envId, options.idempotencyKey, requestFingerprint!);
      if (earlier) return { run: await withAttempts(ctx.db, earlier), replayed: true };
    }
    throw error;
  }
  if (slot) return { run: { ...runFields(row), attempts: [] }, replayed: false };
  try {
    await ctx.deliveries.schedule({ runId, attempt: 1, runAt: now });
  } catch (error) {
    // the job is committed; the sweep delivers it
    ctx.logger.warn('could not schedule a delivery at once; the sweep will', { runId, error });
  }
  return { run: { ...runFields(row), attempts: [] }, replayed: false };
}

// --- reads -------------------------------------------------------------------

/**
 * Runs a cell-scoped token may see: those on entities inside its cells. A
 * run whose entity is gone has no cell, so only unscoped callers see it.
 */
const runInScope = (scope: SQL | undefined): SQL | undefined =>
  scope ? sql`exists (select 1 from ${entities} where ${entities.id} = ${actionRuns.entityId} and ${scope})` : undefined;

async function visibleRun(ctx: ServiceContext, envId: string, projectId: string, id: string): Promise<RunRow> {
  if (!isUuid(id)) throw notFound(`action run "${id}"`);
  const scope = await callerCellScope(ctx, projectId);
  const [row] = await ctx.db
    .select()
    .from(actionRuns)
    .where(and(eq(actionRuns.envId, envId), eq(actionRuns.id, id), runInScope(scope)))
    .limit(1);
  if (!row) throw notFound(`action run "${id}"`);
  return row;
}

export async function getRun(ctx: ServiceContext, ref: EnvRef, id: string): Promise<ActionRun> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  return withAttempts(ctx.db, await visibleRun(ctx, env.id, project.id, id));
}

/** Newest first; the keyset is (createdAt, id), both descending. */
export async function listRuns(ctx: ServiceContext, ref: EnvRef, query: RunListQuery): Promise<{ rows: ActionRunListRow[]; next: string | null }> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  const statuses = query.status === undefined ? undefined : Array.isArray(query.status) ? query.status : [query.status];
  const conditions: (SQL | undefined)[] = [
    eq(actionRuns.envId, env.id),
    runInScope(scope),
    statuses ? inArray(actionRuns.status, statuses) : undefined,
    query.action ? eq(actionRuns.actionName, query.action) : undefined,
    query.entity ? eq(actionRuns.operationEntityName, query.entity) : undefined,
    query.since ? gte(actionRuns.createdAt, new Date(query.since)) : undefined,
  ];
  if (query.cursor) {
    const [createdAt, id] = decodeCursor(query.cursor, 2) as [string, string];
    const at = new Date(createdAt);
    if (Number.isNaN(at.getTime()) || !isUuid(id)) throw new ApiError('validation_failed', 'cursor is not valid', [{ path: 'cursor', message: 'is not a cursor this endpoint issued' }]);
    conditions.push(or(lt(actionRuns.createdAt, at), and(eq(actionRuns.createdAt, at), lt(actionRuns.id, id))));
  }
  const rows = await ctx.db
    .select({ run: actionRuns, entityName: entities.name })
    .from(actionRuns)
    .leftJoin(entities, eq(entities.id, actionRuns.entityId))
    .where(and(...conditions))
    .orderBy(desc(actionRuns.createdAt), desc(actionRuns.id))
    .limit(query.limit + 1);
  const { page, next } = splitPage(rows, query.limit, ({ run }) => [run.createdAt.toISOString(), run.id]);
  return {
    rows: page.map(({ run, entityName }) => ({ ...runFields(run), entityName, operationEntityName: run.operationEntityName })),
    next,
  };
}

// --- transitions ---------------------------------------------------------------

/** DELETE: pending → cancelled (SPEC: data:read); 409 in any other state. */
export async function cancelRunRequest(ctx: ServiceContext, ref: EnvRef, id: string): Promise<ActionRun> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const run = await visibleRun(ctx, env.id, project.id, id);
  const result = await cancelRun(ctx.db, ctx.clock, run.id, env.id);
  return withAttempts(
    ctx.db,
    settled(result, id, (status) =>
      'deliveryInProgress' in result && result.deliveryInProgress
        ? new ApiError('run_not_cancellable', `action run "${id}" is being delivered right now; it can no longer be cancelled`)
        : new ApiError('run_not_cancellable', `action run "${id}" is ${status}; only a pending run can be cancelled`),
    ),
  );
}

function settled(result: Transition, id: string, conflict: (status: string) => ApiError): RunRow {
  if (result.ok) return result.run;
  if (!result.run) throw notFound(`action run "${id}"`);
  throw conflict(result.run.status);
}

const invalidCallbackToken = (why: string) => new ApiError('invalid_callback_token', `invalid callback token: ${why}`);

/** Does a path segment name this row (by id, or by slug / name)? */
const names = (segment: string, row: { id: string }, name: string) => segment === row.id || segment === name;

/**
 * The callback's credentials: 401 unless `authorization` carries a valid,
 * unexpired callback token of run `id`. Checked before the body is read, as
 * a service token is, so a caller who cannot authenticate learns nothing
 * from the body's validation.
 */
export async function authenticateCallback(ctx: ServiceContext, id: string, authorization: string | undefined): Promise<CallbackClaims> {
  const token = bearerCredential(authorization);
  if (token === undefined) throw invalidCallbackToken('send Authorization: Bearer <run.callbackToken>');
  const verdict = await verifyCallbackToken(ctx.config.authSecret, token, ctx.clock.now());
  if (!verdict.ok) throw invalidCallbackToken(verdict.reason === 'expired' ? 'it has expired' : 'it does not verify');
  if (verdict.claims.runId !== id) throw invalidCallbackToken('it belongs to another run');
  return verdict.claims;
}

/**
 * `POST ENV/action-runs/{id}/callback`, for a caller `authenticateCallback`
 * let in: 404 when the path does not lead to the run; 409 when the run is
 * no longer active. The path may name the organization, project and
 * environment by id (as the callback URL does) or by slug and name.
 */
export async function completeRunByCallback(
  ctx: ServiceContext,
  ref: EnvRef,
  id: string,
  claims: CallbackClaims,
  body: CallbackRequest,
): Promise<ActionRun> {
  const [found] = await ctx.db
    .select({ run: actionRuns, org: orgs, project: projects, env: environments })
    .from(actionRuns)
    .innerJoin(orgs, eq(orgs.id, actionRuns.orgId))
    .innerJoin(projects, eq(projects.id, actionRuns.projectId))
    .innerJoin(environments, eq(environments.id, actionRuns.envId))
    .where(eq(actionRuns.id, id))
    .limit(1);
  if (
    !found ||
    found.org.deletedAt !== null ||
    found.run.orgId !== claims.orgId ||
    found.run.projectId !== claims.projectId ||
    found.run.envId !== claims.envId ||
    !names(ref.org, found.org, found.org.slug) ||
    !names(ref.project, found.project, found.project.slug) ||
    !names(ref.env, found.env, found.env.name)
  ) {
    throw notFound(`action run "${id}"`);
  }
  if (found.org.suspendedAt) throw new ApiError('org_suspended', `organization "${found.org.slug}" is suspended`);
  const result = await completeRun(
    ctx.db,
    { clock: ctx.clock, logger: ctx.logger, changes: ctx.changedEnvironments, ports: runPorts },
    id,
    found.run.envId,
    body,
  );
  return withAttempts(
    ctx.db,
    settled(result, id, (status) => new ApiError('run_not_completable', `action run "${id}" is ${status}; only a pending or running run can be completed`)),
  );
}
