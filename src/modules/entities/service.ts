import { entities } from '../../db/schema';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import type { Entity } from './schemas';

export type EntityRow = typeof entities.$inferSelect;

export const toEntity = (row: EntityRow): Entity => ({
  id: row.id,
  entityTypeName: row.entityTypeName,
  name: row.name,
  state: row.state,
  properties: row.properties as Record<string, unknown>,
  labels: row.labels as Record<string, string>,
  lastSyncedAt: optionalTimestamp(row.lastSyncedAt),
  syncSource: row.syncSource,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
  orgId: row.orgId,
  projectId: row.projectId,
  envId: row.envId,
});
