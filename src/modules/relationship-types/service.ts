import { and, asc, eq, inArray, notInArray } from 'drizzle-orm';
import { authorizeProject, type ProjectRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { environments, relationships, relationshipTypes } from '../../db/schema';
import { ApiError, notFound, type ErrorDetail } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { getEntityTypeDefinition } from '../entity-types/service';
import type { PropertyDefinition } from '../properties';
import type { RelationshipType, RelationshipTypeRequest } from './schemas';

export type RelationshipTypeRow = typeof relationshipTypes.$inferSelect;

export interface RelationshipTypeDefinition extends Omit<RelationshipTypeRow, 'properties' | 'constraints'> {
  properties: PropertyDefinition[];
  constraints: unknown[];
}

/**
 * The relationship type `name` of a project, or a 404. Other modules reach relationship types through this.
 *
 * With `lock: 'share'` (inside a transaction) the row stays locked until
 * commit, so an update or delete of the type waits for the write that
 * validated against it.
 */
export async function getRelationshipTypeDefinition(
  db: Queryable,
  projectId: string,
  name: string,
  options: { lock?: 'share' } = {},
): Promise<RelationshipTypeDefinition> {
  const query = db
    .select()
    .from(relationshipTypes)
    .where(and(eq(relationshipTypes.projectId, projectId), eq(relationshipTypes.name, name)))
    .limit(1);
  const [row] = options.lock ? await query.for(options.lock) : await query;
  if (!row) throw notFound(`relationship type "${name}"`);
  return row as RelationshipTypeDefinition;
}

const toRelationshipType = (row: RelationshipTypeRow): RelationshipType => ({
  name: row.name,
  displayName: row.displayName,
  cardinality: row.cardinality,
  states: row.states,
  properties: row.properties as PropertyDefinition[],
  constraints: row.constraints as Record<string, unknown>[],
  fromEntityTypeName: row.fromEntityTypeName,
  toEntityTypeName: row.toEntityTypeName,
  orgId: row.orgId,
  projectId: row.projectId,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
});

/** The stored definition: omitted fields take their defaults, so an update replaces the whole definition. */
const toColumns = (input: RelationshipTypeRequest) => ({
  name: input.name,
  displayName: input.displayName ?? null,
  fromEntityTypeName: input.from,
  toEntityTypeName: input.to,
  cardinality: input.cardinality ?? 'many-to-many',
  states: input.states,
  properties: input.properties ?? [],
  constraints: input.constraints ?? [],
});

/**
 * Both ends must name entity types of the project (400 invalid_reference).
 * The rows are locked FOR SHARE until commit, so a concurrent delete of an
 * end (which locks it FOR UPDATE and then looks for relationship types naming
 * it) either sees this type or makes this lookup find nothing.
 */
async function assertEndsExist(tx: Queryable, projectId: string, input: RelationshipTypeRequest): Promise<void> {
  const details: ErrorDetail[] = [];
  for (const end of ['from', 'to'] as const) {
    try {
      await getEntityTypeDefinition(tx, projectId, input[end], { lock: 'share' });
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 'not_found')) throw error;
      details.push({ path: end, message: `entity type "${input[end]}" not found` });
    }
  }
  if (details.length > 0) {
    throw new ApiError('invalid_reference', details.map((d) => `${d.path}: ${d.message}`).join('; '), details);
  }
}

/** Relationships of one type anywhere in the project, through the (env_id, relationship_type_name, ...) index. */
function relationshipsOfType(db: Queryable, projectId: string, typeName: string) {
  return and(
    inArray(relationships.envId, db.select({ id: environments.id }).from(environments).where(eq(environments.projectId, projectId))),
    eq(relationships.projectId, projectId),
    eq(relationships.relationshipTypeName, typeName),
  )!;
}

