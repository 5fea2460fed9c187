import { and, asc, eq } from 'drizzle-orm';
import { authorizeEnvironment, authorizeProject, type EnvRef, type ProjectRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { actions, entityMetrics } from '../../db/schema';
import { ApiError, notFound, type ErrorDetail } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { redactTrigger } from '../../runs/trigger-kinds';
import { failedConstraint, type CellConstraint, type ConstraintSubject } from '../catalog-items';
import { callerCellScope } from '../cells/membership';
import { visibleEntity } from '../entities/service';
import { getEntityTypeDefinition } from '../entity-types/service';
import type { PropertyDefinition } from '../properties';
import type { Action, ActionRequest, ActionTrigger, AvailableAction } from './schemas';

type ActionRow = typeof actions.$inferSelect;
const DEFAULT_TIMEOUT_MINUTES = 60;

const toAction = (row: ActionRow): Action => ({
  name: row.name,
  displayName: row.displayName,
  description: row.description,
  entityType: row.entityTypeName,
  conditions: row.conditions as CellConstraint[],
  parameters: row.parameters as PropertyDefinition[],
  // the stored row keeps the literal credentials, which the run engine reads; catalog:read holders never see them
  trigger: redactTrigger(row.trigger as ActionTrigger) as ActionTrigger,
  onSuccess: row.onSuccess,
  onFailure: row.onFailure,
  timeoutMinutes: row.timeoutMinutes,
  orgId: row.orgId,
  projectId: row.projectId,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
});

/** The stored definition: omitted fields take their defaults, so an update replaces the whole definition. */
const toColumns = (input: ActionRequest) => ({
  name: input.name,
  displayName: input.displayName ?? null,
  description: input.description ?? null,
  entityTypeName: input.entityType,
  conditions: input.conditions ?? [],
  parameters: input.parameters ?? [],
  trigger: input.trigger,
  onSuccess: input.onSuccess ?? null,
  onFailure: input.onFailure ?? null,
  timeoutMinutes: input.timeoutMinutes ?? DEFAULT_TIMEOUT_MINUTES,
});

/**
 * The entity type must exist (400 invalid_reference, not 404: the path names
 * the action, the body the type) and declare onSuccess/onFailure. Inside a
 * transaction the type's row is held FOR SHARE until commit, so an update of
 * the type that removes those states cannot interleave with this write.
 */
async function assertReferences(db: Queryable, projectId: string, input: ActionRequest): Promise<void> {
  let states: string[];
  try {
    states = (await getEntityTypeDefinition(db, projectId, input.entityType, { lock: 'share' })).states;
  } catch (error) {
    if (error instanceof ApiError && error.code === 'not_found') {
      throw new ApiError('invalid_reference', `entity type "${input.entityType}" does not exist`, [
        { path: 'entityType', message: 'is not an entity type of the project' },
      ]);
    }
    throw error;
  }
  const details: ErrorDetail[] = [];
  for (const field of ['onSuccess', 'onFailure'] as const) {
    const state = input[field];
    if (state !== undefined && !states.includes(state)) {
      details.push({ path: field, message: `"${state}" is not a state of entity type "${input.entityType}" (${states.join(', ')})` });
    }
  }
  if (details.length > 0) {
    throw new ApiError('invalid_reference', details.map((d) => `${d.path}: ${d.message}`).join('; '), details);
  }
}

export async function getActionRow(db: Queryable, projectId: string, name: string): Promise<ActionRow> {
  const [row] = await db
    .select()
    .from(actions)
    .where(and(eq(actions.projectId, projectId), eq(actions.name, name)))
    .limit(1);
  if (!row) throw notFound(`action "${name}"`);
  return row;
}

export async function listActions(ctx: ServiceContext, ref: ProjectRef): Promise<Action[]> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const rows = await ctx.db.select().from(actions).where(eq(actions.projectId, project.id)).orderBy(asc(actions.name));
  return rows.map(toAction);
}

export async function getAction(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<Action> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  return toAction(await getActionRow(ctx.db, project.id, name));
}

