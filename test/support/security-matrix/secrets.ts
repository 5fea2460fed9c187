import { asOwner, fresh, type SecuredRoute } from './route';

const secretsPath = (t: { org: { slug: string }; project: { slug: string } }) => `/${t.org.slug}/${t.project.slug}/envs/default/secrets`;

/** Secrets are environment-scoped (the pin applies) and not cell-scoped: no outsideCellScope. */
export const SECRETS_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: '/{o}/{p}/envs/{envName}/secrets',
    minRole: 'admin',
    environmentScoped: true,
    success: 200,
    call: (api, t, token) => api.call('GET', secretsPath(t), { token }),
  },
  {
    method: 'PUT',
    path: '/{o}/{p}/envs/{envName}/secrets/{name}',
    minRole: 'admin',
    environmentScoped: true,
    success: 201,
    call: (api, t, token) => api.call('PUT', `${secretsPath(t)}/${fresh('matrix-secret')}`, { token, body: { value: 'matrix-value' } }),
  },
  {
    method: 'DELETE',
    path: '/{o}/{p}/envs/{envName}/secrets/{name}',
    minRole: 'admin',
    environmentScoped: true,
    success: 200,
    call: async (api, t, token) => {
      const path = `${secretsPath(t)}/${fresh('matrix-gone')}`;
      await api.call('PUT', path, { token: asOwner(api), body: { value: 'matrix-value' } });
      return api.call('DELETE', path, { token });
    },
  },
];
