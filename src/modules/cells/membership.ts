import { and, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { cells, entities } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';

/**
 * Cell membership as SQL. A cell's members are entities of its entity type
 * that are either listed explicitly (cell_members) or match its derived
 * selector — evaluated in the query, so derived membership is always
 * current. The same conditions filter what a cell-scoped token sees.
 */

export type CellRow = typeof cells.$inferSelect;

export type DerivedFrom =
  | { selector: { labels?: Record<string, string>; states?: string[]; properties?: Record<string, unknown> } }
  | { relationship: { type: string; entity: string; direction?: 'outgoing' | 'incoming' } };

/** The cell `name` of a project, or a 404. Other modules reach cells through this. */
export async function getCell(db: Queryable, projectId: string, name: string): Promise<CellRow> {
  const [row] = await db
    .select()
    .from(cells)
    .where(and(eq(cells.projectId, projectId), eq(cells.name, name)))
    .limit(1);
  if (!row) throw notFound(`cell "${name}"`);
  return row;
}

/** A condition on the `entities` table: the entity is a member of `cell`. */
export function cellMembershipCondition(cell: CellRow): SQL {
  const ofType = eq(entities.entityTypeName, cell.entityTypeName);
  if (cell.membershipMode === 'explicit') {
    return and(
      ofType,
      sql`exists (select 1 from cell_members m where m.cell_id = ${cell.id} and m.entity_id = ${entities.id})`,
    )!;
  }
  const derived = cell.membershipDerivedFrom as DerivedFrom;
  if ('selector' in derived) {
    const { labels, states, properties } = derived.selector;
    return and(
      ofType,
      labels && Object.keys(labels).length > 0 ? sql`${entities.labels} @> ${JSON.stringify(labels)}::jsonb` : undefined,
      states && states.length > 0 ? sql`${entities.state} in (${sql.join(states.map((s) => sql`${s}`), sql`, `)})` : undefined,
      properties && Object.keys(properties).length > 0
        ? sql`${entities.properties} @> ${JSON.stringify(properties)}::jsonb`
        : undefined,
    )!;
  }
  const { type, entity, direction = 'outgoing' } = derived.relationship;
  // outgoing: members are the targets of `entity`'s relationships of `type`; incoming: their sources
  const anchorEnd = direction === 'outgoing' ? sql.raw('r.from_entity_id') : sql.raw('r.to_entity_id');
  const memberEnd = direction === 'outgoing' ? sql.raw('r.to_entity_id') : sql.raw('r.from_entity_id');
  return and(
    ofType,
    sql`exists (select 1 from relationships r join entities anchor on anchor.id = ${anchorEnd}
      where r.env_id = ${entities.envId} and r.relationship_type_name = ${type}
        and anchor.name = ${entity} and ${memberEnd} = ${entities.id})`,
  )!;
}

/** The named cells and, transitively, every cell that names one of them as a parent. */
export function withDescendants(all: CellRow[], names: string[]): CellRow[] {
  const included = new Set(names);
  let grew = true;
  while (grew) {
    grew = false;
    for (const cell of all) {
      if (!included.has(cell.name) && cell.parentCells.some((parent) => included.has(parent))) {
        included.add(cell.name);
        grew = true;
      }
    }
  }
  return all.filter((cell) => included.has(cell.name));
}

/**
 * What a caller may see of an environment's entities: undefined for "all",
 * or a condition on `entities` for a cell-scoped token (membership of any
 * scoped cell or of a cell beneath one). A scope naming no existing cell
 * matches nothing.
 */
export async function callerCellScope(ctx: ServiceContext, projectId: string, db: Queryable = ctx.db): Promise<SQL | undefined> {
  const { grants } = ctx.caller;
  if (grants.scope !== 'project' || grants.cellScopes.length === 0) return undefined;
  const projectCells = await db.select().from(cells).where(eq(cells.projectId, projectId));
  const scoped = withDescendants(projectCells, grants.cellScopes);
  if (scoped.length === 0) return sql`false`;
  return sql`(${sql.join(scoped.map((cell) => sql`(${cellMembershipCondition(cell)})`), sql` or `)})`;
}

/**
 * Refuses a write that leaves (or never entered) the caller's cells: run
 * inside the write's transaction, after the row is written, so the rollback
 * undoes it. For updates, call it before the change as well.
 */
export async function assertEntityInScope(db: Queryable, scope: SQL | undefined, entityId: string, name: string): Promise<void> {
  if (!scope) return;
  const [row] = await db
    .select({ inScope: sql<boolean>`true` })
    .from(entities)
    .where(and(eq(entities.id, entityId), scope))
    .limit(1);
  if (!row) throw new ApiError('cell_scope_violation', `entity "${name}" is outside the token's cells`);
}

/**
 * The cells each of `entityIds` is a direct member of now, in one query
 * whatever the number of entities (one membership test per cell of the
 * project). Entities that no longer exist are absent from the map.
 */
export async function entityCells(db: Queryable, projectId: string, entityIds: string[]): Promise<Map<string, string[]>> {
  const result = new Map<string, string[]>();
  if (entityIds.length === 0) return result;
  const projectCells = await db.select().from(cells).where(eq(cells.projectId, projectId));
  if (projectCells.length === 0) {
    for (const id of entityIds) result.set(id, []);
    return result;
  }
  const memberships = sql.join(
    projectCells.map((cell) => sql`case when ${cellMembershipCondition(cell)} then ${cell.name} end`),
    sql`, `,
  );
  const rows = await db
    .select({ id: entities.id, cells: sql<string[]>`array_remove(array[${memberships}]::text[], null)` })
    .from(entities)
    .where(inArray(entities.id, entityIds));
  for (const row of rows) result.set(row.id, row.cells);
  return result;
}

/**
 * A cell-scoped caller's cells with every cell beneath them, by name; null
 * for a caller without cell scopes. For readers that filter in memory (the
 * change stream) rather than in SQL.
 */
export async function callerScopeCellNames(ctx: ServiceContext, projectId: string, db: Queryable = ctx.db): Promise<Set<string> | null> {
  const { grants } = ctx.caller;
  if (grants.scope !== 'project' || grants.cellScopes.length === 0) return null;
  const projectCells = await db.select().from(cells).where(eq(cells.projectId, projectId));
  return new Set(withDescendants(projectCells, grants.cellScopes).map((cell) => cell.name));
}
