import { OpenAPIHono } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler, Next } from 'hono';
import { matchedRoutes } from 'hono/route';
import { sql } from 'drizzle-orm';
import type { AppEnv } from './context';
import { handleError } from './http/error-handler';
import { validationHook } from './http/validation';
import { refuseHostileUrl } from './http/hostile-input';
import { limitBody, parseJsonBody, requestContext } from './http/middleware';
import { requestEnvelope } from './http/request-envelope';
import type { Platform } from './platform';
import { registerAuthPaths } from './auth/auth-openapi';
import { authHandler } from './auth/auth-routes';
import { AUTH_BASE_PATH } from './auth/sessions';
import { actionRunCallbackRoutes, actionRunRoutes, CALLBACK_PATH } from './modules/action-runs/routes';
import { actionRoutes } from './modules/actions/routes';
import { batchRoutes } from './modules/batch/routes';
import { cellRoutes } from './modules/cells/routes';
import { changeRoutes } from './modules/changes/routes';
import { entityRoutes } from './modules/entities/routes';
import { entityTypeRoutes } from './modules/entity-types/routes';
import { environmentRoutes } from './modules/environments/routes';
import { relationshipRoutes } from './modules/relationships/routes';
import { relationshipTypeRoutes } from './modules/relationship-types/routes';
import { orgRoutes } from './modules/orgs/routes';
import { projectRoutes } from './modules/projects/routes';
import { secretRoutes } from './modules/secrets/routes';
import { renderDocsPage } from './modules/system/docs-page';
import { tokenRoutes } from './modules/tokens/routes';
import { adminRoutes } from './modules/admin/routes';
import { graphViewRoutes } from './modules/graph-views/routes';
import { memberRoutes } from './modules/members/routes';
import { notificationRoutes } from './modules/notifications/routes';
import { preferenceRoutes } from './modules/preferences/routes';
import { ssoRoutes } from './modules/sso/routes';
import { githubRoutes, githubSignedRoutes } from './modules/github/routes';
import { projectWebhookRoutes } from './modules/github/project-webhook-routes';

/**
 * Runs `middleware`, in order, only when a real route matched, so unknown
 * paths fall through to a plain 404. The match is asked once for them all.
 */
const onMatchedRoutes = (...middleware: MiddlewareHandler<AppEnv>[]): MiddlewareHandler<AppEnv> => {
  // each layer's promise is passed on, not awaited (an async frame per layer costs a promise and a turn of
  // the microtask queue); these layers answer by throwing, never by returning a Response
  const run = (c: Context<AppEnv>, next: Next, at: number): Promise<void> =>
    at === middleware.length ? next() : (middleware[at]!(c, () => run(c, next, at + 1)) as Promise<void>);
  return (c, next) => (matchedRoutes(c).some((route) => route.method !== 'ALL') ? run(c, next, 0) : next());
};

export function createApp(platform: Platform) {
  const app = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

  // every request, public and unknown routes too, before any other work: its id, its count against the rate limit (a 429
  // costs no database lookup), its log line
  app.use('*', requestEnvelope(platform));
  app.onError(handleError(platform.logger));
  app.notFound((c) => c.json({ error: `no route for ${c.req.method} ${c.req.path}`, code: 'not_found' }, 404));

  app.get('/healthz', async (c) => {
    const lease = platform.openDatabase();
    try {
      await lease.db.execute(sql`select 1`);
      return c.json({ status: 'ok', version: platform.config.version });
    } finally {
      await lease.release();
    }
  });

  // public routes are registered first: they answer before the API middleware below would run
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearerAuth', {
    type: 'http',
    scheme: 'bearer',
    description: 'A service token (`cpl_...`). Not needed while bootstrap mode is open.',
  });
  const documentConfig = {
    openapi: '3.1.0',
    info: {
      title: 'Cellplane',
      version: platform.config.version,
      description:
        'Catalog and runtime control plane. Errors are `{ error, code }`; every response carries `X-Request-Id`.',
    },
  };
  registerAuthPaths(app);
  app.doc31('/openapi.json', documentConfig);
  let docsPage: string | undefined;
  app.get('/docs', (c) => c.html((docsPage ??= renderDocsPage(app.getOpenAPI31Document(documentConfig)))));

  app.openAPIRegistry.registerComponent('securitySchemes', 'sessionCookie', {
    type: 'apiKey',
    in: 'cookie',
    name: 'cellplane.session_token',
    description: 'A user session from `/api/auth/sign-in/email` (browsers). Writes must come from a trusted Origin.',
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'sessionBearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'The same user session as a Bearer value: the `set-auth-token` header of sign-in (the CLI).',
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'callbackToken', {
    type: 'http',
    scheme: 'bearer',
    description: "An action run's callback token (`{{ run.callbackToken }}`), valid for that run only, until its timeout.",
  });
  // the run callback checks its own token, so it answers before the service-token check below
  const callbacks = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });
  // hostile text in the URL or body (./http/hostile-input.ts) is refused before anything reads it
  callbacks.use(CALLBACK_PATH, refuseHostileUrl(), limitBody(), parseJsonBody(), requestContext(platform, { authenticate: false }));
  callbacks.route('/', actionRunCallbackRoutes);
  app.route('/', callbacks);
  // a repository's pull_request webhook checks its own HMAC (the run's webhookSecret), so it too answers before the token check
  app.route('/', projectWebhookRoutes(platform));
  // code-hosting routes exist in cloud mode only (SPEC: 404 in oss); the App webhook (HMAC) and the install callback (signed state) check their own credential, so they too answer before the token check
  if (platform.config.deployment === 'cloud') app.route('/', githubSignedRoutes(platform));

  // Better Auth's own routes (sign-up, sign-in, sessions, verification, SSO): it reads its own bodies
  app.on(['GET', 'POST'], `${AUTH_BASE_PATH}/*`, refuseHostileUrl(), limitBody(), authHandler(platform));

  const api = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });
  api.use('*', onMatchedRoutes(refuseHostileUrl(), limitBody(), parseJsonBody(), requestContext(platform)));
  api.route('/', orgRoutes);
  api.route('/', memberRoutes);
  // SSO routes exist in cloud mode only (SPEC: 404 in oss)
  if (platform.config.deployment === 'cloud') api.route('/', ssoRoutes);
  api.route('/', notificationRoutes);
  api.route('/', preferenceRoutes);
  api.route('/', adminRoutes);
  api.route('/', projectRoutes);
  api.route('/', tokenRoutes);
  api.route('/', environmentRoutes);
  api.route('/', entityTypeRoutes);
  api.route('/', relationshipTypeRoutes);
  api.route('/', cellRoutes);
  // before the entity routes: `stream` is a path of its own, not an entity named so
  api.route('/', changeRoutes);
  api.route('/', entityRoutes);
  api.route('/', batchRoutes);
  api.route('/', relationshipRoutes);
  api.route('/', actionRoutes);
  api.route('/', secretRoutes);
  api.route('/', actionRunRoutes);
  api.route('/', graphViewRoutes);
  if (platform.config.deployment === 'cloud') api.route('/', githubRoutes);
  app.route('/', api);

  return app;
}

export type App = ReturnType<typeof createApp>;
