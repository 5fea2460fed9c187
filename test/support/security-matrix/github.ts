import type { Tenant } from '../fixtures';
import type { ApiResponse, TestApi } from '../node-app';
import { fresh, PROJ, type RouteKey, type SecuredRoute } from './route';

/**
 * The code-hosting routes (src/modules/github; docs/codehost.md).
 *
 * The matrix's api runs with createTestApi's default environment: cloud
 * mode, no CODEHOST_APP_*. Every code-hosting route checks the caller
 * first and the App's configuration after, so each kind of caller still
 * gets its own answer (401, 403, 404) and an authorized one gets
 * 503 codehost_not_configured: that is each row's `success`. What an
 * authorized caller gets with the App configured (201, 200, the 400 of an
 * ungranted repository) is test/node/github-install.test.ts, against the
 * local GitHub server.
 */

const NOT_CONFIGURED = 503;

const linkPath = (t: Tenant, repo = 'matrix-repo') => `/${t.org.slug}/${t.project.slug}/github/repos/matrix-owner/${repo}`;

/** Repository links are project-wide (the environment pin does not apply) and not cell-scoped. */
export const GITHUB_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${PROJ}/github/repos/{owner}/{repo}`,
    minRole: 'viewer',
    environmentScoped: false,
    success: NOT_CONFIGURED,
    call: (api, t, token) => api.call('GET', linkPath(t), { token }),
  },
  {
    method: 'PUT',
    path: `${PROJ}/github/repos/{owner}/{repo}`,
    minRole: 'admin',
    environmentScoped: false,
    success: NOT_CONFIGURED,
    call: (api, t, token) => api.call('PUT', linkPath(t, fresh('matrix-repo')), { token }),
  },
  {
    method: 'DELETE',
    path: `${PROJ}/github/repos/{owner}/{repo}`,
    minRole: 'admin',
    environmentScoped: false,
    success: NOT_CONFIGURED,
    call: (api, t, token) => api.call('DELETE', linkPath(t), { token }),
  },
];

/**
 * Routes with a credential of their own, which no service token opens
 * (proposed list, wired by the lead like RUN_CALLBACK_ROUTES): the App
 * webhook (an HMAC with CODEHOST_APP_WEBHOOK_SECRET: 503 while the App is
 * not configured, for there is nothing to check it with; 401
 * invalid_signature once it is) and the install callback (the signed
 * install state: 401 unauthorized for a forged one, whatever token comes
 * with it). Every caller of the matrix, each role, another organization's
 * token, a pinned or cell-scoped one and none at all, gets `expected(api)`.
 */
export interface SignedRoute extends RouteKey {
  call(api: TestApi, tenant: Tenant, token: string | undefined): Promise<ApiResponse>;
  expected(api: TestApi): { status: number; code: string };
}

export const GITHUB_SIGNED_ROUTES: SignedRoute[] = [
  {
    method: 'POST',
    path: '/webhooks/github',
    call: (api, _t, token) =>
      api.call('POST', '/webhooks/github', {
        token,
        body: { action: 'created', installation: { id: 1 } },
        headers: { 'x-github-event': 'installation', 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` },
      }),
    expected: (api) =>
      api.platform.config.codehostApp ? { status: 401, code: 'invalid_signature' } : { status: 503, code: 'codehost_not_configured' },
  },
  {
    method: 'GET',
    path: '/github/install-callback',
    call: (api, _t, token) => api.call('GET', '/github/install-callback?installation_id=1&state=forged.install.state', { token }),
    expected: () => ({ status: 401, code: 'unauthorized' }),
  },
];