export async function listRelationshipTypes(ctx: ServiceContext, ref: ProjectRef): Promise<RelationshipType[]> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const rows = await ctx.db
    .select()
    .from(relationshipTypes)
    .where(eq(relationshipTypes.projectId, project.id))
    .orderBy(asc(relationshipTypes.name));
  return rows.map(toRelationshipType);
}

export async function getRelationshipType(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<RelationshipType> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  return toRelationshipType(await getRelationshipTypeDefinition(ctx.db, project.id, name));
}

export async function createRelationshipType(
  ctx: ServiceContext,
  ref: ProjectRef,
  input: RelationshipTypeRequest,
): Promise<RelationshipType> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  const row = await ctx.db.transaction(async (tx) => {
    await assertEndsExist(tx, project.id, input);
    const now = ctx.clock.now();
    const [inserted] = await tx
      .insert(relationshipTypes)
      .values({ orgId: project.orgId, projectId: project.id, ...toColumns(input), createdAt: now, updatedAt: now })
      .onConflictDoNothing({ target: [relationshipTypes.projectId, relationshipTypes.name] })
      .returning();
    if (!inserted) throw new ApiError('already_exists', `relationship type "${input.name}" exists`);
    return inserted;
  });
  return toRelationshipType(row);
}

/**
 * Replaces the definition. Relationships keep their rows, so while any exist
 * the update may not move an end to another entity type, change the
 * cardinality (relationships carry its exclusivity keys), or take away a
 * state a relationship is in.
 */
export async function updateRelationshipType(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
  input: RelationshipTypeRequest,
): Promise<RelationshipType> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  if (input.name !== name) {
    throw new ApiError('validation_failed', `name "${input.name}" does not match the path; relationship types cannot be renamed`, [
      { path: 'name', message: `must equal the name in the path ("${name}")` },
    ]);
  }
  const columns = toColumns(input);
  const row = await ctx.db.transaction(async (tx) => {
    const [current] = await tx
      .select()
      .from(relationshipTypes)
      .where(and(eq(relationshipTypes.projectId, project.id), eq(relationshipTypes.name, name)))
      .for('update');
    if (!current) throw notFound(`relationship type "${name}"`);
    await assertEndsExist(tx, project.id, input);

    const changed = [
      current.fromEntityTypeName !== columns.fromEntityTypeName && 'from',
      current.toEntityTypeName !== columns.toEntityTypeName && 'to',
      current.cardinality !== columns.cardinality && 'cardinality',
    ].filter((field): field is string => field !== false);
    if (changed.length > 0) {
      const [any] = await tx.select({ id: relationships.id }).from(relationships).where(relationshipsOfType(tx, project.id, name)).limit(1);
      if (any) {
        throw new ApiError('still_referenced', `relationship type "${name}" has relationships: ${changed.join(', ')} cannot change`);
      }
    }
    const stranded = await tx
      .selectDistinct({ state: relationships.state })
      .from(relationships)
      .where(and(relationshipsOfType(tx, project.id, name), notInArray(relationships.state, columns.states)))
      .orderBy(asc(relationships.state))
      .limit(10);
    if (stranded.length > 0) {
      throw new ApiError(
        'still_referenced',
        `relationship type "${name}": relationships are still in the removed state(s) ${stranded.map((s) => `"${s.state}"`).join(', ')}`,
      );
    }
    const [updated] = await tx
      .update(relationshipTypes)
      .set({ ...columns, updatedAt: ctx.clock.now() })
      .where(eq(relationshipTypes.id, current.id))
      .returning();
    return updated!;
  });
  return toRelationshipType(row);
}

/** Deleting a relationship type deletes its relationships in every environment (the foreign key cascades). */
export async function deleteRelationshipType(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
): Promise<{ deleted: true; name: string }> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  const deleted = await ctx.db
    .delete(relationshipTypes)
    .where(and(eq(relationshipTypes.projectId, project.id), eq(relationshipTypes.name, name)))
    .returning({ id: relationshipTypes.id });
  if (deleted.length === 0) throw notFound(`relationship type "${name}"`);
  return { deleted: true, name };
}
