import type { SignedRoute } from './github';

/**
 * The project webhook of pull-request runs, `POST /{o}/{p}/webhooks/github`
 * (src/modules/github/project-webhook-routes.ts): its credential is an HMAC
 * with the secret the run's action names, checked inside the route, so no
 * service token opens or closes it (proposed list, wired by the lead beside
 * GITHUB_SIGNED_ROUTES). The matrix has no run with a pull request, so the
 * row sends a `closed` event without its `pull_request`: every caller gets
 * the same 400, whichever token comes with it, and nothing is read past the
 * body. What the signature decides is test/node/github-webhook-project.test.ts.
 * The route is in both deployment modes (pull-request runs work with a
 * static token and no App).
 */
export const GITHUB_PROJECT_WEBHOOK_ROUTES: SignedRoute[] = [
  {
    method: 'POST',
    path: '/{o}/{p}/webhooks/github',
    call: (api, t, token) =>
      api.call('POST', `/${t.org.slug}/${t.project.slug}/webhooks/github`, {
        token,
        body: { action: 'closed', repository: { full_name: 'matrix-owner/matrix-repo' } },
        headers: { 'x-github-event': 'pull_request', 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` },
      }),
    expected: () => ({ status: 400, code: 'validation_failed' }),
  },
];
