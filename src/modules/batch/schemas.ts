import { z } from '@hono/zod-openapi';
import { DateTimeInput } from '../../http/openapi';
import { EntityName, Labels, Properties } from '../entities/schemas';
import { ResourceName } from '../names';

/**
 * `POST ENV/batch`: one source's entities and relationships, upserted and
 * deleted in one transaction (docs/batch.md). The limits keep one request
 * within the 1 MiB body limit for ordinary entities and within one
 * transaction of bounded size; a client sends more in chunks.
 */

export const MAX_BATCH_ENTITIES = 1000;
export const MAX_BATCH_RELATIONSHIPS = 5000;

export const BatchEntity = z
  .strictObject({
    entityType: ResourceName.openapi({ example: 'aws_instance' }),
    name: EntityName.openapi({ example: 'aws_instance.web' }),
    state: z.string().min(1).optional().openapi({
      description: "Created: defaults to the type's initialState. Updated: moved when given (the type's transitions apply), kept when omitted",
    }),
    properties: Properties.optional().openapi({ description: 'Replaces all properties; validated, defaults filled', example: { instance_type: 't3.small' } }),
    labels: Labels.optional().openapi({ description: 'Replaces all labels', example: { team: 'web' } }),
  })
  .openapi('BatchEntity');

const RelationshipKeyFields = {
  relationshipType: ResourceName.openapi({ example: 'dependsOn' }),
  from: ResourceName.openapi({ description: 'Name of the source entity; the source must own it', example: 'aws_instance.web' }),
  to: ResourceName.openapi({ description: 'Name of the target entity (any owner)', example: 'aws_vpc.main' }),
};

export const BatchRelationshipRef = z.strictObject(RelationshipKeyFields).openapi('BatchRelationshipRef');

export const BatchRelationship = z
  .strictObject({
    ...RelationshipKeyFields,
    state: z.string().min(1).optional().openapi({
      description: "Created: defaults to the type's first state. Updated: moved when given, kept when omitted",
    }),
    properties: Properties.optional().openapi({ description: 'Replaces all properties; validated, defaults filled', example: {} }),
    labels: Labels.optional().openapi({ description: 'Replaces all labels', example: {} }),
  })
  .openapi('BatchRelationship');

type Keyed = { path: (string | number)[]; key: string };

/** One issue per key repeated within `items`, pointing at the repeat and naming the first occurrence. */
function refuseRepeats(ctx: z.RefinementCtx, items: Keyed[], what: string): Map<string, (string | number)[]> {
  const first = new Map<string, (string | number)[]>();
  for (const item of items) {
    const seen = first.get(item.key);
    if (seen) ctx.addIssue({ code: 'custom', path: item.path, message: `repeats the ${what} of ${seen.join('.')}` });
    else first.set(item.key, item.path);
  }
  return first;
}

/** One issue per item of `deletes` that `upserts` names too: a request cannot both write and delete one thing. */
function refuseBoth(ctx: z.RefinementCtx, upserts: Map<string, (string | number)[]>, deletes: Keyed[], what: string): void {
  for (const item of deletes) {
    const upsert = upserts.get(item.key);
    if (upsert) ctx.addIssue({ code: 'custom', path: item.path, message: `deletes the ${what} that ${upsert.join('.')} writes` });
  }
}

const relationshipKey = (r: { relationshipType: string; from: string; to: string }) => JSON.stringify([r.relationshipType, r.from, r.to]);

