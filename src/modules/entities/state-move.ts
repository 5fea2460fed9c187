import { eq } from 'drizzle-orm';
import type { Tx } from '../../db/client';
import { entities } from '../../db/schema';
import type { Clock } from '../../platform';
import { recordEntityChange } from '../../stream/change-log';
import { getEntityTypeDefinition } from '../entity-types/service';
import { toEntity } from './service';

export type StateMove =
  | { moved: true; entityName: string; seq: number }
  | { moved: false; reason: 'entity-gone' | 'already-there' | 'state-not-declared' };

/**
 * Moves an entity to `state` on behalf of a completing run (its action's
 * onSuccess / onFailure), inside the run's transaction, with a change-log
 * row like any other entity update.
 *
 * The action's definition is the authority for the move, so the type's
 * transition constraints do not apply; the state must still be one of the
 * type's states (a type edited since the action was defined may have dropped
 * it). Lock order as for every entity write: the entity row, the type's row
 * FOR SHARE, the environment's change counter.
 */
export async function moveEntityState(tx: Tx, deps: { clock: Clock; changes: Set<string> }, entityId: string, state: string): Promise<StateMove> {
  const [entity] = await tx.select().from(entities).where(eq(entities.id, entityId)).limit(1).for('update');
  if (!entity) return { moved: false, reason: 'entity-gone' };
  if (entity.state === state) return { moved: false, reason: 'already-there' };
  const type = await getEntityTypeDefinition(tx, entity.projectId, entity.entityTypeName, { lock: 'share' });
  if (!type.states.includes(state)) return { moved: false, reason: 'state-not-declared' };
  const [updated] = await tx
    .update(entities)
    .set({ state, updatedAt: deps.clock.now() })
    .where(eq(entities.id, entityId))
    .returning();
  const seq = await recordEntityChange(tx, deps.changes, updated!.envId, { type: 'entity.updated', entity: toEntity(updated!) });
  return { moved: true, entityName: updated!.name, seq };
}
