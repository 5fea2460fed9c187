import { fresh, matrixOwner, type SecuredRoute } from './route';

export const FOUNDATION_ROUTES: SecuredRoute[] = [
  {
    name: 'POST /orgs',
    minRole: 'none',
    environmentScoped: false,
    success: 201,
    call: (api, _t, token) => api.call('POST', '/orgs', { token, body: { name: 'X', slug: fresh('matrix-org') } }),
  },
  {
    name: 'GET /orgs/{id}',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}`, { token }),
  },
  {
    name: 'GET /orgs/{o}/projects',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}/projects`, { token }),
  },
  {
    name: 'POST /orgs/{o}/projects',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', `/orgs/${t.org.slug}/projects`, { token, body: { name: 'P', slug: fresh('matrix-project') } }),
  },
  {
    name: 'GET /{o}/{p}/envs',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/${t.org.slug}/${t.project.slug}/envs`, { token }),
  },
  {
    name: 'POST /{o}/{p}/envs',
    minRole: 'admin',
    environmentScoped: true,
    success: 201,
    call: (api, t, token) => api.call('POST', `/${t.org.slug}/${t.project.slug}/envs`, { token, body: { name: fresh('env') } }),
  },
  {
    name: 'DELETE /{o}/{p}/envs/{name}',
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
    name: 'GET /orgs/{orgId}/projects/{projectId}/tokens',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, { token }),
  },
  {
    name: 'POST /orgs/{orgId}/projects/{projectId}/tokens',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, { token, body: { name: 'm', role: 'viewer' } }),
  },
  {
    name: 'DELETE /orgs/{orgId}/projects/{projectId}/tokens/{id}',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const path = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      const victim = await api.call('POST', path, { token: matrixOwner.get(api), body: { name: 'victim', role: 'viewer' } });
      // when the fixture cannot be made (a suspended organization), any id shows the gate
      return api.call('DELETE', `${path}/${victim.body?.id ?? crypto.randomUUID()}`, { token });
    },
  },
];
