import { and, eq } from 'drizzle-orm';
import { entities, entityTypes, environments, relationshipTypes } from '../../../src/db/schema';
import type { Tenant } from '../fixtures';
import type { TestApi } from '../node-app';
import { asOwner, ENV, fresh, type SecuredRoute } from './route';

const env = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/envs/default`;

/**
 * A relationship type and two entities of `matrix-type` in `default`, made
 * fresh for each call. Inserted as rows: the catalog and entity APIs are
 * other modules, and rows can be made even for a suspended organization.
 * `matrix-type` has no member in the matrix's cell, so both ends are outside it.
 */
async function ends(api: TestApi, t: Tenant): Promise<{ type: string; from: string; to: string }> {
  const tenancy = { orgId: t.org.id, projectId: t.project.id };
  await api.db
    .insert(entityTypes)
    .values({ ...tenancy, name: 'matrix-type', states: ['active'], initialState: 'active' })
    .onConflictDoNothing();
  const type = fresh('matrix-rel');
  await api.db.insert(relationshipTypes).values({
    ...tenancy,
    name: type,
    fromEntityTypeName: 'matrix-type',
    toEntityTypeName: 'matrix-type',
    cardinality: 'many-to-many',
    states: ['planned', 'live'],
  });
  const [envRow] = await api.db
    .select({ id: environments.id })
    .from(environments)
    .where(and(eq(environments.projectId, t.project.id), eq(environments.name, 'default')));
  const [from, to] = [fresh('matrix-from'), fresh('matrix-to')];
  await api.db
    .insert(entities)
    .values([from, to].map((name) => ({ ...tenancy, envId: envRow!.id, entityTypeName: 'matrix-type', name, state: 'active' })));
  return { type, from, to };
}

/** A relationship made through the API as the matrix's owner; any id when it cannot be made (a suspended organization). */
async function relationshipId(api: TestApi, t: Tenant): Promise<string> {
  const { type, from, to } = await ends(api, t);
  const made = await api.call('POST', `${env(t)}/relationships`, {
    token: asOwner(api),
    body: { relationshipType: type, from, to },
  });
  return made.status === 201 ? made.body.id : crypto.randomUUID();
}

const HIDDEN = { status: 404, code: 'not_found' };

export const RELATIONSHIPS_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${ENV}/relationships`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    // the list answers, without what lies outside the cells
    outsideCellScope: { status: 200 },
    call: (api, t, token) => api.call('GET', `${env(t)}/relationships`, { token }),
  },
  {
    method: 'POST',
    path: `${ENV}/relationships`,
    minRole: 'member',
    environmentScoped: true,
    success: 201,
    outsideCellScope: { status: 403, code: 'cell_scope_violation' },
    call: async (api, t, token) => {
      const { type, from, to } = await ends(api, t);
      return api.call('POST', `${env(t)}/relationships`, { token, body: { relationshipType: type, from, to } });
    },
  },
  {
    method: 'GET',
    path: `${ENV}/relationships/{id}`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: HIDDEN,
    call: async (api, t, token) => api.call('GET', `${env(t)}/relationships/${await relationshipId(api, t)}`, { token }),
  },
  {
    method: 'PUT',
    path: `${ENV}/relationships/{id}`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: HIDDEN,
    call: async (api, t, token) =>
      api.call('PUT', `${env(t)}/relationships/${await relationshipId(api, t)}`, { token, body: { state: 'live' } }),
  },
  {
    method: 'DELETE',
    path: `${ENV}/relationships/{id}`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: HIDDEN,
    call: async (api, t, token) => api.call('DELETE', `${env(t)}/relationships/${await relationshipId(api, t)}`, { token }),
  },
  {
    method: 'GET',
    path: `${ENV}/entities/{name}/relationships`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: HIDDEN,
    call: async (api, t, token) => {
      const { from } = await ends(api, t);
      return api.call('GET', `${env(t)}/entities/${from}/relationships`, { token });
    },
  },
];
