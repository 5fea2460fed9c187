import { createRoute, OpenAPIHono } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { MiddlewareHandler } from 'hono';
import { userSessionOnly } from '../../auth/memberships';
import type { InstallStateClaims } from '../../codehost/install-state';
import type { AppEnv } from '../../context';
import { refuseHostileUrl } from '../../http/hostile-input';
import { limitBody, requestContext } from '../../http/middleware';
import { ErrorBody, TokenOrSessionSecurity, UserSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import type { Platform } from '../../platform';
import {
  GitHubWebhookOutcome,
  InstallationEnvelope,
  InstallationParams,
  InstallCallbackQuery,
  InstallUrl,
  InstallUrlRequest,
  RecoverRequest,
  RepoLink,
  RepoLinkDeleted,
  RepoLinkParams,
  WebhookHeaders,
} from './schemas';
import {
  authenticateInstallState,
  completeInstallCallback,
  createInstallUrl,
  deleteInstallation,
  recoverInstallation,
} from './service';
import { receiveAppWebhook } from './app-webhook';
import { deleteRepoLink, getRepoLink, putRepoLink } from './repo-links';

/**
 * The code-hosting routes (SPEC "Code-hosting app integration", cloud mode
 * only: src/app.ts mounts them only when SERVICE_DEPLOYMENT is `cloud`, so
 * in `oss` every path is 404). Choices: docs/codehost.md.
 */

const TAGS = ['GitHub'];
const NOT_CONFIGURED = '503 codehost_not_configured when any CODEHOST_APP_* variable is missing (checked after the caller is authorized).';

/** Routes that take a user session or a service token: mounted behind the API's credential check. */
export const githubRoutes = new ApiRoutes<AppEnv>();

githubRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/github/install-url',
    tags: TAGS,
    summary: 'Get the URL that installs the GitHub App for an organization',
    description:
      `A user session that is owner or admin of \`orgId\` (id or slug): a member gets 403, a non-member 404, a service token 401. The URL is GitHub's install page of the App with a \`state\` (HS256, valid 10 minutes) naming the organization and the user; GitHub sends the browser back to GET /github/install-callback with it. ${NOT_CONFIGURED}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { body: jsonBody(InstallUrlRequest) },
    responses: {
      200: jsonResponse(InstallUrl, 'The install URL'),
      ...errorResponses(400, 401, 403, 404, 413, 503),
    },
  }),
  async (c) => c.json(await createInstallUrl(c.get('services'), c.req.valid('json')), 200),
);

githubRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/github/installations/recover',
    tags: TAGS,
    summary: 'Claim an installation the install callback did not record',
    description:
      `Owner or admin of \`orgId\` (user session; a member gets 403, a service token 401). GitHub is asked for the installation (404 when the App has no such installation) and its repositories; the record is created or refreshed for the organization. An installation claimed by another organization is 409 installation_claimed, which never names it. Audited (github.installation_recovered). ${NOT_CONFIGURED}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { body: jsonBody(RecoverRequest) },
    responses: {
      200: jsonResponse(InstallationEnvelope, 'The installation, claimed by the organization'),
      ...errorResponses(400, 401, 403, 404, 409, 413, 502, 503),
    },
  }),
  async (c) => c.json({ installation: await recoverInstallation(c.get('services'), c.req.valid('json')) }, 200),
);

githubRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/github/installations/{id}',
    tags: TAGS,
    summary: 'Forget an installation (soft delete)',
    description:
      `Owner or admin of the organization that claimed it (user session). The record becomes \`deleted\`; nothing is uninstalled on GitHub (remove the App there too). Another organization's installation is 404. Deleting a deleted one returns it unchanged. Audited (github.installation_deleted). ${NOT_CONFIGURED}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: InstallationParams },
    responses: {
      200: jsonResponse(InstallationEnvelope, 'The installation, deleted'),
      ...errorResponses(400, 401, 403, 404, 503),
    },
  }),
  async (c) => c.json({ installation: await deleteInstallation(c.get('services'), c.req.valid('param').id) }, 200),
);

const repoLinkPath = '/{o}/{p}/github/repos/{owner}/{repo}';
const projectRef = (params: { o: string; p: string }) => ({ org: params.o, project: params.p });

githubRoutes.openapi(
  createRoute({
    method: 'get',
    path: repoLinkPath,
    tags: TAGS,
    summary: "Read a repository link of the project",
    description: `Needs catalog:read. \`installationId\` is the organization's active installation that grants the repository now (null when none does). 404 when the project has no such link. ${NOT_CONFIGURED}`,
    security: TokenOrSessionSecurity,
    request: { params: RepoLinkParams },
    responses: {
      200: jsonResponse(RepoLink, 'The link'),
      ...errorResponses(400, 401, 403, 404, 503),
    },
  }),
  async (c) => {
    const params = c.req.valid('param');
    return c.json(await getRepoLink(c.get('services'), projectRef(params), params), 200);
  },
);

githubRoutes.openapi(
  createRoute({
    method: 'put',
    path: repoLinkPath,
    tags: TAGS,
    summary: 'Link a repository to the project',
    description: `Needs catalog:write. The repository must be granted to an active installation of the organization (400 invalid_reference otherwise). Owner and name are kept lowercased. 201 when linked now, 200 when it already was. ${NOT_CONFIGURED}`,
    security: TokenOrSessionSecurity,
    request: { params: RepoLinkParams },
    responses: {
      200: jsonResponse(RepoLink, 'Already linked'),
      201: jsonResponse(RepoLink, 'Linked'),
      ...errorResponses(400, 401, 403, 404, 503),
    },
  }),
  async (c) => {
    const params = c.req.valid('param');
    const { link, created } = await putRepoLink(c.get('services'), projectRef(params), params);
    return created ? c.json(link, 201) : c.json(link, 200);
  },
);

