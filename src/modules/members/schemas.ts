import { z } from '@hono/zod-openapi';
import { ORG_ROLES } from '../../db/schema';
import { Timestamp } from '../../http/openapi';
import { DisplayName } from '../names';
import { OrgRefParam } from '../orgs/schemas';

export const OrgRole = z.enum(ORG_ROLES).openapi('OrganizationRole');

/** A member row (DECISIONS §5). */
export const Member = z
  .object({
    userId: z.uuid(),
    email: z.string(),
    name: z.string(),
    role: OrgRole,
    joinedAt: Timestamp,
  })
  .openapi('OrganizationMember');

export const MemberProvision = z
  .strictObject({
    email: z.email().max(254).openapi({ example: 'ada@example.com' }),
    name: DisplayName.openapi({ description: 'Used when the user does not exist yet; an existing user keeps its own name', example: 'Ada Lovelace' }),
    role: OrgRole.default('member'),
  })
  .openapi('MemberProvisionRequest');

export const MemberRoleChange = z.strictObject({ role: OrgRole }).openapi('MemberRoleChangeRequest');

export const MemberRemoved = z.object({ removed: z.literal(true), userId: z.uuid() }).openapi('MemberRemoved');

export const OrganizationLeft = z.object({ left: z.literal(true), orgId: z.uuid() }).openapi('OrganizationLeft');

export const MemberParams = OrgRefParam.extend({
  userId: z.uuid().openapi({ description: "The member's user id" }),
});
