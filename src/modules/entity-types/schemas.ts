import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { EntityTypeConstraint, MetricDefinition, SyncFreshness } from '../catalog-items';
import { DisplayName, ResourceName } from '../names';
import { PropertyDefinition, PropertyDefinitions } from '../properties';

/** A state of an entity or relationship type. */
export const StateName = z.string().min(1).max(128).openapi({ example: 'running' });

/** A non-empty list of distinct states; shared with relationship types. */
export const StateList = z
  .array(StateName)
  .min(1)
  .max(100)
  .superRefine((states, ctx) => {
    const seen = new Set<string>();
    states.forEach((state, i) => {
      if (seen.has(state)) ctx.addIssue({ code: 'custom', path: [i], message: `duplicate state "${state}"` });
      seen.add(state);
    });
  });

const MetricDefinitions = z.array(MetricDefinition).superRefine((metrics, ctx) => {
  const seen = new Set<string>();
  metrics.forEach((metric, i) => {
    if (seen.has(metric.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate metric "${metric.name}"` });
    seen.add(metric.name);
  });
});

/**
 * Create and update body (SPEC Resources, EntityType). Rules that relate one
 * field to another (initialState among states, constraints naming declared
 * properties and states) are checked by the service, after authorization.
 */
export const EntityTypeRequest = z
  .strictObject({
    kind: z.literal('EntityType'),
    name: ResourceName.openapi({ example: 'vm' }),
    displayName: DisplayName.optional().openapi({ example: 'Virtual machine' }),
    states: StateList.openapi({ example: ['provisioning', 'running', 'retired'] }),
    initialState: StateName.openapi({ description: 'One of `states`', example: 'provisioning' }),
    properties: PropertyDefinitions.optional(),
    metrics: MetricDefinitions.optional(),
    constraints: z.array(EntityTypeConstraint).optional(),
    syncTracked: z.boolean().optional().openapi({ description: 'Defaults to false' }),
    syncFreshness: SyncFreshness.optional().openapi({
      description: 'Defaults to `{ maxAgeSeconds: 3600 }` when syncTracked is true',
    }),
    applier: z.string().min(1).max(200).optional().openapi({ example: 'terraform' }),
  })
  .openapi('EntityTypeRequest');
export type EntityTypeRequest = z.infer<typeof EntityTypeRequest>;

/** The EntityType response: exactly SPEC's fields; unset optional ones are null. */
export const EntityType = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    states: z.array(z.string()),
    initialState: z.string(),
    properties: z.array(PropertyDefinition),
    metrics: z.array(MetricDefinition),
    constraints: z.array(EntityTypeConstraint),
    syncTracked: z.boolean(),
    // not SyncFreshness.nullable(): the generator would mark the shared component itself nullable
    syncFreshness: z.union([SyncFreshness, z.null()]),
    applier: z.string().nullable(),
    orgId: z.uuid(),
    projectId: z.uuid(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('EntityType');
export type EntityType = z.infer<typeof EntityType>;

export const EntityTypeDeleted = z
  .object({ deleted: z.literal(true), name: z.string() })
  .openapi('EntityTypeDeleted');

export const ProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
});

export const EntityTypeParams = ProjectParams.extend({
  name: z.string().min(1).openapi({ description: 'Entity type name (URL-encode / and :)', example: 'vm' }),
});
