import { and, asc, eq, getTableColumns, or, sql, type SQL } from 'drizzle-orm';
import { alias } from 'drizzle-orm/pg-core';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import { isUuid } from '../names';
import type { ServiceContext } from '../../context';
import { violatedUniqueConstraint } from '../../db/errors';
import type { Queryable } from '../../db/client';
import { entities, relationships } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { decodeCursor, splitPage } from '../../http/pagination';
import { cardinalityLimits, TransitionConstraint } from '../catalog-items';
import { callerCellScope } from '../cells/membership';
import { validateProperties } from '../properties';
import { getRelationshipTypeDefinition, type RelationshipTypeDefinition } from '../relationship-types/service';
import {
  createRelationshipPlainly,
  rememberedRelationshipType,
  rememberRelationshipType,
  shareRelationshipTypeVersion,
  type RelationshipRow,
} from './fast-path';
import type {
  EntityRelationship,
  Relationship,
  RelationshipCreate,
  RelationshipListQuery,
  RelationshipUpdate,
} from './schemas';

/**
 * Relationships of an environment (DECISIONS §3).
 *
 * Cardinality lives in the database: `from_exclusive` / `to_exclusive` carry
 * the end that must be unique for the type (NULL otherwise) under unique
 * constraints, so two concurrent creates can never both satisfy a one-to-one;
 * the loser's unique violation becomes 409 here.
 *
 * A create share-locks its relationship type's row until commit (the one
 * statement of fast-path.ts as the transaction does), so a PUT or DELETE of
 * the type, which takes the row FOR UPDATE, waits for it: a PUT's check that
 * no relationship blocks a change of ends or cardinality cannot miss one
 * validated against the old definition.
 *
 * Cell scope: a relationship is visible to a cell-scoped token when either
 * end is in its cells. A write needs at least one end in scope; the check runs
 * inside the write's transaction.
 */

type EntityRow = typeof entities.$inferSelect;

const toRelationship = (row: RelationshipRow): Relationship => ({
  id: row.id,
  relationshipTypeName: row.relationshipTypeName,
  fromEntityId: row.fromEntityId,
  toEntityId: row.toEntityId,
  state: row.state,
  properties: row.properties as Record<string, unknown>,
  labels: row.labels as Record<string, string>,
  envId: row.envId,
  orgId: row.orgId,
  projectId: row.projectId,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
});

/** The condition "either end is in the caller's cells", or undefined for an unscoped caller. */
function visibleIn(scope: SQL | undefined): SQL | undefined {
  if (!scope) return undefined;
  return sql`exists (select 1 from ${entities} where ${entities.id} in (${relationships.fromEntityId}, ${relationships.toEntityId}) and ${scope})`;
}

/** The entity `name` of an environment, regardless of cell scope (the caller checks scope), or a 404. */
async function getEntityInEnv(db: Queryable, envId: string, name: string): Promise<EntityRow> {
  const [row] = await db
    .select()
    .from(entities)
    .where(and(eq(entities.envId, envId), eq(entities.name, name)))
    .limit(1);
  if (!row) throw notFound(`entity "${name}"`);
  return row;
}

/** The relationship `id` of an environment if the caller may see it, or a 404 (invisible is absent). */
async function getVisibleRelationship(
  db: Queryable,
  envId: string,
  id: string,
  scope: SQL | undefined,
  options: { forUpdate?: boolean } = {},
): Promise<RelationshipRow> {
  const query = db
    .select()
    .from(relationships)
    .where(and(eq(relationships.id, id), eq(relationships.envId, envId), visibleIn(scope)))
    .limit(1);
  const [row] = options.forUpdate ? await query.for('update') : await query;
  if (!row) throw notFound(`relationship "${id}"`);
  return row;
}

function assertState(type: RelationshipTypeDefinition, state: string): void {
  if (!type.states.includes(state)) {
    throw new ApiError(
      'invalid_state',
      `state "${state}" is not one of relationship type "${type.name}"'s states: ${type.states.join(', ')}`,
    );
  }
}

