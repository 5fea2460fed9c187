import { and, eq, getTableColumns, sql } from 'drizzle-orm';
import { alias } from 'drizzle-orm/pg-core';
import { plainAccessColumns, plainEnvironmentAccess, settlePlainCaller, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { databaseError, SQLSTATE } from '../../db/errors';
import { entities, relationships, relationshipTypes } from '../../db/schema';
import { notFound } from '../../http/errors';
import { cardinalityLimits } from '../catalog-items';
import { perHandle, typeDefinitionCache } from '../one-statement';
import type { RelationshipTypeDefinition } from '../relationship-types/service';

/**
 * POST .../relationships in one round trip, as POST .../entities is
 * (src/modules/entities/fast-paths.ts): a request with a token is usually a
 * plain success — the token is live, reaches this environment, may write,
 * has no cell scopes, the relationship type and both ends exist and the ends
 * are of the type's entity types. One statement folds the token and tenancy
 * check (plainEnvironmentAccess), the type and both entity lookups and the
 * type-match checks into the INSERT, and answers only that case. Anything
 * else — no row, or a unique or foreign-key refusal — writes nothing and
 * sends the request down the transactional path, which gives every 401, 403,
 * 404, 400 and 409 as before.
 */

/**
 * Which committed version of a relationship type's row a definition was read
 * from: its id and `xmin` (as EntityTypeVersion: an UPDATE writes a new
 * xmin, a delete and re-create a new id).
 */
export interface RelationshipTypeVersion {
  id: string;
  xmin: string;
}

export interface VersionedRelationshipType {
  definition: RelationshipTypeDefinition;
  version: RelationshipTypeVersion;
}

/**
 * The relationship type `name` of a project, share-locked until commit, with
 * the version read; a 404 as getRelationshipTypeDefinition gives. The lock
 * makes a PUT or DELETE of the type (which take the row FOR UPDATE) wait for
 * the write that validated against it, so a PUT's check for existing
 * relationships never misses one.
 */
export async function shareRelationshipTypeVersion(tx: Queryable, projectId: string, name: string): Promise<VersionedRelationshipType> {
  const [found] = await tx
    .select({ row: relationshipTypes, xmin: sql<string>`${relationshipTypes}.xmin::text` })
    .from(relationshipTypes)
    .where(and(eq(relationshipTypes.projectId, projectId), eq(relationshipTypes.name, name)))
    .limit(1)
    .for('share');
  if (!found) throw notFound(`relationship type "${name}"`);
  return { definition: found.row as RelationshipTypeDefinition, version: { id: found.row.id, xmin: found.xmin } };
}

/** Relationship type definitions as a create last validated against them (typeDefinitionCache). */
const validatedTypes = typeDefinitionCache<VersionedRelationshipType>();
export const rememberRelationshipType = validatedTypes.remember;
export const rememberedRelationshipType = validatedTypes.recall;

const relationshipColumns = getTableColumns(relationships);
type RelationshipColumns = typeof relationshipColumns;
export type RelationshipRow = typeof relationships.$inferSelect;

/** Built once per database handle and path shape (perHandle). */
const plainCreate = perHandle((db, shape, name) => {
  const caller = db.$with('caller').as(plainEnvironmentAccess(db, shape, 'data:write'));
  // the type row, share-locked as the transactional path locks it, and only at the version validated against
  const relationshipType = db
    .$with('relationship_type', {
      name: relationshipTypes.name,
      fromEntityTypeName: relationshipTypes.fromEntityTypeName,
      toEntityTypeName: relationshipTypes.toEntityTypeName,
    })
    .as(sql`
      select ${relationshipTypes.name}, ${relationshipTypes.fromEntityTypeName}, ${relationshipTypes.toEntityTypeName}
      from ${relationshipTypes}, ${caller}
      where ${relationshipTypes.id} = ${sql.placeholder('typeId')} and ${relationshipTypes}.xmin = ${sql.placeholder('typeXmin')}::xid
        and ${relationshipTypes.projectId} = ${caller.projectId}
      for share of ${relationshipTypes}`);
  const fromEntity = alias(entities, 'from_entity');
  const toEntity = alias(entities, 'to_entity');
  // an end that is missing or of another entity type joins nothing, and nothing is inserted; the unique
  // constraints keep cardinality exact, and a violation fails the statement (the caller takes the usual path)
  const inserted = db.$with('inserted', relationshipColumns).as(sql`
    insert into ${relationships} (org_id, project_id, env_id, relationship_type_name, from_entity_id, to_entity_id,
                                  from_exclusive, to_exclusive, state, properties, labels)
    select ${caller.orgId}, ${caller.projectId}, ${caller.envId}, ${relationshipType.name}, ${fromEntity.id}, ${toEntity.id},
           case when ${sql.placeholder('oneOutgoing')}::boolean then ${fromEntity.id} end,
           case when ${sql.placeholder('oneIncoming')}::boolean then ${toEntity.id} end,
           ${sql.placeholder('state')}, ${sql.placeholder('properties')}::jsonb, ${sql.placeholder('labels')}::jsonb
    from ${caller}
      cross join ${relationshipType}
      join ${entities} as ${fromEntity} on ${fromEntity.envId} = ${caller.envId} and ${fromEntity.name} = ${sql.placeholder('from')}
                                         and ${fromEntity.entityTypeName} = ${relationshipType.fromEntityTypeName}
      join ${entities} as ${toEntity} on ${toEntity.envId} = ${caller.envId} and ${toEntity.name} = ${sql.placeholder('to')}
                                       and ${toEntity.entityTypeName} = ${relationshipType.toEntityTypeName}
    returning *`);
  const relationship = Object.fromEntries(
    Object.keys(relationshipColumns).map((key) => [key, inserted[key as keyof RelationshipColumns]]),
  ) as {
    [K in keyof RelationshipColumns]: (typeof inserted)[K];
  };
  return db
    .with(caller, relationshipType, inserted)
    .select({ caller: plainAccessColumns(caller), relationship })
    .from(inserted)
    .innerJoin(caller, sql`true`)
    .prepare(name);
}, 'cellplane_relationship_create');

/** What the statement writes, validated by the caller against `type`. */
export interface PlainRelationshipCreate {
  type: VersionedRelationshipType;
  from: string;
  to: string;
  state: string;
  properties: Record<string, unknown>;
  labels: Record<string, string>;
}

/**
 * The relationship, written in one statement for a caller without cell
 * scopes, with the values already validated against `type`; undefined when
 * nothing was written (any rule not plainly met, the type changed, a unique
 * constraint refused it, an end deleted meanwhile).
 */
export async function createRelationshipPlainly(
  ctx: ServiceContext,
  ref: EnvRef,
  create: PlainRelationshipCreate,
): Promise<RelationshipRow | undefined> {
  const state = ctx.callerState;
  if (state.resolved || state.tokenHash === undefined) return undefined;
  const now = ctx.clock.now();
  const limits = cardinalityLimits(create.type.definition.cardinality);
  let row;
  try {
    [row] = await plainCreate(ctx, ref).execute({
      tokenHash: state.tokenHash!,
      org: ref.org,
      project: ref.project,
      env: ref.env,
      now: now.toISOString(),
      typeId: create.type.version.id,
      typeXmin: create.type.version.xmin,
      from: create.from,
      to: create.to,
      oneOutgoing: limits.oneOutgoing,
      oneIncoming: limits.oneIncoming,
      state: create.state,
      properties: JSON.stringify(create.properties),
      labels: JSON.stringify(create.labels),
    });
  } catch (error) {
    // a duplicate or a taken exclusive end (the transactional path names the 409), or an end deleted meanwhile
    const code = databaseError(error)?.code;
    if (code === SQLSTATE.uniqueViolation || code === SQLSTATE.foreignKeyViolation) return undefined;
    throw error;
  }
  if (!row) return undefined;
  settlePlainCaller(state, row.caller, ref, now);
  return row.relationship;
}
