import { sql, type SQL } from 'drizzle-orm';
import type { Tx } from '../db/client';
import { entities, entityChanges, environments } from '../db/schema';

export type EntityChangeType = 'entity.created' | 'entity.updated' | 'entity.deleted';

/**
 * Appends one change to the environment's log, inside the writer's
 * transaction. The sequence comes from `environments.change_seq`, and the
 * row lock that UPDATE takes is held to commit: writers of one environment
 * commit in sequence order, so a reader never sees seq N+1 before N.
 */
export async function recordEntityChange(
  tx: Tx,
  /** The request's changedEnvironments: the environment is published to stream subscribers once the request succeeds. */
  notes: Set<string>,
  envId: string,
  change: {
    type: EntityChangeType;
    entity: { id: string; name: string; entityTypeName: string } & Record<string, unknown>;
    /** Deletes: the cells the entity was a direct member of before it went (src/stream/feed.ts). */
    cells?: string[];
  },
): Promise<number> {
  notes.add(envId);
  const entity =
    change.type === 'entity.deleted'
      ? { id: change.entity.id, name: change.entity.name, entityTypeName: change.entity.entityTypeName }
      : change.entity;
  // one statement: the counter's row lock is taken and the change written in the same round trip
  const result = await tx.execute<{ seq: string | number }>(sql`
    with next as (
      update ${environments} set change_seq = change_seq + 1 where id = ${envId} returning change_seq
    )
    insert into ${entityChanges} (env_id, seq, type, entity_id, entity_name, entity_type_name, entity, cells)
    select ${envId}, next.change_seq, ${change.type}, ${change.entity.id}, ${change.entity.name},
           ${change.entity.entityTypeName}, ${JSON.stringify(entity)}::jsonb,
           ${change.cells === undefined ? sql`null::text[]` : sql`array[${sql.join(change.cells.map((cell) => sql`${cell}`), sql`, `)}]::text[]`}
    from next
    returning seq`);
  // every driver behind Db (pg, PGlite, Neon) answers { rows }; bigint arrives as a string from some
  const [row] = (result as unknown as { rows: { seq: string | number }[] }).rows;
  return Number(row!.seq);
}

/** A change of recordEntityChanges: a created or updated entity by id (its row as this transaction left it), a deleted one as it was. */
export type EntityChangeRef =
  | { type: 'entity.created' | 'entity.updated'; entityId: string }
  | { type: 'entity.deleted'; entity: { id: string; name: string; entityTypeName: string }; cells: string[] };

/** An instant as `Date.toISOString()` writes it (UTC, milliseconds); the app writes timestamps from Dates, so nothing finer is lost. */
const isoInstant = (column: SQL) => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * The API's Entity (toEntity in src/modules/entities/service.ts) built from
 * an `entities` row in SQL, so a batch's change rows are made where the
 * rows are. test/node/batch.test.ts checks it against GET .../entities/{name}.
 */
const entityJson = (e: string) => {
  const column = (name: string) => sql.raw(`${e}.${name}`);
  return sql`jsonb_build_object(
    'id', ${column('id')}, 'entityTypeName', ${column('entity_type_name')}, 'name', ${column('name')}, 'state', ${column('state')},
    'properties', ${column('properties')}, 'labels', ${column('labels')},
    'lastSyncedAt', ${isoInstant(column('last_synced_at'))}, 'syncSource', ${column('sync_source')},
    'createdAt', ${isoInstant(column('created_at'))}, 'updatedAt', ${isoInstant(column('updated_at'))},
    'orgId', ${column('org_id')}, 'projectId', ${column('project_id')}, 'envId', ${column('env_id')})`;
};

/**
 * recordEntityChange for many changes of one environment, in one statement:
 * the counter moves by `changes.length` (one row lock, taken last, as above)
 * and the changes get the sequences after it, in the order given. A created
 * or updated entity's change carries its row as this transaction wrote it,
 * read here rather than sent. Nothing happens, and nothing is noted, for no
 * changes. Returns the sequences.
 */
export async function recordEntityChanges(tx: Tx, notes: Set<string>, envId: string, changes: EntityChangeRef[]): Promise<number[]> {
  if (changes.length === 0) return [];
  notes.add(envId);
  const rows = changes.map((change, i) =>
    change.type === 'entity.deleted'
      ? {
          ord: i + 1,
          type: change.type,
          entity_id: change.entity.id,
          entity_name: change.entity.name,
          entity_type_name: change.entity.entityTypeName,
          cells: change.cells,
        }
      : { ord: i + 1, type: change.type, entity_id: change.entityId },
  );
  const result = await tx.execute<{ seq: string | number }>(sql`
    with next as (
      update ${environments} set change_seq = change_seq + ${changes.length} where id = ${envId} returning change_seq
    )
    insert into ${entityChanges} (env_id, seq, type, entity_id, entity_name, entity_type_name, entity, cells)
    select ${envId}, next.change_seq - ${changes.length} + c.ord, c.type,
           coalesce(e.id, c.entity_id), coalesce(e.name, c.entity_name), coalesce(e.entity_type_name, c.entity_type_name),
           case when c.type = 'entity.deleted'
             then jsonb_build_object('id', c.entity_id, 'name', c.entity_name, 'entityTypeName', c.entity_type_name)
             else ${entityJson('e')}
           end,
           case when jsonb_typeof(c.cells) = 'array'
             then array(select cell.value from jsonb_array_elements_text(c.cells) with ordinality as cell(value, n) order by cell.n)
           end
    from next
    cross join jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
      as c(ord bigint, type text, entity_id uuid, entity_name text, entity_type_name text, cells jsonb)
    left join ${entities} e on c.type <> 'entity.deleted' and e.id = c.entity_id and e.env_id = ${envId}
    order by c.ord
    returning seq`);
  return (result as unknown as { rows: { seq: string | number }[] }).rows.map((row) => Number(row.seq)).sort((a, b) => a - b);
}
