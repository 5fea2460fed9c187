import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { DisplayName, OrgSlug } from '../names';

export const Organization = z
  .object({
    id: z.uuid(),
    name: z.string(),
    slug: z.string(),
    createdAt: Timestamp,
  })
  .openapi('Organization');

export const OrganizationCreate = z
  .strictObject({
    name: DisplayName,
    slug: OrgSlug,
  })
  .openapi('OrganizationCreate');

export const OrgRefParam = z.object({
  id: z.string().min(1).openapi({ description: 'Organization id or slug', example: 'acme' }),
});
