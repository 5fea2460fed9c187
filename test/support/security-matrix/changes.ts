import type { Tenant } from '../fixtures';
import type { ApiResponse, TestApi } from '../node-app';
import { asOwner, ENV, fresh, type SecuredRoute } from './route';

/**
 * The entity change stream and its JSON catch-up (DECISIONS §6): data of
 * `default`, data:read. A cell-scoped token is not refused: it gets only its
 * cells' changes (200), so the owner's fixture entity, outside
 * `matrix-scope`, is one it does not see (test/node/stream.test.ts checks the
 * filtering itself).
 */

const envPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/envs/default`;

/** A change in the log, made by the owner outside `matrix-scope` (refused for a suspended organization: no matter). */
async function changeFixture(api: TestApi, t: Tenant): Promise<void> {
  await api.call('POST', `${envPath(t)}/entities`, {
    token: asOwner(api),
    body: { kind: 'Entity', entityType: 'matrix-type', name: fresh('matrix-changed') },
  });
}

/**
 * A success is an SSE response that stays open: only its status is read and
 * the body is cancelled (the client going away), so the call cannot hang.
 * An error is the usual JSON body.
 */
async function openStream(api: TestApi, path: string, token: string | undefined): Promise<ApiResponse> {
  const response = await api.app.request(path, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
  if (response.headers.get('content-type')?.startsWith('text/event-stream')) {
    await response.body?.cancel();
    return { status: response.status, body: undefined, headers: response.headers };
  }
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined, headers: response.headers };
}

export const CHANGES_ROUTES: SecuredRoute[] = [
  {
    method: 'GET',
    path: `${ENV}/entities/stream`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    // filtered to the token's cells, not refused
    outsideCellScope: { status: 200 },
    call: async (api, t, token) => {
      await changeFixture(api, t);
      return openStream(api, `${envPath(t)}/entities/stream?lastEventId=0`, token);
    },
  },
  {
    method: 'GET',
    path: `${ENV}/changes`,
    minRole: 'viewer',
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 200 },
    call: async (api, t, token) => {
      await changeFixture(api, t);
      return api.call('GET', `${envPath(t)}/changes`, { token });
    },
  },
];
