import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { CARDINALITIES } from '../catalog-items';
import { StateList } from '../entity-types/schemas';
import { DisplayName, ResourceName } from '../names';
import { PropertyDefinition, PropertyDefinitions } from '../properties';

/** Constraint items of a relationship type: free-form objects, stored as given (DECISIONS §2 defines none yet). */
const RelationshipTypeConstraint = z.record(z.string(), z.unknown()).openapi({ description: 'Free-form; stored as given' });

/** Create and update body (SPEC Resources, RelationshipType). */
export const RelationshipTypeRequest = z
  .strictObject({
    kind: z.literal('RelationshipType'),
    name: ResourceName.openapi({ example: 'runs-on' }),
    displayName: DisplayName.optional().openapi({ example: 'Runs on' }),
    from: ResourceName.openapi({ description: 'Entity type of the source end', example: 'service' }),
    to: ResourceName.openapi({ description: 'Entity type of the target end', example: 'vm' }),
    cardinality: z.enum(CARDINALITIES).optional().openapi({ description: 'Defaults to many-to-many' }),
    states: StateList.openapi({
      description: 'The first state is the initial one of a relationship created without `state`',
      example: ['active', 'draining'],
    }),
    properties: PropertyDefinitions.optional(),
    constraints: z.array(RelationshipTypeConstraint).optional(),
  })
  .openapi('RelationshipTypeRequest');
export type RelationshipTypeRequest = z.infer<typeof RelationshipTypeRequest>;

/** The RelationshipType response: exactly SPEC's fields; an unset displayName is null. */
export const RelationshipType = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    cardinality: z.enum(CARDINALITIES),
    states: z.array(z.string()),
    properties: z.array(PropertyDefinition),
    constraints: z.array(RelationshipTypeConstraint),
    fromEntityTypeName: z.string(),
    toEntityTypeName: z.string(),
    orgId: z.uuid(),
    projectId: z.uuid(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('RelationshipType');
export type RelationshipType = z.infer<typeof RelationshipType>;

export const RelationshipTypeDeleted = z
  .object({ deleted: z.literal(true), name: z.string() })
  .openapi('RelationshipTypeDeleted');

export const ProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
});

export const RelationshipTypeParams = ProjectParams.extend({
  name: z.string().min(1).openapi({ description: 'Relationship type name (URL-encode / and :)', example: 'runs-on' }),
});