/**
 * Relationship types declare `states` as entity types do (DECISIONS §2); a
 * constraint shaped as an entity-type transition constraint restricts state
 * changes the same way: once one exists, an unlisted change is refused.
 */
function assertTransition(type: RelationshipTypeDefinition, from: string, to: string): void {
  if (from === to) return;
  const transitions = type.constraints.flatMap((item) => {
    const parsed = TransitionConstraint.safeParse(item);
    return parsed.success ? [parsed.data] : [];
  });
  if (transitions.length === 0) return;
  if (!transitions.some((t) => t.from === from && t.to.includes(to))) {
    throw new ApiError('transition_not_allowed', `relationship type "${type.name}" does not allow the change from "${from}" to "${to}"`);
  }
}

function validatedProperties(type: RelationshipTypeDefinition, values: Record<string, unknown>): Record<string, unknown> {
  const result = validateProperties(type.properties, values, { fillDefaults: true });
  if (!result.ok) {
    throw new ApiError(
      'validation_failed',
      `properties do not match relationship type "${type.name}": ${result.details.map((d) => `${d.path} ${d.message}`).join('; ')}`,
      result.details,
    );
  }
  return result.values;
}

export async function createRelationship(ctx: ServiceContext, ref: EnvRef, input: RelationshipCreate): Promise<Relationship> {
  const plain = await createRelationshipInOneStatement(ctx, ref, input);
  if (plain) return toRelationship(plain);
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  let from: EntityRow | undefined;
  let to: EntityRow | undefined;
  try {
    const row = await ctx.db.transaction(async (tx) => {
      const versioned = await shareRelationshipTypeVersion(tx, project.id, input.relationshipType);
      // what the next create of this type validates against, if the row is still this version then
      rememberRelationshipType(ctx, ref, versioned);
      const type = versioned.definition;
      from = await getEntityInEnv(tx, env.id, input.from);
      to = await getEntityInEnv(tx, env.id, input.to);
      const scope = await callerCellScope(ctx, project.id, tx);
      if (scope) {
        const [inScope] = await tx
          .select({ id: entities.id })
          .from(entities)
          .where(and(sql`${entities.id} in (${from.id}, ${to.id})`, scope))
          .limit(1);
        if (!inScope) {
          throw new ApiError('cell_scope_violation', `neither "${from.name}" nor "${to.name}" is in the token's cells`);
        }
      }
      if (from.entityTypeName !== type.fromEntityTypeName) {
        throw new ApiError(
          'type_mismatch',
          `relationship type "${type.name}" goes from "${type.fromEntityTypeName}" entities; "${from.name}" is a "${from.entityTypeName}"`,
        );
      }
      if (to.entityTypeName !== type.toEntityTypeName) {
        throw new ApiError(
          'type_mismatch',
          `relationship type "${type.name}" goes to "${type.toEntityTypeName}" entities; "${to.name}" is a "${to.entityTypeName}"`,
        );
      }
      const state = input.state ?? type.states[0]!;
      assertState(type, state);
      const properties = validatedProperties(type, input.properties ?? {});
      const limits = cardinalityLimits(type.cardinality);
      const [inserted] = await tx
        .insert(relationships)
        .values({
          orgId: project.orgId,
          projectId: project.id,
          envId: env.id,
          relationshipTypeName: type.name,
          fromEntityId: from.id,
          toEntityId: to.id,
          fromExclusive: limits.oneOutgoing ? from.id : null,
          toExclusive: limits.oneIncoming ? to.id : null,
          state,
          properties,
          labels: input.labels ?? {},
        })
        .returning();
      return inserted!;
    });
    return toRelationship(row);
  } catch (error) {
    const constraint = violatedUniqueConstraint(error);
    if (constraint === undefined || !from || !to) throw error;
    throw await conflictFor(ctx, env.id, input, from, to, constraint);
  }
}

/**
 * The create in one statement (fast-path.ts), validated against the type as
 * this process last saw it; the statement itself checks that the type is
 * still that version. Undefined sends the request the transactional way,
 * which gives every answer but a plain 201: so does a request that does not
 * validate, because the lookups and authorization come before validation there.
 */
