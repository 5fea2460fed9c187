import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { refuseHostileUrl } from '../../http/hostile-input';
import { limitBody, requestContext } from '../../http/middleware';
import { ErrorBody, errorResponses, jsonResponse } from '../../http/openapi';
import type { Platform } from '../../platform';
import { receiveProjectWebhook } from './pull-request-closed';

/**
 * The project webhook of pull-request runs, `POST /{o}/{p}/webhooks/github`
 * (SPEC "Inbound webhooks"): GitHub calls it, authenticated by
 * `X-Hub-Signature-256` with the secret the run's action names
 * (`webhookSecret`), not by a token. It checks its own HMAC, so src/app.ts
 * mounts it before the API's credential check, as it mounts the run
 * callback; its body is read raw (the signature is over its bytes). It is a
 * route of the bare server: pull-request runs work with a static token and
 * no GitHub App, so it exists in `oss` mode too.
 */

export const PROJECT_WEBHOOK_PATH = '/{o}/{p}/webhooks/github';
/** The same path in Hono's syntax, for the middleware. */
const MIDDLEWARE_PATH = '/:o/:p/webhooks/github';

export const WebhookAck = z.object({ ok: z.literal(true) }).openapi('WebhookAck');

const Params = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug (or id)', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug (or id)', example: 'platform' }),
});

const ProjectWebhookHeaders = z.object({
  'x-github-event': z.string().optional().openapi({ description: '`pull_request`; any other event (a `ping`) is acknowledged' }),
  'x-github-delivery': z.string().optional().openapi({ description: "GitHub's delivery id (logged)" }),
  'x-hub-signature-256': z
    .string()
    .optional()
    .openapi({ description: "`sha256=` HMAC-SHA256 of the body with the secret the run's action names in `webhookSecret`" }),
});

export function projectWebhookRoutes(platform: Platform): OpenAPIHono<AppEnv> {
  const routes = new ApiRoutes<AppEnv>();
  routes.use(MIDDLEWARE_PATH, refuseHostileUrl(), limitBody(), requestContext(platform, { authenticate: false }));
  routes.openapi(
    createRoute({
      method: 'post',
      path: PROJECT_WEBHOOK_PATH,
      tags: ['GitHub'],
      summary: "A repository's pull_request webhook, for the project's pull-request runs",
      description:
        'Register it on the repository (Settings → Webhooks) with content type `application/json`, the event **Pull requests**, and the secret the action\'s `webhookSecret` references. ' +
        'Only `closed` is significant: the active run of this project whose pull request it is (`repository.full_name` and `pull_request.number`) succeeds when the pull request was merged, fails when it was closed without merge, and its entity moves to the action\'s onSuccess / onFailure. ' +
        "The signature is checked with that run's secret, read from the run's own environment: 401 invalid_signature when it does not match; when the run's action names no secret, or its environment holds none, the event is acknowledged and nothing happens. " +
        'Any other action, event, or a pull request no active run opened, is acknowledged with `{ ok: true }`. 400 for a body that is not JSON or lacks `action` or `repository` (or, for `closed`, `pull_request.number` and `merged`).',
      security: [],
      request: {
        params: Params,
        headers: ProjectWebhookHeaders,
        body: {
          required: true,
          content: {
            'application/json': {
              schema: {
                type: 'object',
                required: ['action', 'repository'],
                properties: {
                  action: { type: 'string' },
                  repository: { type: 'object', description: 'GitHub\'s repository; `full_name` is matched' },
                  pull_request: { type: 'object', description: 'GitHub\'s pull request; `number` and `merged` are read' },
                },
                description: "GitHub's pull_request event payload",
              },
            },
          },
        },
      },
      responses: {
        200: jsonResponse(WebhookAck, 'Acknowledged'),
        ...errorResponses(400, 401, 403, 413),
        500: {
          description: 'An unexpected error; or a post-merge repository_dispatch GitHub could not take now (redeliver the event to send it)',
          content: { 'application/json': { schema: ErrorBody } },
        },
      },
    }),
    async (c) => {
      const { o, p } = c.req.valid('param');
      await receiveProjectWebhook(c.get('services'), {
        org: o,
        project: p,
        event: c.req.header('x-github-event'),
        deliveryId: c.req.header('x-github-delivery'),
        signature: c.req.header('x-hub-signature-256'),
        contentType: c.req.header('content-type'),
        body: await c.req.text(),
      });
      return c.json({ ok: true as const }, 200);
    },
  );
  return routes;
}
