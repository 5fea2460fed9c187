import { z } from '@hono/zod-openapi';
import { ORG_ROLES } from '../../db/schema';
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

export const OrganizationMembership = Organization.extend({
  role: z.enum(ORG_ROLES).openapi({ description: "The signed-in user's role in the organization" }),
}).openapi('OrganizationMembership');

export const OrganizationDeleted = z
  .object({ deleted: z.literal(true), id: z.uuid() })
  .openapi('OrganizationDeleted');
