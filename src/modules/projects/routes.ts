import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { OrgProjectsParam, Project, ProjectCreate } from './schemas';
import { createProject, listProjects } from './service';

export const projectRoutes = new ApiRoutes<AppEnv>();

projectRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/orgs/{o}/projects',
    tags: ['Projects'],
    summary: 'List the projects of an organization',
    description: 'Admin and owner tokens see every project of their organization; other tokens see their own.',
    security: TokenOrSessionSecurity,
    request: { params: OrgProjectsParam },
    responses: {
      200: jsonResponse(z.array(Project), 'Projects, by slug'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await listProjects(c.get('services'), c.req.valid('param').o), 200),
);

projectRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/orgs/{o}/projects',
    tags: ['Projects'],
    summary: 'Create a project and its `default` environment',
    description: 'Needs an admin or owner token of the organization (or bootstrap mode).',
    security: TokenOrSessionSecurity,
    request: { params: OrgProjectsParam, body: jsonBody(ProjectCreate) },
    responses: {
      201: jsonResponse(Project, 'The new project'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => c.json(await createProject(c.get('services'), c.req.valid('param').o, c.req.valid('json')), 201),
);
