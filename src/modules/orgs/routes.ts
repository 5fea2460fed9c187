import { userSessionOnly, userSessionOrLocalOperator } from '../../auth/memberships';
import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { BearerSecurity, errorResponses, jsonBody, jsonResponse, UserSessionSecurity } from '../../http/openapi';
import { Organization, OrganizationCreate, OrganizationDeleted, OrganizationMembership, OrgRefParam } from './schemas';
import { createOrg, deleteOrg, getOrg, listMyOrgs } from './service';

export const orgRoutes = new ApiRoutes<AppEnv>();

orgRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/orgs',
    tags: ['Organizations'],
    summary: 'Create an organization',
    description: 'Allowed in bootstrap mode (and, later, to user sessions). A service token gets 403.',
    security: BearerSecurity,
    request: { body: jsonBody(OrganizationCreate) },
    responses: {
      201: jsonResponse(Organization, 'The new organization'),
      ...errorResponses(400, 401, 403, 409, 413),
    },
  }),
  async (c) => c.json(await createOrg(c.get('services'), c.req.valid('json')), 201),
);

orgRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/orgs/{id}',
    tags: ['Organizations'],
    summary: 'Get an organization by id or slug',
    security: BearerSecurity,
    request: { params: OrgRefParam },
    responses: {
      200: jsonResponse(Organization, 'The organization'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await getOrg(c.get('services'), c.req.valid('param').id), 200),
);

orgRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/orgs',
    tags: ['Organizations'],
    summary: "The signed-in user's organizations, with its role in each",
    description:
      'Organizations the user is a member of, deleted ones excepted, by slug. Needs a user session: a service token gets 401 (it belongs to one organization, which it names in its paths). ' +
      "The local-first CLI (`cellplane --local`) sees every organization of its embedded database, as owner.",
    security: UserSessionSecurity,
    middleware: userSessionOrLocalOperator,
    responses: {
      200: jsonResponse(z.array(OrganizationMembership), "The user's organizations"),
      ...errorResponses(401),
    },
  }),
  async (c) => c.json(await listMyOrgs(c.get('services')), 200),
);

orgRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/orgs/{id}',
    tags: ['Organizations'],
    summary: 'Delete an organization (soft delete)',
    description:
      'Owner only. The organization is 404 everywhere afterwards and its slug stays taken (POST /orgs with it is 409). Needs a user session: a service token gets 401.',
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: OrgRefParam },
    responses: {
      200: jsonResponse(OrganizationDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await deleteOrg(c.get('services'), c.req.valid('param').id), 200),
);
