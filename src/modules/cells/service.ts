import { and, asc, eq, sql } from 'drizzle-orm';
import {
  assertEnvironmentPin,
  authorizeProject,
  type EnvironmentRow,
  type ProjectRef,
  type ProjectRow,
} from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable, Tx } from '../../db/client';
import { cellMembers, cells, entities, environments } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import type { CellConstraint } from '../catalog-items';
import { toEntity, type EntityRow } from '../entities/service';
import type { Entity } from '../entities/schemas';
import { getEntityTypeDefinition, type EntityTypeDefinition } from '../entity-types/service';
import { DEFAULT_ENVIRONMENT } from '../projects/service';
import { getRelationshipTypeDefinition, type RelationshipTypeDefinition } from '../relationship-types/service';
import { assertEntityInScope, callerCellScope, cellMembershipCondition, getCell, type CellRow, type DerivedFrom } from './membership';
import { DEFAULT_PLACEMENT_POLICY, type Cell, type CellEnvQuery, type CellMemberAdd, type CellRequest } from './schemas';

export const toCell = (row: CellRow): Cell => ({
  name: row.name,
  displayName: row.displayName,
  placementPolicy: row.placementPolicy,
  constraints: row.constraints as CellConstraint[],
  parentCells: row.parentCells,
  deploymentTarget: row.deploymentTarget,
  entityTypeName: row.entityTypeName,
  membershipMode: row.membershipMode,
  membershipDerivedFrom: row.membershipMode === 'derived' ? (row.membershipDerivedFrom as DerivedFrom) : null,
  orgId: row.orgId,
  projectId: row.projectId,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
});

const invalidReference = (message: string) => new ApiError('invalid_reference', message);

/**
 * Cell writes of one project take turns on a transaction-scoped advisory
 * lock. Parent references and the absence of cycles are properties of the
 * whole cell graph: two concurrent PUTs (a → b, b → a) would each pass their
 * own check, and a create naming a parent could race that parent's delete.
 * Under the lock each write re-reads the committed graph (READ COMMITTED
 * takes a new snapshot per statement) and checks it whole.
 */
