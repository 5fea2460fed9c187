import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { TriggerDefinitions, TriggerType } from '../../runs/trigger-kinds';
import { CellConstraint } from '../catalog-items';
import { DisplayName, ResourceName } from '../names';
import { PropertyDefinition, PropertyDefinitions } from '../properties';

/**
 * Action definitions (DECISIONS §4). A trigger's shape belongs to its kind
 * (src/runs/trigger-kinds/): the definitions accepted here are the
 * registry's. Strings inside a trigger may carry `{{ ... }}` templates; their
 * references are checked when a run is triggered, not here, because the
 * context (parameters, secrets, the entity) only exists then.
 */

export { WebhookTrigger } from '../../runs/trigger-kinds/webhook';
export { PullRequestTrigger } from '../../runs/trigger-kinds/pull-request-trigger';

export const ActionTrigger = TriggerDefinitions.openapi('ActionTrigger');
export type ActionTrigger = z.infer<typeof ActionTrigger>;

/** Create and update body. onSuccess/onFailure are checked against the type's states by the service. */
export const ActionRequest = z
  .strictObject({
    kind: z.literal('Action'),
    name: ResourceName.openapi({ example: 'restart' }),
    displayName: DisplayName.optional().openapi({ example: 'Restart' }),
    description: z.string().max(2000).optional(),
    entityType: ResourceName.openapi({ description: 'An entity type of the project', example: 'vm' }),
    conditions: z.array(CellConstraint).max(100).optional().openapi({ description: 'All must hold for the action to be offered' }),
    parameters: PropertyDefinitions.optional(),
    trigger: ActionTrigger,
    onSuccess: z.string().min(1).optional().openapi({ description: 'A state of the entity type' }),
    onFailure: z.string().min(1).optional().openapi({ description: 'A state of the entity type' }),
    timeoutMinutes: z.number().int().min(1).max(10_080).optional().openapi({ description: 'Defaults to 60' }),
  })
  .openapi('ActionRequest');
export type ActionRequest = z.infer<typeof ActionRequest>;

/** The stored definition; unset optional scalars are null, literal credentials redacted. */
export const Action = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    description: z.string().nullable(),
    entityType: z.string(),
    conditions: z.array(CellConstraint),
    parameters: z.array(PropertyDefinition),
    trigger: ActionTrigger,
    onSuccess: z.string().nullable(),
    onFailure: z.string().nullable(),
    timeoutMinutes: z.number().int(),
    orgId: z.uuid(),
    projectId: z.uuid(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('Action');
export type Action = z.infer<typeof Action>;

export const ActionDeleted = z.object({ deleted: z.literal(true), name: z.string() }).openapi('ActionDeleted');

/** An action offered for one entity (`GET ENV/entities/{name}/actions`). */
export const AvailableAction = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    description: z.string().nullable(),
    parameters: z.array(PropertyDefinition),
    triggerType: TriggerType,
  })
  .openapi('AvailableAction');
export type AvailableAction = z.infer<typeof AvailableAction>;

export const ProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
});

export const ActionParams = ProjectParams.extend({
  name: z.string().min(1).openapi({ description: 'Action name (URL-encode / and :)', example: 'restart' }),
});
