import { and, eq } from 'drizzle-orm';
import { entities, environments } from '../../../src/db/schema';
import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { asOwner, fresh, type SecuredRoute } from './route';

const proj = (t: Tenant) => `/${t.org.slug}/${t.project.slug}`;
const cellBody = (name: string) => ({ kind: 'Cell', name, entityType: 'matrix-type' });

/** A fresh explicit cell of `matrix-type`, made by the matrix's owner (a suspended tenant refuses; any name then shows the gate). */
async function matrixCell(api: TestApi, t: Tenant): Promise<string> {
  const name = fresh('matrix-cell');
  await api.call('POST', `${proj(t)}/cells`, { token: asOwner(api), body: cellBody(name) });
  return name;
}

/**
 * A fresh cell holding a fresh entity of `default`, both outside `matrix-scope`.
 * The entity row is inserted directly (the matrix does not depend on the
 * entities routes); it is only made when the cell could be, which a suspended
 * organization refuses, and then any name shows the gate.
 */
async function cellWithEntity(api: TestApi, t: Tenant, options: { member: boolean }): Promise<{ cell: string; entity: string }> {
  const cell = fresh('matrix-cell');
  const entity = fresh('matrix-entity');
  const created = await api.call('POST', `${proj(t)}/cells`, { token: asOwner(api), body: cellBody(cell) });
  if (created.status !== 201) return { cell, entity };
  const [env] = await api.db
    .select({ id: environments.id })
    .from(environments)
    .where(and(eq(environments.projectId, t.project.id), eq(environments.name, 'default')));
  await api.db.insert(entities).values({
    orgId: t.org.id,
    projectId: t.project.id,
    envId: env!.id,
    entityTypeName: 'matrix-type',
    name: entity,
    state: 'active',
  });
  if (options.member) {
    await api.call('POST', `${proj(t)}/cells/${cell}/members`, {
      token: asOwner(api),
      body: { entityName: entity, entityTypeName: 'matrix-type' },
    });
  }
  return { cell, entity };
}

export const CELLS_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: '/{o}/{p}/cells',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `${proj(t)}/cells`, { token }),
  },
  {
    method: 'POST',
    path: '/{o}/{p}/cells',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) => api.call('POST', `${proj(t)}/cells`, { token, body: cellBody(fresh('matrix-cell')) }),
  },
  {
    method: 'GET',
    path: '/{o}/{p}/cells/{name}',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `${proj(t)}/cells/matrix-scope`, { token }),
  },
  {
    method: 'PUT',
    path: '/{o}/{p}/cells/{name}',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const name = await matrixCell(api, t);
      return api.call('PUT', `${proj(t)}/cells/${name}`, { token, body: { ...cellBody(name), placementPolicy: 'random' } });
    },
  },
  {
    method: 'DELETE',
    path: '/{o}/{p}/cells/{name}',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const name = await matrixCell(api, t);
      return api.call('DELETE', `${proj(t)}/cells/${name}`, { token });
    },
  },
  {
    method: 'GET',
    path: '/{o}/{p}/cells/{name}/members',
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    // the list is filtered to the token's cells, not refused
    outsideCellScope: { status: 200 },
    call: async (api, t, token) => {
      const { cell } = await cellWithEntity(api, t, { member: true });
      return api.call('GET', `${proj(t)}/cells/${cell}/members`, { token });
    },
  },
  {
    method: 'POST',
    path: '/{o}/{p}/cells/{name}/members',
    minRole: 'admin',
    environmentScoped: true,
    success: 201,
    outsideCellScope: { status: 403, code: 'cell_scope_violation' },
    call: async (api, t, token) => {
      const { cell, entity } = await cellWithEntity(api, t, { member: false });
      return api.call('POST', `${proj(t)}/cells/${cell}/members`, {
        token,
        body: { entityName: entity, entityTypeName: 'matrix-type' },
      });
    },
  },
  {
    method: 'DELETE',
    path: '/{o}/{p}/cells/{name}/members/{entityName}',
    minRole: 'admin',
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 403, code: 'cell_scope_violation' },
    call: async (api, t, token) => {
      const { cell, entity } = await cellWithEntity(api, t, { member: true });
      return api.call('DELETE', `${proj(t)}/cells/${cell}/members/${entity}`, { token });
    },
  },
  {
    method: 'GET',
    path: '/{o}/{p}/cells/{name}/recommendations',
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    // ranks only what the token may see
    outsideCellScope: { status: 200 },
    call: async (api, t, token) => {
      const { cell } = await cellWithEntity(api, t, { member: true });
      return api.call('GET', `${proj(t)}/cells/${cell}/recommendations`, { token });
    },
  },
];