async function lockCellGraph(tx: Tx, projectId: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`cellplane:cells:${projectId}`}, 0))`);
}

async function referencedOr400<T>(lookup: Promise<T>, message: string): Promise<T> {
  try {
    return await lookup;
  } catch (error) {
    if (error instanceof ApiError && error.code === 'not_found') throw invalidReference(message);
    throw error;
  }
}

/**
 * The row values a cell request defines, with every catalog reference checked
 * (under the graph lock). The entity and relationship types are share-locked
 * until commit, so a concurrent delete of a type either waits and then sees
 * this cell, or commits first and this check sees it gone.
 */
async function resolveDefinition(tx: Tx, project: ProjectRow, input: CellRequest) {
  const entityType: EntityTypeDefinition = await referencedOr400(
    getEntityTypeDefinition(tx, project.id, input.entityType, { lock: 'share' }),
    `entity type "${input.entityType}" does not exist`,
  );
  const membership = input.membership ?? { mode: 'explicit' as const };
  if (membership.mode === 'derived') await checkDerivedFrom(tx, project, entityType, membership.derivedFrom);
  const parentCells = [...new Set(input.parentCells ?? [])];
  await checkParents(tx, project, input.name, parentCells);
  return {
    name: input.name,
    displayName: input.displayName ?? null,
    entityTypeName: input.entityType,
    placementPolicy: input.placementPolicy ?? DEFAULT_PLACEMENT_POLICY,
    constraints: input.constraints ?? [],
    parentCells,
    deploymentTarget: input.deploymentTarget ?? null,
    membershipMode: membership.mode,
    membershipDerivedFrom: membership.mode === 'derived' ? membership.derivedFrom : null,
  };
}

/**
 * A derived cell must be able to have members: its relationship type must
 * exist and end (on the member's side) at the cell's entity type, and a
 * selector's states must be states of that type. Anything else is a typo
 * that would leave the cell silently empty.
 */
async function checkDerivedFrom(tx: Tx, project: ProjectRow, entityType: EntityTypeDefinition, derivedFrom: DerivedFrom) {
  if ('selector' in derivedFrom) {
    const unknown = (derivedFrom.selector.states ?? []).filter((state) => !entityType.states.includes(state));
    if (unknown.length > 0) {
      throw invalidReference(
        `derivedFrom.selector.states names ${unknown.map((s) => `"${s}"`).join(', ')}, not a state of entity type "${entityType.name}"`,
      );
    }
    return;
  }
  const { type, direction = 'outgoing' } = derivedFrom.relationship;
  const relationshipType: RelationshipTypeDefinition = await referencedOr400(
    getRelationshipTypeDefinition(tx, project.id, type, { lock: 'share' }),
    `derivedFrom.relationship.type: relationship type "${type}" does not exist`,
  );
  // outgoing: members are the relationships' targets; incoming: their sources
  const memberType = direction === 'outgoing' ? relationshipType.toEntityTypeName : relationshipType.fromEntityTypeName;
  if (memberType !== entityType.name) {
    throw invalidReference(
      `relationship type "${type}" (${direction}) leads to entities of type "${memberType}", not "${entityType.name}"`,
    );
  }
}

/** Parents must exist (404, SPEC) and must not lead back to the cell itself (400). */
async function checkParents(tx: Tx, project: ProjectRow, name: string, parentCells: string[]) {
  if (parentCells.includes(name)) throw invalidReference(`cell "${name}" cannot be its own parent`);
  if (parentCells.length === 0) return;
  const graph = new Map(
    (await tx.select({ name: cells.name, parentCells: cells.parentCells }).from(cells).where(eq(cells.projectId, project.id))).map(
      (cell) => [cell.name, cell.parentCells],
    ),
  );
  for (const parent of parentCells) if (!graph.has(parent)) throw notFound(`parent cell "${parent}"`);
  graph.set(name, parentCells);
  // walk up from the cell; reaching it again is a cycle, reported with its path
  const path: string[] = [name];
  const done = new Set<string>();
  const walk = (cell: string): string[] | null => {
    for (const parent of graph.get(cell) ?? []) {
      if (parent === name) return [...path, parent];
      if (done.has(parent)) continue;
      path.push(parent);
      const cycle = walk(parent);
      if (cycle) return cycle;
      path.pop();
      done.add(parent);
    }
    return null;
  };
  const cycle = walk(name);
  if (cycle) throw invalidReference(`parent cells would form a cycle: ${cycle.join(' → ')}`);
}

export async function listCells(ctx: ServiceContext, ref: ProjectRef): Promise<Cell[]> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const rows = await ctx.db.select().from(cells).where(eq(cells.projectId, project.id)).orderBy(asc(cells.name));
  return rows.map(toCell);
}

export async function readCell(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<Cell> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  return toCell(await getCell(ctx.db, project.id, name));
}

export async function createCell(ctx: ServiceContext, ref: ProjectRef, input: CellRequest): Promise<Cell> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  return ctx.db.transaction(async (tx) => {
    await lockCellGraph(tx, project.id);
    const definition = await resolveDefinition(tx, project, input);
    const [row] = await tx
      .insert(cells)
      .values({ orgId: project.orgId, projectId: project.id, ...definition })
      .onConflictDoNothing({ target: [cells.projectId, cells.name] })
      .returning();
    if (!row) throw new ApiError('already_exists', `cell "${input.name}" exists`);
    return toCell(row);
  });
}

/**
 * PUT replaces the definition wholesale (omitted fields take their defaults);
 * the round-robin counter is state, not definition, and is kept. Explicit
 * member rows are dropped when they stop meaning anything: the cell turns
 * derived, or its entity type changes (the old members are of another type).
 */
export async function replaceCell(ctx: ServiceContext, ref: ProjectRef, name: string, input: CellRequest): Promise<Cell> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  if (input.name !== name) {
    throw new ApiError('validation_failed', `body name "${input.name}" differs from the path's "${name}"; cells are not renamed`, [
      { path: 'name', message: `must equal the path's name "${name}"` },
    ]);
  }
  return ctx.db.transaction(async (tx) => {
    await lockCellGraph(tx, project.id);
    // locked before the member rows are dropped: a member add in flight holds the row FOR SHARE
    const [existing] = await tx
      .select()
      .from(cells)
      .where(and(eq(cells.projectId, project.id), eq(cells.name, name)))
      .for('update');
    if (!existing) throw notFound(`cell "${name}"`);
    const definition = await resolveDefinition(tx, project, input);
    if (definition.membershipMode === 'derived' || definition.entityTypeName !== existing.entityTypeName) {
      await tx.delete(cellMembers).where(eq(cellMembers.cellId, existing.id));
    }
    const [row] = await tx
      .update(cells)
      .set({ ...definition, updatedAt: sql`now()` })
      .where(eq(cells.id, existing.id))
      .returning();
    return toCell(row!);
  });
}

