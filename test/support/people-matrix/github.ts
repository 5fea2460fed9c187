import { githubInstallations } from '../../../src/db/schema';
import type { TestApi } from '../node-app';
import type { PeopleRoute, PeopleWorld } from './route';

/**
 * The code-hosting routes a user session calls (src/modules/github;
 * docs/codehost.md): install URL, recovery and soft delete need a user
 * session of an owner or admin (a member 403, a non-member 404, a service
 * token 401); repository links take a session or a token (the token matrix
 * has them too), catalog:read to read, catalog:write to change.
 *
 * The matrix's api has no CODEHOST_APP_*: the caller is checked first and
 * the App's configuration after, so an allowed caller gets
 * 503 codehost_not_configured (`success`). The configured answers are
 * test/node/github-install.test.ts, against the local GitHub server.
 */

const NOT_CONFIGURED = 503;
let nextInstallationId = 880_000_000 + Math.floor(Math.random() * 1_000_000);

/** A fresh installation record of the world's organization (what the install callback writes), for the delete row. */
async function installationFixture(api: TestApi, world: PeopleWorld): Promise<string> {
  const [row] = await api.db
    .insert(githubInstallations)
    .values({ installationId: ++nextInstallationId, orgId: world.org.id, accountLogin: 'matrix-account', accountType: 'Organization' })
    .returning({ id: githubInstallations.id });
  return row!.id;
}

const linkPath = (world: PeopleWorld) => `/${world.org.slug}/${world.project.slug}/github/repos/matrix-owner/matrix-repo`;

export const GITHUB_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'POST',
    path: '/github/install-url',
    access: 'admin',
    tokens: 401,
    success: NOT_CONFIGURED,
    call: (api, world, credential) => api.call('POST', '/github/install-url', { token: credential, body: { orgId: world.org.slug } }),
  },
  {
    method: 'POST',
    path: '/github/installations/recover',
    access: 'admin',
    tokens: 401,
    success: NOT_CONFIGURED,
    call: (api, world, credential) =>
      api.call('POST', '/github/installations/recover', { token: credential, body: { orgId: world.org.slug, installationId: ++nextInstallationId } }),
  },
  {
    method: 'DELETE',
    path: '/github/installations/{id}',
    access: 'admin',
    tokens: 401,
    success: NOT_CONFIGURED,
    call: async (api, world, credential) => api.call('DELETE', `/github/installations/${await installationFixture(api, world)}`, { token: credential }),
  },
  {
    method: 'GET',
    path: '/{o}/{p}/github/repos/{owner}/{repo}',
    access: 'member',
    tokens: 'allowed',
    success: NOT_CONFIGURED,
    call: (api, world, credential) => api.call('GET', linkPath(world), { token: credential }),
  },
  {
    method: 'PUT',
    path: '/{o}/{p}/github/repos/{owner}/{repo}',
    access: 'admin',
    tokens: 'allowed',
    success: NOT_CONFIGURED,
    call: (api, world, credential) => api.call('PUT', linkPath(world), { token: credential }),
  },
  {
    method: 'DELETE',
    path: '/{o}/{p}/github/repos/{owner}/{repo}',
    access: 'admin',
    tokens: 'allowed',
    success: NOT_CONFIGURED,
    call: (api, world, credential) => api.call('DELETE', linkPath(world), { token: credential }),
  },
];
