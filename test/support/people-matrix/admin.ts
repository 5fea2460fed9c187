import type { TestApi } from '../node-app';
import { createUserTenant, signUp } from '../people';
import type { PeopleRoute } from './route';

/**
 * The super-admin routes (SPEC "Super-admin"): only the world's super-admin
 * succeeds; every other user gets 403, a service token 401. The rows that
 * change what they call (suspend, unsuspend, nuke) make a fresh
 * organization and project first, owned by a freshly signed-up user, so the
 * matrix can call them again and again without touching the world.
 */

/** A fresh organization with one project, owned by a user signed up for it. */
async function freshTenant(api: TestApi) {
  return createUserTenant(api, await signUp(api));
}

const superAdminOnly = { access: 'super-admin', tokens: 401, success: 200 } as const;

export const ADMIN_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'GET',
    path: '/admin/orgs',
    ...superAdminOnly,
    call: (api, _world, credential) => api.call('GET', '/admin/orgs', { token: credential }),
  },
  {
    method: 'GET',
    path: '/admin/orgs/{id}',
    ...superAdminOnly,
    call: (api, world, credential) => api.call('GET', `/admin/orgs/${world.org.slug}`, { token: credential }),
  },
  {
    method: 'POST',
    path: '/admin/orgs/{id}/suspend',
    ...superAdminOnly,
    call: async (api, _world, credential) => {
      const { org } = await freshTenant(api);
      return api.call('POST', `/admin/orgs/${org.id}/suspend`, { token: credential });
    },
  },
  {
    method: 'POST',
    path: '/admin/orgs/{id}/unsuspend',
    ...superAdminOnly,
    call: async (api, world, credential) => {
      const { org } = await freshTenant(api);
      await api.call('POST', `/admin/orgs/${org.id}/suspend`, { token: world.superAdmin.token });
      return api.call('POST', `/admin/orgs/${org.id}/unsuspend`, { token: credential });
    },
  },
  {
    method: 'GET',
    path: '/admin/audit',
    ...superAdminOnly,
    call: (api, _world, credential) => api.call('GET', '/admin/audit?limit=5', { token: credential }),
  },
  {
    method: 'GET',
    path: '/admin/metrics/overview',
    ...superAdminOnly,
    call: (api, _world, credential) => api.call('GET', '/admin/metrics/overview', { token: credential }),
  },
  {
    method: 'DELETE',
    path: '/admin/projects/{projectId}/nuke',
    ...superAdminOnly,
    call: async (api, _world, credential) => {
      const { project } = await freshTenant(api);
      return api.call('DELETE', `/admin/projects/${project.id}/nuke`, { token: credential });
    },
  },
  {
    method: 'GET',
    path: '/admin/integrations/github-installations',
    ...superAdminOnly,
    call: (api, _world, credential) => api.call('GET', '/admin/integrations/github-installations', { token: credential }),
  },
];