/**
 * A cell that is another cell's parent stays (409 still_referenced): deleting
 * it would leave the child pointing at nothing and silently narrow every
 * token scoped to it. Tokens naming a deleted cell in `cellScopes` see
 * nothing of it afterwards (callerCellScope fails closed).
 */
export async function deleteCell(ctx: ServiceContext, ref: ProjectRef, name: string): Promise<{ deleted: true; name: string }> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  return ctx.db.transaction(async (tx) => {
    await lockCellGraph(tx, project.id);
    const cell = await getCell(tx, project.id, name);
    const children = await tx
      .select({ name: cells.name })
      .from(cells)
      .where(and(eq(cells.projectId, project.id), sql`${name} = any(${cells.parentCells})`))
      .orderBy(asc(cells.name));
    if (children.length > 0) {
      throw new ApiError(
        'still_referenced',
        `cell "${name}" is the parent of ${children.map((c) => `"${c.name}"`).join(', ')}; change or delete those first`,
      );
    }
    await tx.delete(cells).where(eq(cells.id, cell.id));
    return { deleted: true as const, name };
  });
}

/**
 * The environment a member or recommendation call acts on: `envId` or
 * `envName` (default `default`); both given must name the same one. Unknown
 * → 400 environment_not_found (SPEC); a token pinned elsewhere → 403.
 */
export async function resolveCellEnvironment(
  ctx: ServiceContext,
  db: Queryable,
  projectId: string,
  choice: CellEnvQuery,
): Promise<EnvironmentRow> {
  const envName = choice.envName ?? (choice.envId ? undefined : DEFAULT_ENVIRONMENT);
  const [env] = await db
    .select()
    .from(environments)
    .where(
      and(
        eq(environments.projectId, projectId),
        choice.envId ? eq(environments.id, choice.envId) : undefined,
        envName !== undefined ? eq(environments.name, envName) : undefined,
      ),
    )
    .limit(1);
  if (!env) {
    const named = [choice.envId && `id "${choice.envId}"`, envName !== undefined && `name "${envName}"`].filter(Boolean).join(' and ');
    throw new ApiError('environment_not_found', `no environment of this project has ${named}`);
  }
  assertEnvironmentPin(ctx.caller, env);
  return env;
}

/** The cell's members in one environment that the caller may see, by name. */
export async function memberRows(ctx: ServiceContext, db: Queryable, cell: CellRow, env: EnvironmentRow): Promise<EntityRow[]> {
  const scope = await callerCellScope(ctx, cell.projectId, db);
  return db
    .select()
    .from(entities)
    .where(and(eq(entities.envId, env.id), cellMembershipCondition(cell), scope))
    .orderBy(asc(entities.name));
}

