import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { DisplayName, Slug } from '../names';

export const Project = z
  .object({
    id: z.uuid(),
    orgId: z.uuid(),
    name: z.string(),
    slug: z.string(),
    createdAt: Timestamp,
  })
  .openapi('Project');

export const ProjectCreate = z
  .strictObject({
    name: DisplayName,
    slug: Slug,
  })
  .openapi('ProjectCreate');

export const OrgProjectsParam = z.object({
  o: z.string().min(1).openapi({ description: 'Organization id or slug', example: 'acme' }),
});
