import { userSessionOnly } from '../../auth/memberships';
import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { errorResponses, jsonBody, jsonResponse, UserSessionSecurity } from '../../http/openapi';
import { SsoExtra, SsoExtraUpdate, SsoOrgParams, SsoProvider, SsoProviderCreate, SsoProviderDeleted, SsoProviderParams } from './schemas';
import { deleteSsoProvider, listSsoExtras, registerSsoProvider, sessionHeadersOf, updateSsoExtra } from './service';

/** Mounted in `cloud` mode only (src/app.ts): in `oss` these paths are 404 (SPEC). */
export const ssoRoutes = new ApiRoutes<AppEnv>();

const RULES = 'Owner or admin; a member gets 403, a non-member 404. Needs a user session: a service token gets 401 (docs/people/sso.md).';

ssoRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/orgs/{id}/sso-providers',
    tags: ['SSO'],
    summary: 'Register an OpenID Connect provider for the organization',
    description:
      `${RULES} Signing in through it (POST /api/auth/sign-in/sso with providerId, or an address of its domain) signs up a new user as a member of the organization. ` +
      'Every domain must be the host of the caller\'s own verified address or a subdomain of it (403 otherwise; a domain of a public mail service, or one holding a super-admin address unless the caller is a super-admin, is 403 too). ' +
      'The provider id and every domain are unique across providers (409). Without `endpoints`, the issuer\'s discovery document is read (its origin must be in TRUSTED_ORIGINS); a failed discovery is 400.',
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: SsoOrgParams, body: jsonBody(SsoProviderCreate) },
    responses: {
      201: jsonResponse(SsoProvider, 'The provider, with the redirect URI to register at it'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) =>
    c.json(await registerSsoProvider(c.get('services'), c.req.valid('param').id, c.req.valid('json'), sessionHeadersOf(c.req.raw.headers)), 201),
);

ssoRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/orgs/{id}/sso-providers/{providerId}',
    tags: ['SSO'],
    summary: 'Remove an SSO provider',
    description: `${RULES} Also unlinks the accounts it linked and ends the sessions it started. A provider of another organization is 404.`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: SsoProviderParams },
    responses: {
      200: jsonResponse(SsoProviderDeleted, 'Removed'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { id, providerId } = c.req.valid('param');
    return c.json(await deleteSsoProvider(c.get('services'), id, providerId), 200);
  },
);

ssoRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/orgs/{id}/sso-extras',
    tags: ['SSO'],
    summary: "The organization's per-provider settings",
    description: `${RULES} Oldest provider first.`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: SsoOrgParams },
    responses: {
      200: jsonResponse(z.array(SsoExtra), 'One row per provider of the organization'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await listSsoExtras(c.get('services'), c.req.valid('param').id), 200),
);

ssoRoutes.openapi(
  createRoute({
    method: 'patch',
    path: '/orgs/{id}/sso-extras/{providerId}',
    tags: ['SSO'],
    summary: "Change a provider's settings (forceSso)",
    description:
      `${RULES} With forceSso on, members whose session did not come through this provider get 403 sso_required on the organization's resources; service tokens are unaffected. ` +
      'Turning it on needs a session that came through this provider (403 sso_required otherwise), so it cannot lock the organization out. A provider of another organization is 404.',
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: SsoProviderParams, body: jsonBody(SsoExtraUpdate) },
    responses: {
      200: jsonResponse(SsoExtra, 'The provider with its new settings'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { id, providerId } = c.req.valid('param');
    return c.json(await updateSsoExtra(c.get('services'), id, providerId, c.req.valid('json')), 200);
  },
);