export async function listCellMembers(ctx: ServiceContext, ref: ProjectRef, name: string, query: CellEnvQuery): Promise<Entity[]> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const cell = await getCell(ctx.db, project.id, name);
  const env = await resolveCellEnvironment(ctx, ctx.db, project.id, query);
  return (await memberRows(ctx, ctx.db, cell, env)).map(toEntity);
}

/**
 * The member write's checks, in the order their errors answer: the cell is
 * re-read under a share lock, so a concurrent PUT (which may turn the cell
 * derived and drop its member rows) either waits for this write or is seen
 * by it; the entity is key-share locked so it cannot vanish under the insert.
 */
async function lockedMemberWrite(
  tx: Tx,
  projectId: string,
  name: string,
  env: EnvironmentRow,
  entityName: string,
): Promise<{ cell: CellRow; entity: EntityRow }> {
  const [cell] = await tx
    .select()
    .from(cells)
    .where(and(eq(cells.projectId, projectId), eq(cells.name, name)))
    .for('share');
  if (!cell) throw notFound(`cell "${name}"`);
  if (cell.membershipMode === 'derived') {
    throw new ApiError('membership_derived', `cell "${name}" derives its members; they cannot be added or removed directly`);
  }
  const [entity] = await tx
    .select()
    .from(entities)
    .where(and(eq(entities.envId, env.id), eq(entities.name, entityName)))
    .for('key share');
  if (!entity) throw notFound(`entity "${entityName}" in environment "${env.name}"`);
  return { cell, entity };
}

/**
 * Adds an entity to an explicit cell; adding a member again is a no-op (201).
 * A cell-scoped token may only add entities it can already see: adding one
 * from outside would widen its own scope.
 */
export async function addCellMember(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
  query: CellEnvQuery,
  input: CellMemberAdd,
): Promise<void> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  await getCell(ctx.db, project.id, name);
  const choice = input.envId !== undefined || input.envName !== undefined ? { envId: input.envId, envName: input.envName } : query;
  const env = await resolveCellEnvironment(ctx, ctx.db, project.id, choice);
  await ctx.db.transaction(async (tx) => {
    const { cell, entity } = await lockedMemberWrite(tx, project.id, name, env, input.entityName);
    if (input.entityTypeName !== entity.entityTypeName) {
      throw new ApiError('type_mismatch', `entity "${entity.name}" is of type "${entity.entityTypeName}", not "${input.entityTypeName}"`);
    }
    if (entity.entityTypeName !== cell.entityTypeName) {
      throw new ApiError(
        'type_mismatch',
        `cell "${cell.name}" holds entities of type "${cell.entityTypeName}", not "${entity.entityTypeName}"`,
      );
    }
    await assertEntityInScope(tx, await callerCellScope(ctx, project.id, tx), entity.id, entity.name);
    await tx.insert(cellMembers).values({ cellId: cell.id, envId: env.id, entityId: entity.id }).onConflictDoNothing();
  });
}

/**
 * Removes an explicit member; removing an entity that is not a member is a
 * no-op (200). A cell-scoped token may not remove an entity it cannot see,
 * nor one that would leave its cells by the removal (checked after the
 * delete, inside the transaction, so the refusal rolls it back).
 */
export async function removeCellMember(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
  entityName: string,
  query: CellEnvQuery,
): Promise<void> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  await getCell(ctx.db, project.id, name);
  const env = await resolveCellEnvironment(ctx, ctx.db, project.id, query);
  await ctx.db.transaction(async (tx) => {
    const { cell, entity } = await lockedMemberWrite(tx, project.id, name, env, entityName);
    const scope = await callerCellScope(ctx, project.id, tx);
    await assertEntityInScope(tx, scope, entity.id, entity.name);
    await tx.delete(cellMembers).where(and(eq(cellMembers.cellId, cell.id), eq(cellMembers.entityId, entity.id)));
    await assertEntityInScope(tx, scope, entity.id, entity.name);
  });
}
