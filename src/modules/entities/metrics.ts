import type { z } from '@hono/zod-openapi';
import { and, asc, eq, inArray } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import { databaseError, SQLSTATE } from '../../db/errors';
import { entities, entityMetrics } from '../../db/schema';
import { ApiError, notFound, type ErrorDetail } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { callerCellScope } from '../cells/membership';
import { getEntityTypeDefinition } from '../entity-types/service';
import { MAX_BATCH_METRIC_NAMES, type MetricValue } from './schemas';
import { entityForWrite } from './service';

/** Metric readings of entities: set one, read an entity's, read a batch. */

/**
 * Sets one metric value (upsert). Metric values are runtime readings, not
 * entity changes: no change-log row, and the entity's updatedAt stays.
 */
export async function setEntityMetric(
  ctx: ServiceContext,
  ref: EnvRef,
  name: string,
  metric: string,
  value: number,
): Promise<z.infer<typeof MetricValue>> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const scope = await callerCellScope(ctx, project.id);
  const row = await entityForWrite(ctx.db, env.id, name, scope, { lock: false });
  const type = await getEntityTypeDefinition(ctx.db, project.id, row.entityTypeName);
  const definition = type.metrics.find((m) => m.name === metric);
  if (!definition) {
    const declared = type.metrics.map((m) => m.name);
    throw new ApiError(
      'unknown_metric',
      `entity type "${type.name}" declares no metric "${metric}"${declared.length ? ` (declared: ${declared.join(', ')})` : ''}`,
    );
  }
  const problems: ErrorDetail[] = [];
  if (definition.min !== undefined && value < definition.min) problems.push({ path: 'value', message: `must be at least ${definition.min}` });
  if (definition.max !== undefined && value > definition.max) problems.push({ path: 'value', message: `must be at most ${definition.max}` });
  if (problems.length > 0) {
    throw new ApiError('validation_failed', `metric "${metric}" ${problems.map((p) => p.message).join(' and ')}`, problems);
  }
  const now = ctx.clock.now();
  try {
    await ctx.db
      .insert(entityMetrics)
      .values({ entityId: row.id, name: metric, value, updatedAt: now })
      .onConflictDoUpdate({ target: [entityMetrics.entityId, entityMetrics.name], set: { value, updatedAt: now } });
  } catch (err) {
    // the entity was deleted since it was read
    if (databaseError(err)?.code === SQLSTATE.foreignKeyViolation) throw notFound(`entity "${name}"`);
    throw err;
  }
  return { entityName: row.name, metric, value, updatedAt: timestamp(now) };
}

export async function getEntityMetrics(ctx: ServiceContext, ref: EnvRef, name: string): Promise<Record<string, number>> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  const rows = await ctx.db
    .select({ metric: entityMetrics.name, value: entityMetrics.value })
    .from(entities)
    .leftJoin(entityMetrics, eq(entityMetrics.entityId, entities.id))
    .where(and(eq(entities.envId, env.id), eq(entities.name, name), scope))
    .orderBy(asc(entityMetrics.name));
  if (rows.length === 0) throw notFound(`entity "${name}"`);
  const values: Record<string, number> = {};
  for (const row of rows) if (row.metric !== null && row.value !== null) values[row.metric] = row.value;
  return values;
}

const splitList = (list: string) => [...new Set(list.split(',').map((item) => item.trim()).filter((item) => item.length > 0))];

/**
 * Metric values of many entities in one query. Names that do not exist or
 * are outside the caller's cells are left out; a visible entity without
 * values maps to `{}`.
 */
export async function getBatchMetrics(
  ctx: ServiceContext,
  ref: EnvRef,
  query: { names: string; metrics?: string },
): Promise<Record<string, Record<string, number>>> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const names = splitList(query.names);
  if (names.length === 0) {
    throw new ApiError('validation_failed', 'names must list at least one entity', [{ path: 'names', message: 'is empty' }]);
  }
  if (names.length > MAX_BATCH_METRIC_NAMES) {
    throw new ApiError('validation_failed', `names lists ${names.length} entities; at most ${MAX_BATCH_METRIC_NAMES} per request`, [
      { path: 'names', message: `must list at most ${MAX_BATCH_METRIC_NAMES} names` },
    ]);
  }
  const metrics = query.metrics === undefined ? undefined : splitList(query.metrics);
  const scope = await callerCellScope(ctx, project.id);
  const rows = await ctx.db
    .select({ entity: entities.name, metric: entityMetrics.name, value: entityMetrics.value })
    .from(entities)
    .leftJoin(
      entityMetrics,
      and(eq(entityMetrics.entityId, entities.id), metrics === undefined ? undefined : inArray(entityMetrics.name, metrics)),
    )
    .where(and(eq(entities.envId, env.id), inArray(entities.name, names), scope))
    .orderBy(asc(entities.name), asc(entityMetrics.name));
  const result: Record<string, Record<string, number>> = {};
  for (const row of rows) {
    const values = (result[row.entity] ??= {});
    if (row.metric !== null && row.value !== null) values[row.metric] = row.value;
  }
  return result;
}

// --- sync tracking -------------------------------------------------------------

