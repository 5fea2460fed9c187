import { sql } from 'drizzle-orm';
import type { Tx } from '../db/client';
import { entityChanges, environments } from '../db/schema';

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
