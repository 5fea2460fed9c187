import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { EnvParams } from '../entities/schemas';
import { ResourceName } from '../names';

const RelationshipFields = {
  id: z.uuid(),
  relationshipTypeName: z.string(),
  fromEntityId: z.uuid(),
  toEntityId: z.uuid(),
  state: z.string(),
  properties: z.record(z.string(), z.unknown()),
  labels: z.record(z.string(), z.string()),
  envId: z.uuid(),
  orgId: z.uuid(),
  projectId: z.uuid(),
  createdAt: Timestamp,
  updatedAt: Timestamp,
};

/** The Relationship response (SPEC Resources, Relationship): exactly these fields. */
export const Relationship = z.object(RelationshipFields).openapi('Relationship');
export type Relationship = z.infer<typeof Relationship>;

/** A row of an entity's relationship list: the Relationship plus the names of both ends. */
export const EntityRelationship = z
  .object({
    ...RelationshipFields,
    fromEntityName: z.string(),
    toEntityName: z.string(),
  })
  .openapi('EntityRelationship');
export type EntityRelationship = z.infer<typeof EntityRelationship>;

const Properties = z
  .record(z.string(), z.unknown())
  .openapi({ description: "Validated against the relationship type's property definitions", example: { port: 5432 } });
const Labels = z.record(z.string(), z.string()).openapi({ example: { team: 'payments' } });

export const RelationshipCreate = z
  .strictObject({
    relationshipType: ResourceName.openapi({ example: 'connects-to' }),
    from: ResourceName.openapi({ description: 'Name of the source entity in this environment', example: 'api' }),
    to: ResourceName.openapi({ description: 'Name of the target entity in this environment', example: 'db' }),
    state: z.string().min(1).optional().openapi({ description: "One of the type's states; default: its first state" }),
    properties: Properties.optional(),
    labels: Labels.optional(),
  })
  .openapi('RelationshipCreate');
export type RelationshipCreate = z.infer<typeof RelationshipCreate>;

/** The type and both ends are immutable: delete and re-create to change them. */
export const RelationshipUpdate = z
  .strictObject({
    state: z.string().min(1).optional(),
    properties: Properties.optional().openapi({ description: 'Replaces the stored properties; validated as on create' }),
    labels: Labels.optional().openapi({ description: 'Replaces the stored labels' }),
  })
  .openapi('RelationshipUpdate');
export type RelationshipUpdate = z.infer<typeof RelationshipUpdate>;

export const RelationshipDeleted = z
  .object({ deleted: z.literal(true), id: z.uuid() })
  .openapi('RelationshipDeleted');

export const RelationshipListQuery = z.object({
  relationshipType: z.string().min(1).optional().openapi({ description: 'Only relationships of this type' }),
  from: z.string().min(1).optional().openapi({ description: 'Only relationships from the entity of this name' }),
  to: z.string().min(1).optional().openapi({ description: 'Only relationships to the entity of this name' }),
  limit: z.coerce.number().int().min(1).max(1000).default(100).openapi({ description: 'Page size, 1–1000 (default 100)' }),
  cursor: z.string().min(1).optional().openapi({ description: 'The X-Next-Cursor of the previous page, unchanged' }),
});
export type RelationshipListQuery = z.infer<typeof RelationshipListQuery>;

export const RelationshipParams = EnvParams.extend({
  id: z.uuid().openapi({ description: 'Relationship id' }),
});

export const EntityRelationshipsParams = EnvParams.extend({
  name: z.string().min(1).openapi({ description: 'Entity name (URL-encode `/` and `:`)', example: 'api' }),
});
