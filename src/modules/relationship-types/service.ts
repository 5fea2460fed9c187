import { and, eq } from 'drizzle-orm';
import type { Queryable } from '../../db/client';
import { relationshipTypes } from '../../db/schema';
import { notFound } from '../../http/errors';
import type { PropertyDefinition } from '../properties';

export type RelationshipTypeRow = typeof relationshipTypes.$inferSelect;

export interface RelationshipTypeDefinition extends Omit<RelationshipTypeRow, 'properties' | 'constraints'> {
  properties: PropertyDefinition[];
  constraints: unknown[];
}

/** The relationship type `name` of a project, or a 404. Other modules reach relationship types through this. */
export async function getRelationshipTypeDefinition(
  db: Queryable,
  projectId: string,
  name: string,
): Promise<RelationshipTypeDefinition> {
  const [row] = await db
    .select()
    .from(relationshipTypes)
    .where(and(eq(relationshipTypes.projectId, projectId), eq(relationshipTypes.name, name)))
    .limit(1);
  if (!row) throw notFound(`relationship type "${name}"`);
  return row as RelationshipTypeDefinition;
}
