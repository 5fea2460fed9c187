import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { Secret } from '../../secret';
import { EnvironmentSecretsParams, SecretDeleted, SecretInfo, SecretParams, SecretPut } from './schemas';
import { deleteSecret, listSecrets, putSecret } from './service';

export const secretRoutes = new ApiRoutes<AppEnv>();

secretRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs/{envName}/secrets',
    tags: ['Secrets'],
    summary: "List an environment's secrets (names only)",
    description: 'Names and timestamps, by name; values are never returned. Needs tokens:manage; a token pinned to another environment gets 403.',
    security: TokenOrSessionSecurity,
    request: { params: EnvironmentSecretsParams },
    responses: {
      200: jsonResponse(z.array(SecretInfo), 'Secrets, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    return c.json(await listSecrets(c.get('services'), { org: o, project: p, env: envName }), 200);
  },
);

secretRoutes.openapi(
  createRoute({
    method: 'put',
    path: '/{o}/{p}/envs/{envName}/secrets/{name}',
    tags: ['Secrets'],
    summary: 'Create or replace a secret',
    description:
      'Stores the value AES-256-GCM encrypted, bound to this environment and name. 201 when the secret is created, 200 when an existing one is replaced. The value is never returned. Needs tokens:manage; a token pinned to another environment gets 403.',
    security: TokenOrSessionSecurity,
    request: { params: SecretParams, body: jsonBody(SecretPut) },
    responses: {
      200: jsonResponse(SecretInfo, 'Replaced'),
      201: jsonResponse(SecretInfo, 'Created'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { o, p, envName, name } = c.req.valid('param');
    const value = new Secret(c.req.valid('json').value);
    const { secret, created } = await putSecret(c.get('services'), { org: o, project: p, env: envName }, name, value);
    return created ? c.json(secret, 201) : c.json(secret, 200);
  },
);

secretRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/envs/{envName}/secrets/{name}',
    tags: ['Secrets'],
    summary: 'Delete a secret',
    description: 'Needs tokens:manage; a token pinned to another environment gets 403. 404 when the secret does not exist.',
    security: TokenOrSessionSecurity,
    request: { params: SecretParams },
    responses: {
      200: jsonResponse(SecretDeleted, 'Deleted'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName, name } = c.req.valid('param');
    return c.json(await deleteSecret(c.get('services'), { org: o, project: p, env: envName }, name), 200);
  },
);