export async function createAction(ctx: ServiceContext, ref: ProjectRef, input: ActionRequest): Promise<Action> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  const row = await ctx.db.transaction(async (tx) => {
    await assertReferences(tx, project.id, input);
    const now = ctx.clock.now();
    const [inserted] = await tx
      .insert(actions)
      .values({ orgId: project.orgId, projectId: project.id, ...toColumns(input), createdAt: now, updatedAt: now })
      .onConflictDoNothing({ target: [actions.projectId, actions.name] })
      .returning();
    if (!inserted) throw new ApiError('already_exists', `action "${input.name}" exists`);
    return inserted;
  });
  return toAction(row);
}

/** Replaces the whole definition; the body's name must equal the path's (actions are not renamed). */
export async function updateAction(ctx: ServiceContext, ref: ProjectRef, name: string, input: ActionRequest): Promise<Action> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  if (input.name !== name) {
    throw new ApiError('validation_failed', `name "${input.name}" does not match the path; actions cannot be renamed`, [
      { path: 'name', message: `must equal the name in the path ("${name}")` },
    ]);
  }
  const row = await ctx.db.transaction(async (tx) => {
    // 404 for a missing action comes before any complaint about the body's references
    await getActionRow(tx, project.id, name);
    await assertReferences(tx, project.id, input);
    const [updated] = await tx
      .update(actions)
      .set({ ...toColumns(input), updatedAt: ctx.clock.now() })
      .where(and(eq(actions.projectId, project.id), eq(actions.name, name)))
      .returning();
    if (!updated) throw notFound(`action "${name}"`);
    return updated;
  });
  return toAction(row);
}

export async function deleteAction(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<{ deleted: true; name: string }> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  const [row] = await ctx.db
    .delete(actions)
    .where(and(eq(actions.projectId, project.id), eq(actions.name, name)))
    .returning({ id: actions.id });
  if (!row) throw notFound(`action "${name}"`);
  return { deleted: true, name };
}

/**
 * The actions that may run on one entity: those of its type whose conditions
 * all hold for its state, labels, properties and current metrics. An entity
 * outside the caller's cells is absent (404), as for `GET ENV/entities/{name}`.
 */
export async function listEntityActions(ctx: ServiceContext, ref: EnvRef, entityName: string): Promise<AvailableAction[]> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  const entity = await visibleEntity(ctx, env.id, entityName, scope);
  const rows = await ctx.db
    .select()
    .from(actions)
    .where(and(eq(actions.projectId, project.id), eq(actions.entityTypeName, entity.entityTypeName)))
    .orderBy(asc(actions.name));
  if (rows.length === 0) return [];
  const subject = await conditionSubject(ctx.db, entity);
  return rows
    .filter((row) => failedConditions(row.conditions as CellConstraint[], subject).length === 0)
    .map((row) => ({
      name: row.name,
      displayName: row.displayName,
      description: row.description,
      parameters: row.parameters as PropertyDefinition[],
      triggerType: (row.trigger as ActionTrigger).type,
    }));
}

/** What an action's conditions are judged against: the entity's state, labels, properties and current metrics. */
export async function conditionSubject(
  db: Queryable,
  entity: { id: string; state: string; labels: unknown; properties: unknown },
): Promise<ConstraintSubject> {
  const metrics = await db
    .select({ name: entityMetrics.name, value: entityMetrics.value })
    .from(entityMetrics)
    .where(eq(entityMetrics.entityId, entity.id));
  return {
    state: entity.state,
    labels: entity.labels as Record<string, unknown>,
    properties: entity.properties as Record<string, unknown>,
    metrics: Object.fromEntries(metrics.map((m) => [m.name, m.value])),
  };
}

/** The conditions of an action that do not hold for `subject`, each with the reason. */
export function failedConditions(conditions: CellConstraint[], subject: ConstraintSubject): string[] {
  return conditions.map((condition) => failedConstraint(condition, subject)).filter((reason): reason is string => reason !== null);
}
