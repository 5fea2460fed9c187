import { randomUUID } from 'node:crypto';
import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { asOwner, fresh, PROJ, type SecuredRoute } from './route';

const viewsPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/graph-views`;

/**
 * A fresh project view, made by the matrix's owner. A token can own no
 * personal view, so every view a token may change is a project view, and
 * changing one needs graph:manage: admin. Where the fixture is refused (a
 * suspended organization) a random id still lands the call on its route.
 */
async function matrixView(api: TestApi, t: Tenant): Promise<string> {
  const created = await api.call('POST', viewsPath(t), {
    token: asOwner(api),
    body: { name: fresh('matrix-view'), scope: 'project', config: {} },
  });
  return created.status === 201 ? created.body.id : randomUUID();
}

/** Graph views are project-wide, not per environment (the pin does not apply) and not cell-scoped. */
export const GRAPH_VIEWS_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${PROJ}/graph-views`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', viewsPath(t), { token }),
  },
  {
    // a token can never create a personal view (401): the row creates a project view, which needs graph:manage
    method: 'POST',
    path: `${PROJ}/graph-views`,
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', viewsPath(t), { token, body: { name: fresh('matrix-view'), scope: 'project', config: { depth: 1 } } }),
  },
  {
    method: 'GET',
    path: `${PROJ}/graph-views/default`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `${viewsPath(t)}/default`, { token }),
  },
  {
    method: 'GET',
    path: `${PROJ}/graph-views/{id}`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('GET', `${viewsPath(t)}/${await matrixView(api, t)}`, { token }),
  },
  {
    method: 'PUT',
    path: `${PROJ}/graph-views/{id}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('PUT', `${viewsPath(t)}/${await matrixView(api, t)}`, { token, body: { name: 'renamed' } }),
  },
  {
    method: 'DELETE',
    path: `${PROJ}/graph-views/{id}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('DELETE', `${viewsPath(t)}/${await matrixView(api, t)}`, { token }),
  },
  {
    method: 'PATCH',
    path: `${PROJ}/graph-views/{id}/default`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('PATCH', `${viewsPath(t)}/${await matrixView(api, t)}/default`, { token }),
  },
];
