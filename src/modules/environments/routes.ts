import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { Environment, EnvironmentCreate, EnvironmentDeleted, EnvironmentParams, ProjectParams } from './schemas';
import { createEnvironment, deleteEnvironment, listEnvironments } from './service';

export const environmentRoutes = new ApiRoutes<AppEnv>();

environmentRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs',
    tags: ['Environments'],
    summary: "List a project's environments",
    description: 'A token pinned to an environment sees only that environment. Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams },
    responses: {
      200: jsonResponse(z.array(Environment), 'Environments, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await listEnvironments(c.get('services'), { org: o, project: p }), 200);
  },
);

environmentRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/envs',
    tags: ['Environments'],
    summary: 'Create an environment',
    description: 'Needs catalog:write and a token not pinned to an environment.',
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams, body: jsonBody(EnvironmentCreate) },
    responses: {
      201: jsonResponse(Environment, 'The new environment'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await createEnvironment(c.get('services'), { org: o, project: p }, c.req.valid('json').name), 201);
  },
);

environmentRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/envs/{name}',
    tags: ['Environments'],
    summary: 'Delete an environment and its runtime data',
    description:
      'The `default` environment is never deleted (400 default_environment_protected). Tokens pinned to the deleted environment are deleted with it.',
    security: TokenOrSessionSecurity,
    request: { params: EnvironmentParams },
    responses: {
      200: jsonResponse(EnvironmentDeleted, 'Deleted'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await deleteEnvironment(c.get('services'), { org: o, project: p }, name), 200);
  },
);
