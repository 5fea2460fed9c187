import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';

/** The Entity response (SPEC Resources, Entity): exactly these fields. */
export const Entity = z
  .object({
    id: z.uuid(),
    entityTypeName: z.string(),
    name: z.string(),
    state: z.string(),
    properties: z.record(z.string(), z.unknown()),
    labels: z.record(z.string(), z.string()),
    lastSyncedAt: Timestamp.nullable(),
    syncSource: z.string().nullable(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
    orgId: z.uuid(),
    projectId: z.uuid(),
    envId: z.uuid(),
  })
  .openapi('Entity');
export type Entity = z.infer<typeof Entity>;

export const EnvParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
  envName: z.string().min(1).openapi({ description: 'Environment name', example: 'default' }),
});
