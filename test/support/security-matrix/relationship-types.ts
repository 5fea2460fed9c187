import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { entityTypeFixture } from './entity-types';
import { asOwner, fresh, PROJ, type SecuredRoute } from './route';

const relationshipTypesPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/relationship-types`;

const relationshipTypeBody = (name: string, end: string) => ({ kind: 'RelationshipType', name, from: end, to: end, states: ['active'] });

/** A fresh relationship type (and entity type for its ends) made as the matrix's owner; the name either way. */
async function relationshipTypeFixture(api: TestApi, t: Tenant): Promise<{ name: string; end: string }> {
  const end = await entityTypeFixture(api, t);
  const name = fresh('matrix-rt');
  await api.call('POST', relationshipTypesPath(t), { token: asOwner(api), body: relationshipTypeBody(name, end) });
  return { name, end };
}

export const RELATIONSHIP_TYPES_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${PROJ}/relationship-types`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', relationshipTypesPath(t), { token }),
  },
  {
    method: 'POST',
    path: `${PROJ}/relationship-types`,
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: async (api, t, token) => {
      const end = await entityTypeFixture(api, t);
      return api.call('POST', relationshipTypesPath(t), { token, body: relationshipTypeBody(fresh('matrix-rt'), end) });
    },
  },
  {
    method: 'GET',
    path: `${PROJ}/relationship-types/{name}`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const { name } = await relationshipTypeFixture(api, t);
      return api.call('GET', `${relationshipTypesPath(t)}/${name}`, { token });
    },
  },
  {
    method: 'PUT',
    path: `${PROJ}/relationship-types/{name}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const { name, end } = await relationshipTypeFixture(api, t);
      return api.call('PUT', `${relationshipTypesPath(t)}/${name}`, {
        token,
        body: { ...relationshipTypeBody(name, end), displayName: 'Changed' },
      });
    },
  },
  {
    method: 'DELETE',
    path: `${PROJ}/relationship-types/{name}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const { name } = await relationshipTypeFixture(api, t);
      return api.call('DELETE', `${relationshipTypesPath(t)}/${name}`, { token });
    },
  },
];
