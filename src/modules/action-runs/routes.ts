import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { MiddlewareHandler } from 'hono';
import type { CallbackClaims } from '../../auth/callback-token';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { announceNextPage } from '../../http/pagination';
import { ActionRun, ActionRunListRow, CallbackRequest, RunListQuery, RunParams, TriggerHeaders, TriggerParams, TriggerRequest } from './schemas';
import { authenticateCallback, cancelRunRequest, completeRunByCallback, getRun, listRuns, triggerAction } from './service';

const TAGS = ['Action runs'];

export const actionRunRoutes = new ApiRoutes<AppEnv>();

const runPath = (p: { o: string; p: string; envName: string }, id: string) =>
  `/${encodeURIComponent(p.o)}/${encodeURIComponent(p.p)}/envs/${encodeURIComponent(p.envName)}/action-runs/${id}`;

actionRunRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/envs/{envName}/entities/{name}/actions/{actionName}',
    tags: TAGS,
    summary: 'Trigger an action on an entity',
    description:
      "Needs data:write; a cell-scoped token only on entities in its cells (403 cell_scope_violation). The action must be one of the entity's type (404) whose conditions hold (409 action_unavailable); `parameters` are checked against its definitions and defaulted (400). Every template reference of the trigger must resolve now (400 unknown_reference, listing them), and a URL naming a non-public address is refused (400 outbound_url_refused). The run and its delivery job are written in one transaction; the answer is 202 with the pending run and `Location`. With `Idempotency-Key`, a retried trigger returns the run the first one created (202, `Idempotent-Replayed: true`); the key with another action, entity or body is 422.",
    security: TokenOrSessionSecurity,
    request: { params: TriggerParams, headers: TriggerHeaders, body: { ...jsonBody(TriggerRequest), required: false } },
    responses: {
      202: { ...jsonResponse(ActionRun, 'The run, pending'), headers: { Location: { schema: { type: 'string' }, description: 'The run' } } },
      ...errorResponses(400, 401, 403, 404, 409, 413, 422, 501),
    },
  }),
  async (c) => {
    const params = c.req.valid('param');
    const headers = c.req.valid('header');
    const body = c.req.header('content-type') ? c.req.valid('json') : {};
    const { run, replayed } = await triggerAction(
      c.get('services'),
      { org: params.o, project: params.p, env: params.envName },
      params.name,
      params.actionName,
      body,
      { idempotencyKey: headers['idempotency-key'] },
    );
    c.header('Location', runPath(params, run.id));
    if (replayed) c.header('Idempotent-Replayed', 'true');
    return c.json(run, 202);
  },
);

actionRunRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs/{envName}/action-runs',
    tags: TAGS,
    summary: "List an environment's action runs",
    description:
      'Needs data:read. Newest first; filters `status` (repeatable), `entity` (the name it was triggered on), `action`, `since`. Keyset pagination: `limit` (default 50, at most 500), the next page in `X-Next-Cursor` and `Link: rel="next"`. A cell-scoped token sees runs on entities in its cells.',
    security: TokenOrSessionSecurity,
    request: { params: RunParams.omit({ id: true }), query: RunListQuery },
    responses: {
      200: jsonResponse(z.array(ActionRunListRow), 'Runs, newest first'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    const { rows, next } = await listRuns(c.get('services'), { org: o, project: p, env: envName }, c.req.valid('query'));
    announceNextPage(c, next);
    return c.json(rows, 200);
  },
);

actionRunRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs/{envName}/action-runs/{id}',
    tags: TAGS,
    summary: 'Get an action run',
    description: 'Needs data:read. With every delivery attempt (time, HTTP status, latency, error).',
    security: TokenOrSessionSecurity,
    request: { params: RunParams },
    responses: {
      200: jsonResponse(ActionRun, 'The run'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName, id } = c.req.valid('param');
    return c.json(await getRun(c.get('services'), { org: o, project: p, env: envName }, id), 200);
  },
);

actionRunRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/envs/{envName}/action-runs/{id}',
    tags: TAGS,
    summary: 'Cancel a pending action run',
    description: 'Needs data:read (SPEC). A pending run becomes cancelled and is never delivered; any other state is 409 run_not_cancellable.',
    security: TokenOrSessionSecurity,
    request: { params: RunParams },
    responses: {
      200: jsonResponse(ActionRun, 'The cancelled run'),
      ...errorResponses(401, 403, 404, 409),
    },
  }),
  async (c) => {
    const { o, p, envName, id } = c.req.valid('param');
    return c.json(await cancelRunRequest(c.get('services'), { org: o, project: p, env: envName }, id), 200);
  },
);

/**
 * The callback authenticates with the run's own token, not a service token,
 * so it is served by its own sub-app, mounted ahead of the API's token check.
 * The token is checked by route middleware, which runs before the body's
 * validation: 401 comes first, as it does for a service token.
 */
type CallbackEnv = { Variables: AppEnv['Variables'] & { callbackClaims: CallbackClaims } };

export const actionRunCallbackRoutes = new ApiRoutes<CallbackEnv>();

const callbackTokenFirst: MiddlewareHandler<CallbackEnv> = async (c, next) => {
  c.set('callbackClaims', await authenticateCallback(c.get('services'), c.req.param('id') ?? '', c.req.header('authorization')));
  await next();
};

export const CALLBACK_PATH = '/:o/:p/envs/:envName/action-runs/:id/callback';

actionRunCallbackRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/envs/{envName}/action-runs/{id}/callback',
    tags: TAGS,
    summary: 'Complete an action run (called by the external workflow)',
    description:
      "Authenticated by the run's callback token (`Authorization: Bearer {{ run.callbackToken }}`), not a service token: 401 invalid_callback_token when it is missing, invalid, expired, or another run's. The path may name the organization, project and environment by id (as `{{ run.callbackUrl }}` does) or by slug and name. An active run becomes succeeded or failed and its entity moves to the action's onSuccess / onFailure in the same transaction; a run no longer active is 409 run_not_completable.",
    security: [{ callbackToken: [] }],
    middleware: [callbackTokenFirst] as const,
    request: { params: RunParams, body: jsonBody(CallbackRequest) },
    responses: {
      200: jsonResponse(ActionRun, 'The completed run'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, envName, id } = c.req.valid('param');
    const run = await completeRunByCallback(
      c.get('services'),
      { org: o, project: p, env: envName },
      id,
      c.get('callbackClaims'),
      c.req.valid('json'),
    );
    return c.json(run, 200);
  },
);
