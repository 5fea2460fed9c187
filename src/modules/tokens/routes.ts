import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { MintedServiceToken, ServiceToken, ServiceTokenCreate, ServiceTokenRevoked, TokenParams, TokenProjectParams } from './schemas';
import { listTokens, mintToken, revokeToken } from './service';

export const tokenRoutes = new ApiRoutes<AppEnv>();

const PATH = '/orgs/{orgId}/projects/{projectId}/tokens';

tokenRoutes.openapi(
  createRoute({
    method: 'post',
    path: PATH,
    tags: ['Service tokens'],
    summary: 'Mint a service token',
    description:
      'Needs tokens:manage. The raw token is in this response only. A token cannot mint a higher role, another environment or cells outside its own scopes. The first mint on a fresh deployment closes bootstrap mode.',
    security: TokenOrSessionSecurity,
    request: { params: TokenProjectParams, body: jsonBody(ServiceTokenCreate) },
    responses: {
      201: jsonResponse(MintedServiceToken, 'The token, shown once'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { orgId, projectId } = c.req.valid('param');
    return c.json(await mintToken(c.get('services'), { org: orgId, project: projectId }, c.req.valid('json')), 201);
  },
);

tokenRoutes.openapi(
  createRoute({
    method: 'get',
    path: PATH,
    tags: ['Service tokens'],
    summary: "List a project's live tokens (never their values)",
    description:
      'Needs tokens:manage. Lists only the tokens the caller could have minted: a role it covers, its own environment when it is pinned, cells within its own when it is cell-scoped.',
    security: TokenOrSessionSecurity,
    request: { params: TokenProjectParams },
    responses: {
      200: jsonResponse(z.array(ServiceToken), 'Tokens not revoked, oldest first'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { orgId, projectId } = c.req.valid('param');
    return c.json(await listTokens(c.get('services'), { org: orgId, project: projectId }), 200);
  },
);

tokenRoutes.openapi(
  createRoute({
    method: 'delete',
    path: `${PATH}/{id}`,
    tags: ['Service tokens'],
    summary: 'Revoke a token, effective at once',
    description:
      'Needs tokens:manage. A token revokes only a token it could have minted: a higher role, another (or no) environment pin, or cells beyond its own scopes are 403. A token that does not exist or is already revoked is 404.',
    security: TokenOrSessionSecurity,
    request: { params: TokenParams },
    responses: {
      200: jsonResponse(ServiceTokenRevoked, 'Revoked'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { orgId, projectId, id } = c.req.valid('param');
    return c.json(await revokeToken(c.get('services'), { org: orgId, project: projectId }, id), 200);
  },
);
