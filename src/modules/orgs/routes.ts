import { createRoute, OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../context';
import { BearerSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { Organization, OrganizationCreate, OrgRefParam } from './schemas';
import { createOrg, getOrg } from './service';

export const orgRoutes = new OpenAPIHono<AppEnv>();

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
  async (c) => c.json(await createOrg(c.var.services, c.req.valid('json')), 201),
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
  async (c) => c.json(await getOrg(c.var.services, c.req.valid('param').id), 200),
);
