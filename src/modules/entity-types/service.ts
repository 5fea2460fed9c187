import { and, eq } from 'drizzle-orm';
import type { Queryable } from '../../db/client';
import { entityTypes } from '../../db/schema';
import { notFound } from '../../http/errors';
import type { EntityTypeConstraint, MetricDefinition, SyncFreshness } from '../catalog-items';
import type { PropertyDefinition } from '../properties';

export type EntityTypeRow = typeof entityTypes.$inferSelect;

/** An entity type with its jsonb columns typed. */
export interface EntityTypeDefinition extends Omit<EntityTypeRow, 'properties' | 'metrics' | 'constraints' | 'syncFreshness'> {
  properties: PropertyDefinition[];
  metrics: MetricDefinition[];
  constraints: EntityTypeConstraint[];
  syncFreshness: SyncFreshness | null;
}

/** The entity type `name` of a project, or a 404. Other modules reach entity types through this. */
export async function getEntityTypeDefinition(db: Queryable, projectId: string, name: string): Promise<EntityTypeDefinition> {
  const [row] = await db
    .select()
    .from(entityTypes)
    .where(and(eq(entityTypes.projectId, projectId), eq(entityTypes.name, name)))
    .limit(1);
  if (!row) throw notFound(`entity type "${name}"`);
  return row as EntityTypeDefinition;
}
