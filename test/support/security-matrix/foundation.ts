import { fresh, matrixOwner, type SecuredRoute } from './route';

export const FOUNDATION_ROUTES: SecuredRoute[] = [
  {
    method: 'POST',
    path: '/orgs',
    minRole: 'none',
    environmentScoped: false,
    success: 201,
    call: (api, _t, token) => api.call('POST', '/orgs', { token, body: { name: 'X', slug: fresh('matrix-org') } }),
  },
  {
    method: 'GET',
    path: '/orgs/{id}',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}`, { token }),
  },
  {
    method: 'GET',
    path: '/orgs/{o}/projects',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}/projects`, { token }),
  },
  {
    method: 'POST',
    path: '/orgs/{o}/projects',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', `/orgs/${t.org.slug}/projects`, { token, body: { name: 'P', slug: fresh('matrix-project') } }),
  },
  {
    method: 'GET',
    path: '/{o}/{p}/envs',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/${t.org.slug}/${t.project.slug}/envs`, { token }),
  },
  {
    method: 'POST',
    path: '/{o}/{p}/envs',
    minRole: 'admin',
    environmentScoped: true,
    success: 201,
    call: (api, t, token) => api.call('POST', `/${t.org.slug}/${t.project.slug}/envs`, { token, body: { name: fresh('env') } }),
  },
  {
    method: 'DELETE',
    path: '/{o}/{p}/envs/{name}',
    minRole: 'admin',
    environmentScoped: true,
    success: 200,
    call: async (api, t, token) => {
      const name = fresh('gone');
      // created with the matrix's own owner token, kept on the api for this purpose
      await api.call('POST', `/${t.org.slug}/${t.project.slug}/envs`, { token: matrixOwner.get(api), body: { name } });
      return api.call('DELETE', `/${t.org.slug}/${t.project.slug}/envs/${name}`, { token });
    },
  },
  {
    method: 'GET',
    path: '/orgs/{orgId}/projects/{projectId}/tokens',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, { token }),
  },
  {
    method: 'POST',
    path: '/orgs/{orgId}/projects/{projectId}/tokens',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, { token, body: { name: 'm', role: 'viewer' } }),
  },
  {
    method: 'DELETE',
    path: '/orgs/{orgId}/projects/{projectId}/tokens/{id}',
    minRole: 'admin',
    // the victim is unpinned and unscoped: a token pinned to an environment, or
    // scoped to cells, could not have minted it, so it may not revoke it
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 403, code: 'forbidden' },
    call: async (api, t, token) => {
      const path = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      const victim = await api.call('POST', path, { token: matrixOwner.get(api), body: { name: 'victim', role: 'viewer' } });
      // when the fixture cannot be made (a suspended organization), any id shows the gate
      return api.call('DELETE', `${path}/${victim.body?.id ?? crypto.randomUUID()}`, { token });
    },
  },
];