async function createRelationshipInOneStatement(
  ctx: ServiceContext,
  ref: EnvRef,
  input: RelationshipCreate,
): Promise<RelationshipRow | undefined> {
  if (ctx.callerState.resolved || ctx.callerState.tokenHash === undefined) return undefined;
  const type = rememberedRelationshipType(ctx, ref, input.relationshipType);
  if (!type) return undefined;
  const state = input.state ?? type.definition.states[0]!;
  if (!type.definition.states.includes(state)) return undefined;
  const properties = validateProperties(type.definition.properties, input.properties ?? {}, { fillDefaults: true });
  if (!properties.ok) return undefined;
  return createRelationshipPlainly(ctx, ref, {
    type,
    from: input.from,
    to: input.to,
    state,
    properties: properties.values,
    labels: input.labels ?? {},
  });
}

/**
 * Which 409 a unique violation means. A same-pair duplicate of a type with an
 * exclusive end violates two constraints and Postgres reports either one, so
 * the pair is looked up (the other write has committed) before calling it a
 * cardinality violation: DECISIONS §2 answers already_exists for a duplicate.
 */
async function conflictFor(
  ctx: ServiceContext,
  envId: string,
  input: RelationshipCreate,
  from: EntityRow,
  to: EntityRow,
  constraint: string,
): Promise<ApiError> {
  const duplicate = new ApiError(
    'already_exists',
    `a "${input.relationshipType}" relationship from "${from.name}" to "${to.name}" exists`,
  );
  if (constraint === 'relationships_pair_unique') return duplicate;
  const [pair] = await ctx.db
    .select({ id: relationships.id })
    .from(relationships)
    .where(
      and(
        eq(relationships.envId, envId),
        eq(relationships.relationshipTypeName, input.relationshipType),
        eq(relationships.fromEntityId, from.id),
        eq(relationships.toEntityId, to.id),
      ),
    )
    .limit(1);
  if (pair) return duplicate;
  if (constraint === 'relationships_from_exclusive_unique') {
    return new ApiError(
      'cardinality_violation',
      `"${from.name}" already has an outgoing "${input.relationshipType}" relationship, and the type allows one`,
    );
  }
  if (constraint === 'relationships_to_exclusive_unique') {
    return new ApiError(
      'cardinality_violation',
      `"${to.name}" already has an incoming "${input.relationshipType}" relationship, and the type allows one`,
    );
  }
  return new ApiError('already_exists', `relationship conflicts with an existing one (${constraint})`);
}

const CURSOR_AT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

/**
 * The creation time at full (microsecond) precision: the cursor must carry
 * exactly what the row holds, or rows created in the same millisecond would
 * be repeated or skipped across a page boundary.
 */
