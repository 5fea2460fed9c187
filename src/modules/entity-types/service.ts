import { and, asc, eq, inArray, notInArray, or, sql } from 'drizzle-orm';
import { authorizeProject, type ProjectRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import { isForeignKeyRefusal } from '../../db/errors';
import type { Queryable } from '../../db/client';
import { actions, cells, entities, entityTypes, environments, relationshipTypes } from '../../db/schema';
import { ApiError, notFound, type ErrorDetail } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { DEFAULT_SYNC_MAX_AGE_SECONDS, type EntityTypeConstraint, type MetricDefinition, type SyncFreshness } from '../catalog-items';
import type { PropertyDefinition } from '../properties';
import type { EntityType, EntityTypeRequest } from './schemas';

export type EntityTypeRow = typeof entityTypes.$inferSelect;

/** An entity type with its jsonb columns typed. */
export interface EntityTypeDefinition extends Omit<EntityTypeRow, 'properties' | 'metrics' | 'constraints' | 'syncFreshness'> {
  properties: PropertyDefinition[];
  metrics: MetricDefinition[];
  constraints: EntityTypeConstraint[];
  syncFreshness: SyncFreshness | null;
}

/**
 * The entity type `name` of a project, or a 404. Other modules reach entity types through this.
 *
 * With `lock: 'share'` (inside a transaction) the row stays locked until
 * commit: a write that validated against this definition then cannot
 * interleave with an update or delete of the type, which lock it FOR UPDATE.
 */
export async function getEntityTypeDefinition(
  db: Queryable,
  projectId: string,
  name: string,
  options: { lock?: 'share' } = {},
): Promise<EntityTypeDefinition> {
  const query = db
    .select()
    .from(entityTypes)
    .where(and(eq(entityTypes.projectId, projectId), eq(entityTypes.name, name)))
    .limit(1);
  const [row] = options.lock ? await query.for(options.lock) : await query;
  if (!row) throw notFound(`entity type "${name}"`);
  return row as EntityTypeDefinition;
}

/**
 * Which committed version of an entity type's row a definition was read
 * from: its id and `xmin`, the transaction that wrote that version. Every
 * committed UPDATE of the row writes a new version with a new xmin (and a
 * delete and re-create a new id), so a statement that finds the row with this
 * id and xmin under its own lock is looking at this very definition.
 */
export interface EntityTypeVersion {
  id: string;
  xmin: string;
}

/** getEntityTypeDefinition with `lock: 'share'`, and the version of the row it read. */
export async function shareEntityTypeVersion(
  tx: Queryable,
  projectId: string,
  name: string,
): Promise<{ definition: EntityTypeDefinition; version: EntityTypeVersion }> {
  const [found] = await tx
    .select({ row: entityTypes, xmin: sql<string>`${entityTypes}.xmin::text` })
    .from(entityTypes)
    .where(and(eq(entityTypes.projectId, projectId), eq(entityTypes.name, name)))
    .limit(1)
    .for('share');
  if (!found) throw notFound(`entity type "${name}"`);
  return { definition: found.row as EntityTypeDefinition, version: { id: found.row.id, xmin: found.xmin } };
}

const toEntityType = (row: EntityTypeRow): EntityType => {
  const definition = row as EntityTypeDefinition;
  return {
    name: row.name,
    displayName: row.displayName,
    states: row.states,
    initialState: row.initialState,
    properties: definition.properties,
    metrics: definition.metrics,
    constraints: definition.constraints,
    syncTracked: row.syncTracked,
    syncFreshness: definition.syncFreshness,
    applier: row.applier,
    orgId: row.orgId,
    projectId: row.projectId,
    createdAt: timestamp(row.createdAt),
    updatedAt: timestamp(row.updatedAt),
  };
};

/** The stored definition: omitted fields take their defaults, so an update replaces the whole definition. */
function toColumns(input: EntityTypeRequest) {
  const syncTracked = input.syncTracked ?? false;
  return {
    name: input.name,
    displayName: input.displayName ?? null,
    states: input.states,
    initialState: input.initialState,
    properties: input.properties ?? [],
    metrics: input.metrics ?? [],
    constraints: input.constraints ?? [],
    syncTracked,
    syncFreshness: input.syncFreshness ?? (syncTracked ? { maxAgeSeconds: DEFAULT_SYNC_MAX_AGE_SECONDS } : null),
    applier: input.applier ?? null,
  };
}

/** The rules that relate one field of a definition to another; the schema checked each field alone. */
function assertConsistentDefinition(input: EntityTypeRequest): void {
  const details: ErrorDetail[] = [];
  const states = new Set(input.states);
  const properties = new Set((input.properties ?? []).map((p) => p.name));
  if (!states.has(input.initialState)) {
    details.push({ path: 'initialState', message: `must be one of the states (${input.states.join(', ')})` });
  }
  (input.constraints ?? []).forEach((constraint, i) => {
    if (constraint.kind === 'unique') {
      const seen = new Set<string>();
      constraint.properties.forEach((property, j) => {
        if (!properties.has(property)) {
          details.push({ path: `constraints.${i}.properties.${j}`, message: `property "${property}" is not declared` });
        } else if (seen.has(property)) {
          details.push({ path: `constraints.${i}.properties.${j}`, message: `property "${property}" is listed twice` });
        }
        seen.add(property);
      });
    } else {
      if (!states.has(constraint.from)) {
        details.push({ path: `constraints.${i}.from`, message: `state "${constraint.from}" is not declared` });
      }
      constraint.to.forEach((state, j) => {
        if (!states.has(state)) details.push({ path: `constraints.${i}.to.${j}`, message: `state "${state}" is not declared` });
      });
    }
  });
  if (details.length > 0) {
    throw new ApiError('validation_failed', `invalid entity type: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details);
  }
}

/**
 * Entities of one type anywhere in the project. Filtering through the
 * project's environments lets Postgres use the (env_id, entity_type_name, name)
 * index; `entities` has none on (project_id, entity_type_name).
 */
function entitiesOfType(db: Queryable, projectId: string, typeName: string) {
  return and(
    inArray(entities.envId, db.select({ id: environments.id }).from(environments).where(eq(environments.projectId, projectId))),
    eq(entities.projectId, projectId),
    eq(entities.entityTypeName, typeName),
  )!;
}

const uniqueKeys = (constraints: EntityTypeConstraint[]) =>
  new Set(constraints.flatMap((c) => (c.kind === 'unique' ? [c.properties.join(',')] : [])));

/** Locks the type's row for the rest of the transaction: writers holding it FOR SHARE finish first, later ones wait. */
async function lockEntityType(db: Queryable, projectId: string, name: string): Promise<EntityTypeRow> {
  const [row] = await db
    .select()
    .from(entityTypes)
    .where(and(eq(entityTypes.projectId, projectId), eq(entityTypes.name, name)))
    .for('update');
  if (!row) throw notFound(`entity type "${name}"`);
  return row;
}

export async function listEntityTypes(ctx: ServiceContext, ref: ProjectRef): Promise<EntityType[]> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const rows = await ctx.db.select().from(entityTypes).where(eq(entityTypes.projectId, project.id)).orderBy(asc(entityTypes.name));
  return rows.map(toEntityType);
}

export async function getEntityType(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<EntityType> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  return toEntityType(await getEntityTypeDefinition(ctx.db, project.id, name));
}

export async function createEntityType(ctx: ServiceContext, ref: ProjectRef, input: EntityTypeRequest): Promise<EntityType> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  assertConsistentDefinition(input);
  const now = ctx.clock.now();
  const [row] = await ctx.db
    .insert(entityTypes)
    .values({ orgId: project.orgId, projectId: project.id, ...toColumns(input), createdAt: now, updatedAt: now })
    .onConflictDoNothing({ target: [entityTypes.projectId, entityTypes.name] })
    .returning();
  if (!row) throw new ApiError('already_exists', `entity type "${input.name}" exists`);
  return toEntityType(row);
}

/**
 * Replaces the definition. Entities keep their rows, so the update may not
 * take away a state an entity is in, nor change the unique constraints while
 * entities exist (their unique keys are indexed per constraint by the
 * entities module, which cannot re-index them yet).
 */
export async function updateEntityType(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
  input: EntityTypeRequest,
): Promise<EntityType> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  if (input.name !== name) {
    throw new ApiError('validation_failed', `name "${input.name}" does not match the path; entity types cannot be renamed`, [
      { path: 'name', message: `must equal the name in the path ("${name}")` },
    ]);
  }
  assertConsistentDefinition(input);
  const columns = toColumns(input);
  const row = await ctx.db.transaction(async (tx) => {
    const current = await lockEntityType(tx, project.id, name);
    const stranded = await tx
      .selectDistinct({ state: entities.state })
      .from(entities)
      .where(and(entitiesOfType(tx, project.id, name), notInArray(entities.state, columns.states)))
      .orderBy(asc(entities.state))
      .limit(10);
    if (stranded.length > 0) {
      throw new ApiError(
        'still_referenced',
        `entity type "${name}": entities are still in the removed state(s) ${stranded.map((s) => `"${s.state}"`).join(', ')}`,
      );
    }
    // an action that would move its entity into a removed state
    const strandedActions = await tx
      .select({ name: actions.name })
      .from(actions)
      .where(
        and(
          eq(actions.projectId, project.id),
          eq(actions.entityTypeName, name),
          or(notInArray(actions.onSuccess, columns.states), notInArray(actions.onFailure, columns.states)),
        ),
      )
      .orderBy(asc(actions.name));
    if (strandedActions.length > 0) {
      throw new ApiError(
        'still_referenced',
        `entity type "${name}": action(s) ${strandedActions.map((a) => `"${a.name}"`).join(', ')} move entities into a removed state`,
      );
    }
    const before = uniqueKeys(current.constraints as EntityTypeConstraint[]);
    const after = uniqueKeys(columns.constraints);
    const uniqueChanged = before.size !== after.size || [...before].some((key) => !after.has(key));
    if (uniqueChanged) {
      const [entity] = await tx.select({ id: entities.id }).from(entities).where(entitiesOfType(tx, project.id, name)).limit(1);
      if (entity) {
        throw new ApiError('still_referenced', `entity type "${name}" has entities: its unique constraints cannot change`);
      }
    }
    const [updated] = await tx
      .update(entityTypes)
      .set({ ...columns, updatedAt: ctx.clock.now() })
      .where(eq(entityTypes.id, current.id))
      .returning();
    return updated!;
  });
  return toEntityType(row);
}

/**
 * Deletes a type nothing refers to: no entity in any environment, no
 * relationship type (from or to), no cell and no action. The checks give the reason; the
 * foreign key from `entities` (ON DELETE RESTRICT) still guards an entity
 * created between the check and the delete.
 */
export async function deleteEntityType(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<{ deleted: true; name: string }> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  try {
    await ctx.db.transaction(async (tx) => {
      const current = await lockEntityType(tx, project.id, name);
      const inUse = await tx
        .select({ name: environments.name })
        .from(environments)
        .where(
          and(
            eq(environments.projectId, project.id),
            sql`exists (select 1 from ${entities} where ${entities.envId} = ${environments.id} and ${entities.entityTypeName} = ${name})`,
          ),
        )
        .orderBy(asc(environments.name));
      if (inUse.length > 0) {
        throw stillReferenced(name, `entities in environment(s) ${inUse.map((e) => `"${e.name}"`).join(', ')}`);
      }
      const types = await tx
        .select({ name: relationshipTypes.name })
        .from(relationshipTypes)
        .where(
          and(
            eq(relationshipTypes.projectId, project.id),
            or(eq(relationshipTypes.fromEntityTypeName, name), eq(relationshipTypes.toEntityTypeName, name)),
          ),
        )
        .orderBy(asc(relationshipTypes.name));
      if (types.length > 0) throw stillReferenced(name, `relationship type(s) ${types.map((t) => `"${t.name}"`).join(', ')}`);
      const referencingCells = await tx
        .select({ name: cells.name })
        .from(cells)
        .where(and(eq(cells.projectId, project.id), eq(cells.entityTypeName, name)))
        .orderBy(asc(cells.name));
      if (referencingCells.length > 0) {
        throw stillReferenced(name, `cell(s) ${referencingCells.map((c) => `"${c.name}"`).join(', ')}`);
      }
      const referencingActions = await tx
        .select({ name: actions.name })
        .from(actions)
        .where(and(eq(actions.projectId, project.id), eq(actions.entityTypeName, name)))
        .orderBy(asc(actions.name));
      if (referencingActions.length > 0) {
        throw stillReferenced(name, `action(s) ${referencingActions.map((a) => `"${a.name}"`).join(', ')}`);
      }
      await tx.delete(entityTypes).where(eq(entityTypes.id, current.id));
    });
  } catch (error) {
    if (isForeignKeyRefusal(error)) throw stillReferenced(name, 'entities');
    throw error;
  }
  return { deleted: true, name };
}

const stillReferenced = (name: string, by: string) => new ApiError('still_referenced', `entity type "${name}" is still used by ${by}`);

