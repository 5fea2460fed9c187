import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { asOwner, ENV, fresh, PROJ, type SecuredRoute } from './route';

/**
 * Action definitions are catalog (viewer reads, admin writes, not
 * environment-scoped); the entity's action list is data in `default`, and its
 * fixture entity is outside the cell-scoped token's memberless cell (404).
 */

const actionsPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/actions`;

const actionBody = (name: string) => ({
  kind: 'Action',
  name,
  entityType: 'matrix-type',
  trigger: { type: 'webhook', url: 'https://hooks.example.com/matrix' },
});

/** A fresh action made by the owner; when it cannot be made (a suspended organization) its name still shows the gate. */
async function actionFixture(api: TestApi, t: Tenant): Promise<string> {
  const name = fresh('matrix-action');
  await api.call('POST', actionsPath(t), { token: asOwner(api), body: actionBody(name) });
  return name;
}

export const ACTIONS_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${PROJ}/actions`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', actionsPath(t), { token }),
  },
  {
    method: 'POST',
    path: `${PROJ}/actions`,
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) => api.call('POST', actionsPath(t), { token, body: actionBody(fresh('matrix-action')) }),
  },
  {
    method: 'GET',
    path: `${PROJ}/actions/{name}`,
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('GET', `${actionsPath(t)}/${await actionFixture(api, t)}`, { token }),
  },
  {
    method: 'PUT',
    path: `${PROJ}/actions/{name}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const name = await actionFixture(api, t);
      return api.call('PUT', `${actionsPath(t)}/${name}`, { token, body: { ...actionBody(name), displayName: 'Changed' } });
    },
  },
  {
    method: 'DELETE',
    path: `${PROJ}/actions/{name}`,
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => api.call('DELETE', `${actionsPath(t)}/${await actionFixture(api, t)}`, { token }),
  },
  {
    method: 'GET',
    path: `${ENV}/entities/{name}/actions`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 404, code: 'not_found' },
    call: async (api, t, token) => {
      const entity = fresh('matrix-entity');
      await api.call('POST', `/${t.org.slug}/${t.project.slug}/envs/default/entities`, {
        token: asOwner(api),
        body: { kind: 'Entity', entityType: 'matrix-type', name: entity },
      });
      return api.call('GET', `/${t.org.slug}/${t.project.slug}/envs/default/entities/${entity}/actions`, { token });
    },
  },
];