const createdAtKey = sql<string>`to_char(${relationships.createdAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Keyset pages, oldest first, on (created_at, id). Unknown filter names match nothing. */
export async function listRelationships(
  ctx: ServiceContext,
  ref: EnvRef,
  query: RelationshipListQuery,
): Promise<{ page: Relationship[]; next: string | null }> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  let after: SQL | undefined;
  if (query.cursor) {
    const [at, id] = decodeCursor(query.cursor, 2);
    if (typeof at !== 'string' || !CURSOR_AT.test(at) || typeof id !== 'string' || !isUuid(id)) {
      throw new ApiError('validation_failed', 'cursor is not valid: pass the X-Next-Cursor value unchanged', [
        { path: 'cursor', message: 'is not a cursor this endpoint issued' },
      ]);
    }
    after = sql`(${relationships.createdAt}, ${relationships.id}) > (${at}::timestamptz, ${id}::uuid)`;
  }
  const entityNamed = (name: string) =>
    sql`(select ${entities.id} from ${entities} where ${entities.envId} = ${env.id} and ${entities.name} = ${name})`;
  const scope = await callerCellScope(ctx, project.id);
  const rows = await ctx.db
    .select({ ...getTableColumns(relationships), cursorAt: createdAtKey })
    .from(relationships)
    .where(
      and(
        eq(relationships.envId, env.id),
        query.relationshipType !== undefined ? eq(relationships.relationshipTypeName, query.relationshipType) : undefined,
        query.from !== undefined ? sql`${relationships.fromEntityId} = ${entityNamed(query.from)}` : undefined,
        query.to !== undefined ? sql`${relationships.toEntityId} = ${entityNamed(query.to)}` : undefined,
        after,
        visibleIn(scope),
      ),
    )
    .orderBy(asc(relationships.createdAt), asc(relationships.id))
    .limit(query.limit + 1);
  const { page, next } = splitPage(rows, query.limit, (row) => [row.cursorAt, row.id]);
  return { page: page.map(({ cursorAt: _, ...row }) => toRelationship(row)), next };
}

export async function getRelationship(ctx: ServiceContext, ref: EnvRef, id: string): Promise<Relationship> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  return toRelationship(await getVisibleRelationship(ctx.db, env.id, id, scope));
}

/** Each field given replaces the stored one; the type and both ends never change. */
export async function updateRelationship(
  ctx: ServiceContext,
  ref: EnvRef,
  id: string,
  input: RelationshipUpdate,
): Promise<Relationship> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const row = await ctx.db.transaction(async (tx) => {
    const scope = await callerCellScope(ctx, project.id, tx);
    // the row lock orders concurrent updates, so a transition is checked against the state it replaces
    const current = await getVisibleRelationship(tx, env.id, id, scope, { forUpdate: true });
    const type = await getRelationshipTypeDefinition(tx, project.id, current.relationshipTypeName);
    const changes: Partial<typeof relationships.$inferInsert> = {};
    if (input.state !== undefined) {
      assertState(type, input.state);
      assertTransition(type, current.state, input.state);
      changes.state = input.state;
    }
    if (input.properties !== undefined) changes.properties = validatedProperties(type, input.properties);
    if (input.labels !== undefined) changes.labels = input.labels;
    const [updated] = await tx
      .update(relationships)
      .set({ ...changes, updatedAt: sql`now()` })
      .where(eq(relationships.id, current.id))
      .returning();
    return updated!;
  });
  return toRelationship(row);
}

export async function deleteRelationship(ctx: ServiceContext, ref: EnvRef, id: string): Promise<{ deleted: true; id: string }> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  await ctx.db.transaction(async (tx) => {
    const scope = await callerCellScope(ctx, project.id, tx);
    const current = await getVisibleRelationship(tx, env.id, id, scope, { forUpdate: true });
    await tx.delete(relationships).where(eq(relationships.id, current.id));
  });
  return { deleted: true, id };
}

/**
 * Every relationship touching the entity, in both directions, oldest first.
 * The entity must be visible to the caller; then all its relationships are
 * (one end — the entity — is in scope).
 */
export async function listEntityRelationships(ctx: ServiceContext, ref: EnvRef, entityName: string): Promise<EntityRelationship[]> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  const [entity] = await ctx.db
    .select({ id: entities.id })
    .from(entities)
    .where(and(eq(entities.envId, env.id), eq(entities.name, entityName), scope))
    .limit(1);
  if (!entity) throw notFound(`entity "${entityName}"`);
  const fromEntity = alias(entities, 'from_entity');
  const toEntity = alias(entities, 'to_entity');
  const rows = await ctx.db
    .select({ relationship: relationships, fromEntityName: fromEntity.name, toEntityName: toEntity.name })
    .from(relationships)
    .innerJoin(fromEntity, eq(fromEntity.id, relationships.fromEntityId))
    .innerJoin(toEntity, eq(toEntity.id, relationships.toEntityId))
    .where(
      and(
        eq(relationships.envId, env.id),
        or(eq(relationships.fromEntityId, entity.id), eq(relationships.toEntityId, entity.id)),
      ),
    )
    .orderBy(asc(relationships.createdAt), asc(relationships.id));
  return rows.map((row) => ({
    ...toRelationship(row.relationship),
    fromEntityName: row.fromEntityName,
    toEntityName: row.toEntityName,
  }));
}
