import type { Tenant } from '../fixtures';
import type { ApiResponse, TestApi } from '../node-app';
import { asOwner, ENV, fresh, type RouteKey, type SecuredRoute } from './route';

/**
 * Action runs are data of `default`. The trigger needs data:write; reading
 * and cancelling need data:read (SPEC). Every fixture entity is outside the
 * cell-scoped token's memberless cell: it reads those runs as absent (404),
 * lists none of them (200), and may not trigger on them (403).
 *
 * Runs are made by the owner and never delivered (the matrix does not drain
 * the job runner), so each stays pending and a cancel succeeds.
 */

const envPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/envs/default`;

const MATRIX_ACTION = 'matrix-run';

/**
 * The action every run of the matrix is made with, on `matrix-type`: made
 * once per tenant (later calls are 409 already_exists, a suspended
 * organization 403; either way its name still shows the gate).
 */
async function ensureAction(api: TestApi, t: Tenant): Promise<string> {
  await api.call('POST', `/${t.org.slug}/${t.project.slug}/actions`, {
    token: asOwner(api),
    body: { kind: 'Action', name: MATRIX_ACTION, entityType: 'matrix-type', trigger: { type: 'webhook', url: 'https://hooks.example.com/matrix-run' } },
  });
  return MATRIX_ACTION;
}

/** A fresh entity of `matrix-type`, outside `matrix-scope`. */
async function entityFixture(api: TestApi, t: Tenant): Promise<string> {
  const name = fresh('matrix-entity');
  await api.call('POST', `${envPath(t)}/entities`, { token: asOwner(api), body: { kind: 'Entity', entityType: 'matrix-type', name } });
  return name;
}

/** A fresh pending run, triggered by the owner; any id when it cannot be made (a suspended organization). */
async function runFixture(api: TestApi, t: Tenant): Promise<string> {
  const action = await ensureAction(api, t);
  const entity = await entityFixture(api, t);
  const run = await api.call('POST', `${envPath(t)}/entities/${entity}/actions/${action}`, { token: asOwner(api), body: {} });
  return run.status === 202 ? run.body.id : crypto.randomUUID();
}

export const ACTION_RUNS_ROUTES: SecuredRoute[] = [
  {
    method: 'POST',
    path: `${ENV}/entities/{name}/actions/{actionName}`,
    minRole: 'member',
    environmentScoped: true,
    success: 202,
    outsideCellScope: { status: 403, code: 'cell_scope_violation' },
    call: async (api, t, token) => {
      const action = await ensureAction(api, t);
      const entity = await entityFixture(api, t);
      return api.call('POST', `${envPath(t)}/entities/${entity}/actions/${action}`, { token, body: {} });
    },
  },
  {
    method: 'GET',
    path: `${ENV}/action-runs`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    // filtered to the token's cells, not refused
    outsideCellScope: { status: 200 },
    call: async (api, t, token) => {
      await runFixture(api, t);
      return api.call('GET', `${envPath(t)}/action-runs`, { token });
    },
  },
  {
    method: 'GET',
    path: `${ENV}/action-runs/{id}`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 404, code: 'not_found' },
    call: async (api, t, token) => api.call('GET', `${envPath(t)}/action-runs/${await runFixture(api, t)}`, { token }),
  },
  {
    method: 'DELETE',
    path: `${ENV}/action-runs/{id}`,
    // SPEC: cancelling needs data:read only
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 404, code: 'not_found' },
    call: async (api, t, token) => api.call('DELETE', `${envPath(t)}/action-runs/${await runFixture(api, t)}`, { token }),
  },
];

/**
 * A route authenticated by a run's own callback token, never by a service
 * token (SPEC Authentication 9): the matrix expects 401
 * invalid_callback_token from every caller it has, whatever its role.
 */
export interface CallbackRoute extends RouteKey {
  call(api: TestApi, tenant: Tenant, token: string | undefined): Promise<ApiResponse>;
}

export const RUN_CALLBACK_ROUTES: CallbackRoute[] = [
  {
    method: 'POST',
    path: `${ENV}/action-runs/{id}/callback`,
    call: async (api, t, token) =>
      api.call('POST', `${envPath(t)}/action-runs/${await runFixture(api, t)}/callback`, { token, body: { status: 'succeeded' } }),
  },
];
