import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { ResourceName } from '../names';

export const Environment = z
  .object({
    id: z.uuid(),
    name: z.string(),
    orgId: z.uuid(),
    projectId: z.uuid(),
    createdAt: Timestamp,
  })
  .openapi('Environment');

export const EnvironmentCreate = z.strictObject({ name: ResourceName }).openapi('EnvironmentCreate');

export const EnvironmentDeleted = z
  .object({ deleted: z.literal(true), name: z.string() })
  .openapi('EnvironmentDeleted');

export const ProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
});

export const EnvironmentParams = ProjectParams.extend({
  name: z.string().min(1).openapi({ description: 'Environment name', example: 'staging' }),
});
