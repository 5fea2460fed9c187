import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { EntityParams } from '../entities/schemas';
import { Action, ActionDeleted, ActionParams, ActionRequest, AvailableAction, ProjectParams } from './schemas';
import { createAction, deleteAction, getAction, listActions, listEntityActions, updateAction } from './service';

export const actionRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Actions'];

const CREDENTIALS =
  'Literal credentials in `trigger.auth` (token, password, value, secret) are stored as sent and answered as `"[redacted]"`; values made only of templates, such as `{{ secrets.<name> }}`, are shown. Prefer secret references.';

actionRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/actions',
    tags: TAGS,
    summary: "List a project's actions",
    description: `Needs catalog:read. ${CREDENTIALS}`,
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams },
    responses: {
      200: jsonResponse(z.array(Action), 'Actions, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await listActions(c.get('services'), { org: o, project: p }), 200);
  },
);

actionRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/actions',
    tags: TAGS,
    summary: 'Create an action',
    description: `Needs catalog:write. \`entityType\` must name an entity type of the project, and \`onSuccess\`/\`onFailure\` states of it (400 invalid_reference). Defaults: \`timeoutMinutes\` 60; webhook \`method\` POST, \`retry\` { maxAttempts 3, backoff exponential, initialDelayMs 1000 }. A name already taken is 409 already_exists. ${CREDENTIALS}`,
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams, body: jsonBody(ActionRequest) },
    responses: {
      201: jsonResponse(Action, 'The new action'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await createAction(c.get('services'), { org: o, project: p }, c.req.valid('json')), 201);
  },
);

actionRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/actions/{name}',
    tags: TAGS,
    summary: 'Get an action',
    description: `Needs catalog:read. ${CREDENTIALS}`,
    security: TokenOrSessionSecurity,
    request: { params: ActionParams },
    responses: {
      200: jsonResponse(Action, 'The action'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await getAction(c.get('services'), { org: o, project: p }, name), 200);
  },
);

actionRoutes.openapi(
  createRoute({
    method: 'put',
    path: '/{o}/{p}/actions/{name}',
    tags: TAGS,
    summary: 'Replace an action',
    description: `Needs catalog:write. The body replaces the whole definition: omitted fields return to their defaults, and a literal credential must be sent again (\`"[redacted]"\` is refused with 400). The body's \`name\` must equal the path's. ${CREDENTIALS}`,
    security: TokenOrSessionSecurity,
    request: { params: ActionParams, body: jsonBody(ActionRequest) },
    responses: {
      200: jsonResponse(Action, 'The updated action'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await updateAction(c.get('services'), { org: o, project: p }, name, c.req.valid('json')), 200);
  },
);

actionRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/actions/{name}',
    tags: TAGS,
    summary: 'Delete an action',
    description: 'Needs catalog:write.',
    security: TokenOrSessionSecurity,
    request: { params: ActionParams },
    responses: {
      200: jsonResponse(ActionDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await deleteAction(c.get('services'), { org: o, project: p }, name), 200);
  },
);

actionRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs/{envName}/entities/{name}/actions',
    tags: TAGS,
    summary: 'List the actions available for an entity',
    description:
      "Needs data:read. The actions of the entity's type whose conditions all hold for its state, labels, properties and metrics, by name. 404 when the entity does not exist or is outside the token's cells.",
    security: TokenOrSessionSecurity,
    request: { params: EntityParams },
    responses: {
      200: jsonResponse(z.array(AvailableAction), 'Available actions, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName, name } = c.req.valid('param');
    return c.json(await listEntityActions(c.get('services'), { org: o, project: p, env: envName }, name), 200);
  },
);
