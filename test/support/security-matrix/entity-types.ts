import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { asOwner, fresh, PROJ, type SecuredRoute } from './route';

const entityTypesPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/entity-types`;

export const entityTypeBody = (name: string) => ({ kind: 'EntityType', name, states: ['active'], initialState: 'active' });

/**
 * A fresh entity type made through the API as the matrix's owner. When it
 * cannot be made (a suspended organization) the name is returned anyway: the
 * call under test is refused before it looks the type up.
 */
export async function entityTypeFixture(api: TestApi, t: Tenant): Promise<string> {
  const name = fresh('matrix-et');
  await api.call('POST', entityTypesPath(t), { token: asOwner(api), body: entityTypeBody(name) });
  return name;
}

export const ENTITY_TYPES_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${PROJ}/entity-types`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', entityTypesPath(t), { token }),
  },
  {
    method: 'POST',
    path: `${PROJ}/entity-types`,
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) => api.call('POST', entityTypesPath(t), { token, body: entityTypeBody(fresh('matrix-et')) }),
  },
  {
    method: 'GET',
    path: `${PROJ}/entity-types/{name}`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('GET', `${entityTypesPath(t)}/${await entityTypeFixture(api, t)}`, { token }),
  },
  {
    method: 'PUT',
    path: `${PROJ}/entity-types/{name}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const name = await entityTypeFixture(api, t);
      return api.call('PUT', `${entityTypesPath(t)}/${name}`, { token, body: { ...entityTypeBody(name), displayName: 'Changed' } });
    },
  },
  {
    method: 'DELETE',
    path: `${PROJ}/entity-types/{name}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('DELETE', `${entityTypesPath(t)}/${await entityTypeFixture(api, t)}`, { token }),
  },
];
