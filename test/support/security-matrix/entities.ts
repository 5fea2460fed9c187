import { entityTypes } from '../../../src/db/schema';
import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { asOwner, ENV, fresh, type SecuredRoute } from './route';

/**
 * Entity routes. Fixtures are made with the matrix's owner token in `default`,
 * outside the cell-scoped token's (memberless) cell. That token reads such
 * an entity as absent (404) and lists or batch-reads nothing of it (200);
 * every write on it, or a create outside its cells, is 403 cell_scope_violation.
 */

const entitiesPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/envs/default/entities`;
const entityPath = (t: Tenant, name: string) => `${entitiesPath(t)}/${encodeURIComponent(name)}`;

/** An entity type with a metric, for the metric routes; `matrix-type` declares none. */
async function meteredType(api: TestApi, t: Tenant): Promise<string> {
  await api.db
    .insert(entityTypes)
    .values({
      orgId: t.org.id,
      projectId: t.project.id,
      name: 'matrix-metered',
      states: ['active'],
      initialState: 'active',
      metrics: [{ name: 'load' }],
    })
    .onConflictDoNothing();
  return 'matrix-metered';
}

/**
 * A fresh entity made by the owner. When it cannot be made (a suspended
 * organization), its name still shows the route's gate.
 */
async function fixture(api: TestApi, t: Tenant, entityType = 'matrix-type'): Promise<string> {
  const name = fresh('matrix-entity');
  await api.call('POST', entitiesPath(t), { token: asOwner(api), body: { kind: 'Entity', entityType, name } });
  return name;
}

const READ_OUTSIDE = { status: 404, code: 'not_found' };
const LIST_OUTSIDE = { status: 200 };
const WRITE_OUTSIDE = { status: 403, code: 'cell_scope_violation' };

export const ENTITIES_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${ENV}/entities`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: LIST_OUTSIDE,
    call: async (api, t, token) => {
      await fixture(api, t);
      return api.call('GET', entitiesPath(t), { token });
    },
  },
  {
    method: 'POST',
    path: `${ENV}/entities`,
    minRole: 'member',
    environmentScoped: true,
    success: 201,
    outsideCellScope: WRITE_OUTSIDE,
    call: (api, t, token) =>
      api.call('POST', entitiesPath(t), {
        token,
        body: { kind: 'Entity', entityType: 'matrix-type', name: fresh('matrix-entity') },
      }),
  },
  {
    method: 'GET',
    path: `${ENV}/entities/metrics`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: LIST_OUTSIDE,
    call: async (api, t, token) => {
      const name = await fixture(api, t);
      return api.call('GET', `${entitiesPath(t)}/metrics?names=${encodeURIComponent(name)}`, { token });
    },
  },
  {
    method: 'GET',
    path: `${ENV}/entities/{name}`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: READ_OUTSIDE,
    call: async (api, t, token) => api.call('GET', entityPath(t, await fixture(api, t)), { token }),
  },
  {
    method: 'PUT',
    path: `${ENV}/entities/{name}`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: WRITE_OUTSIDE,
    call: async (api, t, token) => api.call('PUT', entityPath(t, await fixture(api, t)), { token, body: { labels: { touched: 'yes' } } }),
  },
  {
    method: 'DELETE',
    path: `${ENV}/entities/{name}`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: WRITE_OUTSIDE,
    call: async (api, t, token) => api.call('DELETE', entityPath(t, await fixture(api, t)), { token }),
  },
  {
    method: 'GET',
    path: `${ENV}/entities/{name}/metrics`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: READ_OUTSIDE,
    call: async (api, t, token) => api.call('GET', `${entityPath(t, await fixture(api, t))}/metrics`, { token }),
  },
  {
    method: 'PUT',
    path: `${ENV}/entities/{name}/metrics/{metricName}`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: WRITE_OUTSIDE,
    call: async (api, t, token) => {
      const name = await fixture(api, t, await meteredType(api, t));
      return api.call('PUT', `${entityPath(t, name)}/metrics/load`, { token, body: { value: 1 } });
    },
  },
  {
    method: 'POST',
    path: `${ENV}/entities/{name}/sync-stamp`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: WRITE_OUTSIDE,
    call: async (api, t, token) =>
      api.call('POST', `${entityPath(t, await fixture(api, t))}/sync-stamp`, { token, body: { source: 'matrix' } }),
  },
  {
    method: 'GET',
    path: `${ENV}/entities/{name}/drift`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: READ_OUTSIDE,
    call: async (api, t, token) => api.call('GET', `${entityPath(t, await fixture(api, t))}/drift`, { token }),
  },
];
