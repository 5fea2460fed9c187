import { userSessionOnly } from '../../auth/memberships';
import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { errorResponses, jsonBody, jsonResponse, UserSessionSecurity } from '../../http/openapi';
import { OrgRefParam } from '../orgs/schemas';
import { Member, MemberParams, MemberProvision, MemberRemoved, MemberRoleChange, OrganizationLeft } from './schemas';
import { changeMemberRole, leaveOrg, listMembers, provisionMember, removeMember } from './service';

export const memberRoutes = new ApiRoutes<AppEnv>();

const SESSION_ONLY = 'Needs a user session: a service token gets 401 (docs/people/members.md).';

memberRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/orgs/{id}/users',
    tags: ['Organizations'],
    summary: "List an organization's members",
    description: `Any member. Oldest membership first. ${SESSION_ONLY}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: OrgRefParam },
    responses: {
      200: jsonResponse(z.array(Member), 'The members'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await listMembers(c.get('services'), c.req.valid('param').id), 200),
);

memberRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/orgs/{id}/users',
    tags: ['Organizations'],
    summary: 'Provision or upsert a member by email',
    description:
      'Owner or admin. An unknown address becomes a user without a password, who is mailed an invitation link to choose one; ' +
      'an existing user is added, or, when already a member, given the role (the rules of PATCH apply: 400 last_owner). ' +
      `Only an owner grants owner (403). A user who has never signed in is invited again. ${SESSION_ONLY}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: OrgRefParam, body: jsonBody(MemberProvision) },
    responses: {
      201: jsonResponse(Member, 'The member'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => c.json(await provisionMember(c.get('services'), c.req.valid('param').id, c.req.valid('json')), 201),
);

memberRoutes.openapi(
  createRoute({
    method: 'patch',
    path: '/orgs/{id}/users/{userId}',
    tags: ['Organizations'],
    summary: "Change a member's role",
    description:
      "Owner or admin. An admin can neither change an owner nor make one (403). Demoting the last owner is 400 last_owner. The member's personal tokens in the organization come down to the new role. " +
      SESSION_ONLY,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: MemberParams, body: jsonBody(MemberRoleChange) },
    responses: {
      200: jsonResponse(Member, 'The member with its new role'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { id, userId } = c.req.valid('param');
    return c.json(await changeMemberRole(c.get('services'), id, userId, c.req.valid('json').role), 200);
  },
);

memberRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/orgs/{id}/users/{userId}',
    tags: ['Organizations'],
    summary: 'Remove a member',
    description:
      "Owner or admin; only an owner removes an owner; the last owner cannot be removed (400 last_owner). Removes the member's personal graph views in the organization's projects and its notifications about the organization, and revokes the personal tokens it minted there. " +
      SESSION_ONLY,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: MemberParams },
    responses: {
      200: jsonResponse(MemberRemoved, 'Removed'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { id, userId } = c.req.valid('param');
    return c.json(await removeMember(c.get('services'), id, userId), 200);
  },
);

memberRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/orgs/{id}/leave',
    tags: ['Organizations'],
    summary: 'Leave an organization',
    description: `The signed-in user removes themself, with the same cascade as a removal. The last owner cannot leave (400 last_owner). ${SESSION_ONLY}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: OrgRefParam },
    responses: {
      200: jsonResponse(OrganizationLeft, 'Left'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => c.json(await leaveOrg(c.get('services'), c.req.valid('param').id), 200),
);