export const BatchRequest = z
  .strictObject({
    source: z.string().min(1).max(256).openapi({
      description: 'The owner: entities written get `syncSource` = source; only entities it owns are updated or deleted',
      example: 'terraform:3f0c1d2e-9a41-4b6e-8b0a-6c2d7e1f5a90',
    }),
    observedAt: DateTimeInput.optional().openapi({
      description: 'When the source saw this state: the `lastSyncedAt` of every entity written (default now; at most 5 minutes ahead of the server clock)',
    }),
    dryRun: z.boolean().optional().openapi({ description: 'Computes the same answer and writes nothing' }),
    entities: z
      .array(BatchEntity)
      .max(MAX_BATCH_ENTITIES)
      .optional()
      .openapi({ description: `Upserts by name, at most ${MAX_BATCH_ENTITIES}; names unique within the request` }),
    relationships: z
      .array(BatchRelationship)
      .max(MAX_BATCH_RELATIONSHIPS)
      .optional()
      .openapi({
        description: `Upserts by (relationshipType, from, to), at most ${MAX_BATCH_RELATIONSHIPS}; applied after the entities of this request`,
      }),
    deleteEntities: z
      .array(ResourceName.openapi({ example: 'aws_instance.legacy' }))
      .max(MAX_BATCH_ENTITIES)
      .optional()
      .openapi({ description: `Names to delete, at most ${MAX_BATCH_ENTITIES}; only entities the source owns`, example: [] }),
    deleteRelationships: z
      .array(BatchRelationshipRef)
      .max(MAX_BATCH_RELATIONSHIPS)
      .optional()
      .openapi({ description: `At most ${MAX_BATCH_RELATIONSHIPS}; only where the source owns the from entity`, example: [] }),
  })
  .superRefine((body, ctx) => {
    const upserted = (body.entities ?? []).map((e, i) => ({ path: ['entities', i, 'name'], key: e.name }));
    const deleted = (body.deleteEntities ?? []).map((name, i) => ({ path: ['deleteEntities', i], key: name }));
    refuseBoth(ctx, refuseRepeats(ctx, upserted, 'name'), deleted, 'entity');
    refuseRepeats(ctx, deleted, 'name');
    const linked = (body.relationships ?? []).map((r, i) => ({ path: ['relationships', i], key: relationshipKey(r) }));
    const unlinked = (body.deleteRelationships ?? []).map((r, i) => ({ path: ['deleteRelationships', i], key: relationshipKey(r) }));
    refuseBoth(ctx, refuseRepeats(ctx, linked, 'relationship'), unlinked, 'relationship');
    refuseRepeats(ctx, unlinked, 'relationship');
  })
  .openapi('BatchRequest', {
    example: {
      source: 'terraform:3f0c1d2e-9a41-4b6e-8b0a-6c2d7e1f5a90',
      observedAt: '2026-11-21T10:20:00.000Z',
      entities: [
        { entityType: 'aws_vpc', name: 'aws_vpc.main', properties: { cidr_block: '10.0.0.0/16' } },
        { entityType: 'aws_instance', name: 'aws_instance.web', properties: { instance_type: 't3.small' } },
      ],
      relationships: [{ relationshipType: 'dependsOn', from: 'aws_instance.web', to: 'aws_vpc.main' }],
      deleteEntities: ['aws_instance.legacy'],
    },
  });
export type BatchRequest = z.infer<typeof BatchRequest>;

export const BatchEntityConflict = z
  .object({
    name: z.string(),
    reason: z.string().openapi({ example: 'owned by "terraform:other-lineage"' }),
    syncSource: z.string().nullable().openapi({ description: "The entity's owner; null for one created by hand" }),
  })
  .openapi('BatchEntityConflict');

export const BatchRelationshipConflict = z
  .object({
    relationshipType: z.string(),
    from: z.string(),
    to: z.string(),
    reason: z.string().openapi({ example: 'from entity "web-1" was created by hand' }),
  })
  .openapi('BatchRelationshipConflict');

export const BatchResult = z
  .object({
    source: z.string(),
    dryRun: z.boolean(),
    entities: z.object({
      created: z.array(z.string()).openapi({ description: 'Names, in request order' }),
      updated: z.array(z.string()),
      unchanged: z.number().int().openapi({ description: 'Owned, and already as requested: not written' }),
      deleted: z.array(z.string()),
      alreadyGone: z.number().int().openapi({ description: 'deleteEntities names that did not exist' }),
      conflicts: z.array(BatchEntityConflict).openapi({ description: 'Entities another owner (or a person) holds: left as they are' }),
    }),
    relationships: z.object({
      created: z.number().int(),
      updated: z.number().int(),
      unchanged: z.number().int(),
      deleted: z.number().int().openapi({ description: 'deleteRelationships items that existed and were deleted' }),
      conflicts: z.array(BatchRelationshipConflict),
    }),
  })
  .openapi('BatchResult');
export type BatchResult = z.infer<typeof BatchResult>;
