import type { TestApi } from '../node-app';
import { PROJ } from '../security-matrix/route';
import { freshName, type PeopleRoute, type PeopleWorld } from './route';

const viewsPath = (world: PeopleWorld) => `/${world.org.slug}/${world.project.slug}/graph-views`;

/** A fresh project view, made by the world's owner. */
async function worldView(api: TestApi, world: PeopleWorld): Promise<string> {
  const created = await api.call('POST', viewsPath(world), {
    token: world.owner.token,
    body: { name: freshName('view'), scope: 'project', config: {} },
  });
  if (created.status !== 201) throw new Error(`fixture view: ${created.status} ${JSON.stringify(created.body)}`);
  return created.body.id;
}

/**
 * Graph views × users. Every row a service token may call too (the token
 * matrix has them), so the writes act on project views: those need admin
 * (graph:manage), and a member gets 403. Personal views (any member, never a
 * token) are covered by test/node/graph-views.test.ts.
 */
export const GRAPH_VIEWS_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'GET',
    path: `${PROJ}/graph-views`,
    access: 'member',
    tokens: 'allowed',
    success: 200,
    call: (api, world, credential) => api.call('GET', viewsPath(world), { token: credential }),
  },
  {
    method: 'POST',
    path: `${PROJ}/graph-views`,
    access: 'admin',
    tokens: 'allowed',
    success: 201,
    call: (api, world, credential) =>
      api.call('POST', viewsPath(world), { token: credential, body: { name: freshName('view'), scope: 'project', config: {} } }),
  },
  {
    method: 'GET',
    path: `${PROJ}/graph-views/default`,
    access: 'member',
    tokens: 'allowed',
    success: 200,
    call: (api, world, credential) => api.call('GET', `${viewsPath(world)}/default`, { token: credential }),
  },
  {
    method: 'GET',
    path: `${PROJ}/graph-views/{id}`,
    access: 'member',
    tokens: 'allowed',
    success: 200,
    call: async (api, world, credential) => api.call('GET', `${viewsPath(world)}/${await worldView(api, world)}`, { token: credential }),
  },
  {
    method: 'PUT',
    path: `${PROJ}/graph-views/{id}`,
    access: 'admin',
    tokens: 'allowed',
    success: 200,
    call: async (api, world, credential) =>
      api.call('PUT', `${viewsPath(world)}/${await worldView(api, world)}`, { token: credential, body: { name: 'renamed' } }),
  },
  {
    method: 'DELETE',
    path: `${PROJ}/graph-views/{id}`,
    access: 'admin',
    tokens: 'allowed',
    success: 200,
    call: async (api, world, credential) => api.call('DELETE', `${viewsPath(world)}/${await worldView(api, world)}`, { token: credential }),
  },
  {
    method: 'PATCH',
    path: `${PROJ}/graph-views/{id}/default`,
    access: 'admin',
    tokens: 'allowed',
    success: 200,
    call: async (api, world, credential) =>
      api.call('PATCH', `${viewsPath(world)}/${await worldView(api, world)}/default`, { token: credential }),
  },
];
