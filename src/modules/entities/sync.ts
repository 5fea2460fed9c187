import type { z } from '@hono/zod-openapi';
import { eq } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import { entities } from '../../db/schema';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { recordEntityChange } from '../../stream/change-log';
import { DEFAULT_SYNC_MAX_AGE_SECONDS } from '../catalog-items';
import { callerCellScope } from '../cells/membership';
import { getEntityTypeDefinition } from '../entity-types/service';
import type { EntityDriftStatus, SyncStampResult } from './schemas';
import { entityForWrite, notInFuture, toEntity, visibleEntity, type EntityRow } from './service';

/** Sync stamps (who last saw the entity as it is) and the drift they imply. */

/**
 * Records that `source` saw the entity in sync at `observedAt` (default now).
 * It never moves lastSyncedAt backwards: a stamp older than the recorded one
 * (a retried or late delivery) changes nothing and answers the current values.
 * A stamp that does apply is an entity update: updatedAt moves and one
 * `entity.updated` change is logged.
 */
export async function stampEntitySync(
  ctx: ServiceContext,
  ref: EnvRef,
  name: string,
  input: { source: string; observedAt?: string },
): Promise<z.infer<typeof SyncStampResult>> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const now = ctx.clock.now();
  const observedAt = input.observedAt === undefined ? now : notInFuture(ctx, input.observedAt, 'observedAt');
  const scope = await callerCellScope(ctx, project.id);
  const row = await ctx.db.transaction(async (tx) => {
    const current = await entityForWrite(tx, env.id, name, scope, { lock: true });
    if (current.lastSyncedAt && current.lastSyncedAt.getTime() > observedAt.getTime()) return current;
    const [updated] = (await tx
      .update(entities)
      .set({ lastSyncedAt: observedAt, syncSource: input.source, updatedAt: now })
      .where(eq(entities.id, current.id))
      .returning()) as [EntityRow];
    await recordEntityChange(tx, ctx.changedEnvironments, env.id, { type: 'entity.updated', entity: toEntity(updated) });
    return updated;
  });
  return { name: row.name, lastSyncedAt: timestamp(row.lastSyncedAt!), syncSource: row.syncSource };
}

export async function getEntityDrift(ctx: ServiceContext, ref: EnvRef, name: string): Promise<z.infer<typeof EntityDriftStatus>> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  const row = await visibleEntity(ctx, env.id, name, scope);
  const type = await getEntityTypeDefinition(ctx.db, project.id, row.entityTypeName);
  const base = { name: row.name, lastSyncedAt: optionalTimestamp(row.lastSyncedAt), syncSource: row.syncSource };
  if (!type.syncTracked) {
    return { ...base, driftStatus: 'untracked', message: `entity type "${type.name}" is not sync-tracked` };
  }
  const maxAgeSeconds = type.syncFreshness?.maxAgeSeconds ?? DEFAULT_SYNC_MAX_AGE_SECONDS;
  if (!row.lastSyncedAt) {
    return { ...base, driftStatus: 'never-synced', message: `no sync recorded yet; expected at least every ${maxAgeSeconds} s` };
  }
  const ageMs = ctx.clock.now().getTime() - row.lastSyncedAt.getTime();
  const ageSeconds = Math.max(0, Math.floor(ageMs / 1000));
  const by = row.syncSource === null ? '' : ` by "${row.syncSource}"`;
  return ageMs <= maxAgeSeconds * 1000
    ? { ...base, driftStatus: 'in-sync', message: `last synced ${ageSeconds} s ago${by}, within the ${maxAgeSeconds} s freshness window` }
    : { ...base, driftStatus: 'stale', message: `last synced ${ageSeconds} s ago${by}, beyond the ${maxAgeSeconds} s freshness window` };
}
