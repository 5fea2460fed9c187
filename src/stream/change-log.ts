import { eq, sql } from 'drizzle-orm';
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
  envId: string,
  change: { type: EntityChangeType; entity: { id: string; name: string; entityTypeName: string } & Record<string, unknown> },
): Promise<number> {
  const [env] = await tx
    .update(environments)
    .set({ changeSeq: sql`${environments.changeSeq} + 1` })
    .where(eq(environments.id, envId))
    .returning({ seq: environments.changeSeq });
  const seq = env!.seq;
  const entity =
    change.type === 'entity.deleted'
      ? { id: change.entity.id, name: change.entity.name, entityTypeName: change.entity.entityTypeName }
      : change.entity;
  await tx.insert(entityChanges).values({
    envId,
    seq,
    type: change.type,
    entityId: change.entity.id,
    entityName: change.entity.name,
    entityTypeName: change.entity.entityTypeName,
    entity,
  });
  return seq;
}
