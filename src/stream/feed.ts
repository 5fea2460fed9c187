import { and, asc, eq, gt, lt, sql } from 'drizzle-orm';
import type { Queryable } from '../db/client';
import { entityChanges, environments } from '../db/schema';
import { entityCells } from '../modules/cells/membership';
import type { EntityChangeType } from './change-log';

/**
 * Reading the change log (src/stream/change-log.ts writes it) for the SSE
 * stream and the JSON catch-up (DECISIONS §6). Sequences are gapless per
 * environment: each change takes change_seq + 1 in its writer's
 * transaction, and a rolled-back write takes its number back with it. So
 * "the row after my resume point is missing" can only mean it was pruned.
 */

/** How long changes are kept: DECISIONS §6 asks for at least 24 h. */
export const CHANGE_RETENTION_MS = 72 * 60 * 60 * 1000;

export interface ChangeRow {
  seq: number;
  type: EntityChangeType;
  entityId: string;
  entityTypeName: string;
  entity: Record<string, unknown>;
  at: Date;
  /** Direct cell memberships, attached when some reader filters by cell (attachCells). */
  cells?: string[];
  /** Stored for deletes (the memberships are gone with the entity). */
  storedCells: string[] | null;
}

/** The event every reader sends: `{ type, entity, at }` (DECISIONS §6). */
export const changeEvent = (change: ChangeRow) => ({ type: change.type, entity: change.entity, at: change.at.toISOString() });

/** The columns of a change-log row that make a ChangeRow: what the log read selects, and what a writer's statement returns of the row it logged. */
export const CHANGE_LOG_COLUMNS = {
  seq: entityChanges.seq,
  type: entityChanges.type,
  entityId: entityChanges.entityId,
  entityTypeName: entityChanges.entityTypeName,
  entity: entityChanges.entity,
  at: entityChanges.at,
  cells: entityChanges.cells,
};

/** A change-log row, read as drizzle maps CHANGE_LOG_COLUMNS, as the stream hands it on. */
export const changeRowOf = (row: Pick<ChangeRow, 'seq' | 'type' | 'entityId' | 'entityTypeName' | 'at'> & { entity: unknown; cells: string[] | null }): ChangeRow => ({
  seq: row.seq,
  type: row.type,
  entityId: row.entityId,
  entityTypeName: row.entityTypeName,
  entity: row.entity as Record<string, unknown>,
  at: row.at,
  storedCells: row.cells,
});

/**
 * The log read, built once per database handle. The hub reads the log once
 * per published change (src/stream/hub.ts), and building the query each
 * time (drizzle's builder: the SQL text, its params, the selection) cost
 * more CPU than the round trip and its rows: on Postgres ~0.25–0.6 ms a read
 * built, ~0.1 ms prepared, which at 100 subscribers was 2–5 µs of every
 * frame's (bench/http/stream-cost.ts). Unnamed: Postgres parses it per
 * execution as before, and no name can collide on a handle where named
 * statements are not allowed (Platform.namedStatements).
 */
const buildChangesAfter = (db: Queryable) =>
  db
    .select(CHANGE_LOG_COLUMNS)
    .from(entityChanges)
    .where(and(eq(entityChanges.envId, sql.placeholder('envId')), gt(entityChanges.seq, sql.placeholder('after'))))
    .orderBy(asc(entityChanges.seq))
    .limit(sql.placeholder('limit'))
    .prepare('');
const changesAfter = new WeakMap<Queryable, ReturnType<typeof buildChangesAfter>>();

/** Up to `limit` changes of the environment after `after`, in order. */
export async function readChanges(db: Queryable, envId: string, after: number, limit: number): Promise<ChangeRow[]> {
  let query = changesAfter.get(db);
  if (!query) changesAfter.set(db, (query = buildChangesAfter(db)));
  const rows = await query.execute({ envId, after, limit });
  return rows.map(changeRowOf);
}

/** The environment's latest sequence: where a stream without a resume point starts. */
export async function latestSeq(db: Queryable, envId: string): Promise<number> {
  const [row] = await db.select({ seq: environments.changeSeq }).from(environments).where(eq(environments.id, envId)).limit(1);
  return row?.seq ?? 0;
}

/**
 * Where a reader resuming after `after` stands: the environment's latest
 * sequence, and `verdict`: `resumable` when every change after `after` is
 * still in the log, `pruned` when the change right after it is gone (the
 * reader must resync), `beyond` for a point the environment never reached.
 */
export async function resumePoint(
  db: Queryable,
  envId: string,
  after: number,
): Promise<{ latest: number; verdict: 'resumable' | 'pruned' | 'beyond' }> {
  const latest = await latestSeq(db, envId);
  if (after > latest) return { latest, verdict: 'beyond' };
  if (after === latest) return { latest, verdict: 'resumable' };
  const [next] = await db
    .select({ seq: entityChanges.seq })
    .from(entityChanges)
    .where(and(eq(entityChanges.envId, envId), eq(entityChanges.seq, after + 1)))
    .limit(1);
  return { latest, verdict: next ? 'resumable' : 'pruned' };
}

/** Sets `cells` on each change: stored ones for deletes, the entity's current ones otherwise. */
export async function attachCells(db: Queryable, projectId: string, changes: ChangeRow[]): Promise<void> {
  const live = changes.filter((change) => change.type !== 'entity.deleted');
  const current = await entityCells(db, projectId, [...new Set(live.map((change) => change.entityId))]);
  for (const change of changes) {
    change.cells = change.type === 'entity.deleted' ? (change.storedCells ?? []) : (current.get(change.entityId) ?? []);
  }
}

export interface ChangeFilter {
  entityType?: string;
  /** Only direct members of this cell (as the entity list's `cell` filter). */
  cell?: string;
  /** A cell-scoped token's cells with their descendants; null when unscoped. */
  scopeCells: ReadonlySet<string> | null;
}

export const needsCells = (filter: ChangeFilter) => filter.cell !== undefined || filter.scopeCells !== null;

/** Whether a change passes a reader's filter; `cells` must be attached when needsCells(filter). */
export function passes(filter: ChangeFilter, change: ChangeRow): boolean {
  if (filter.entityType !== undefined && change.entityTypeName !== filter.entityType) return false;
  if (filter.cell !== undefined && !(change.cells ?? []).includes(filter.cell)) return false;
  const scope = filter.scopeCells;
  if (scope !== null && !(change.cells ?? []).some((cell) => scope.has(cell))) return false;
  return true;
}

/** Drops changes older than the retention, everywhere; returns how many. */
export async function pruneChanges(db: Queryable, now: Date, retentionMs = CHANGE_RETENTION_MS): Promise<number> {
  const pruned = await db
    .delete(entityChanges)
    .where(lt(entityChanges.at, new Date(now.getTime() - retentionMs)))
    .returning({ seq: entityChanges.seq });
  return pruned.length;
}