githubRoutes.openapi(
  createRoute({
    method: 'delete',
    path: repoLinkPath,
    tags: TAGS,
    summary: 'Unlink a repository from the project',
    description: `Needs catalog:write. 404 when the project has no such link. ${NOT_CONFIGURED}`,
    security: TokenOrSessionSecurity,
    request: { params: RepoLinkParams },
    responses: {
      200: jsonResponse(RepoLinkDeleted, 'Unlinked'),
      ...errorResponses(400, 401, 403, 404, 503),
    },
  }),
  async (c) => {
    const params = c.req.valid('param');
    return c.json(await deleteRepoLink(c.get('services'), projectRef(params), params), 200);
  },
);

// --- routes with their own credential ------------------------------------------------

export const APP_WEBHOOK_PATH = '/webhooks/github';
export const INSTALL_CALLBACK_PATH = '/github/install-callback';

type CallbackEnv = { Variables: AppEnv['Variables'] & { installState: InstallStateClaims } };

/** The state is the callback's credential: checked before the query is validated, as a token is elsewhere. */
const installStateFirst: MiddlewareHandler<CallbackEnv> = async (c, next) => {
  c.set('installState', await authenticateInstallState(c.get('services'), c.req.query('state')));
  await next();
};

const internalError = {
  description: 'An unexpected error (internal); for the webhook, also an audit or notification insert that failed: GitHub retries the delivery',
  content: { 'application/json': { schema: ErrorBody } },
};

/**
 * The App webhook and the install callback check their own credential (an
 * HMAC, a signed state): src/app.ts mounts these before the API's token
 * check, as it mounts the run callback. The webhook's body is read raw (the
 * signature is over its bytes), so the API's JSON parsing is not applied.
 */
export function githubSignedRoutes(platform: Platform): OpenAPIHono<AppEnv> {
  const routes = new ApiRoutes<AppEnv>();
  routes.use(APP_WEBHOOK_PATH, refuseHostileUrl(), limitBody(), requestContext(platform, { authenticate: false }));
  routes.use(INSTALL_CALLBACK_PATH, refuseHostileUrl(), requestContext(platform, { authenticate: false }));

  routes.openapi(
    createRoute({
      method: 'post',
      path: APP_WEBHOOK_PATH,
      tags: TAGS,
      summary: 'The GitHub App webhook',
      description:
        'Called by GitHub, authenticated by `X-Hub-Signature-256` (HMAC-SHA256 of the body with CODEHOST_APP_WEBHOOK_SECRET), not by a token. 503 codehost_not_configured when the App is not configured; 401 invalid_signature (logged with the event name and installation id only); 400 invalid_json. ' +
        'installation deleted / suspend / unsuspend change the record and clear cached tokens; installation_repositories updates its repositories and notifies the organization\'s owners and admins (500 if that cannot be written, so GitHub retries); pull_request closed completes the matching run; anything else is acknowledged.',
      security: [],
      request: {
        headers: WebhookHeaders,
        body: { required: true, content: { 'application/json': { schema: { type: 'object', description: "GitHub's event payload" } } } },
      },
      responses: {
        200: jsonResponse(GitHubWebhookOutcome, 'Acknowledged, with what was done'),
        ...errorResponses(400, 401, 413, 503),
        500: internalError,
      },
    }),
    async (c) => {
      const outcome = await receiveAppWebhook(c.get('services'), {
        event: c.req.header('x-github-event'),
        deliveryId: c.req.header('x-github-delivery'),
        signature: c.req.header('x-hub-signature-256'),
        contentType: c.req.header('content-type'),
        body: await c.req.text(),
      });
      return c.json({ ok: true as const, outcome }, 200);
    },
  );

  const callbacks = new ApiRoutes<CallbackEnv>();
  callbacks.openapi(
    createRoute({
      method: 'get',
      path: INSTALL_CALLBACK_PATH,
      tags: TAGS,
      summary: "GitHub's redirect after the App is installed",
      description:
        'Authenticated by `state` alone (from POST /github/install-url), not by a session or token: missing, forged or expired (10 minutes) is 401 unauthorized. The user who asked for the URL must still be owner or admin (403). GitHub is asked for the installation (404 when unknown) and its repositories; the record is upserted for the organization (audited, github.installation_claimed). ' +
        'An installation another organization claimed is 409 installation_claimed, never naming it. Answers `{ installation }`, or 303 to SERVICE_UI_BASE_URL when it is set. ' +
        NOT_CONFIGURED,
      security: [],
      middleware: [installStateFirst] as const,
      request: { query: InstallCallbackQuery },
      responses: {
        200: jsonResponse(InstallationEnvelope, 'The installation, claimed by the organization of the state'),
        303: { description: 'Back to the UI (when SERVICE_UI_BASE_URL is set): `{SERVICE_UI_BASE_URL}/orgs/{slug}/integrations/github?installation_id=…`' },
        ...errorResponses(400, 401, 403, 404, 409, 502, 503),
      },
    }),
    async (c) => {
      const { installation_id: installationId } = c.req.valid('query');
      const { installation, orgSlug } = await completeInstallCallback(c.get('services'), c.get('installState'), installationId);
      const ui = c.get('services').config.uiBaseUrl;
      if (ui) {
        const target = `${ui}/orgs/${encodeURIComponent(orgSlug)}/integrations/github?installation_id=${installation.installationId}&status=${installation.status}`;
        return c.redirect(target, 303);
      }
      return c.json({ installation }, 200);
    },
  );
  routes.route('/', callbacks as unknown as OpenAPIHono<AppEnv>);
  return routes;
}
