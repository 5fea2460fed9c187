import type { Tenant } from '../fixtures';
import { ENV, fresh, type SecuredRoute } from './route';

/**
 * The batch upsert (src/modules/batch). It writes as data:write does, and a
 * cell-scoped token is refused whatever the batch holds: batch writes are for
 * unscoped sync tools (403 cell_scope_violation).
 */

const batchPath = (t: Tenant) => `/${t.org.slug}/${t.project.slug}/envs/default/batch`;

export const BATCH_ROUTES: SecuredRoute[] = [
  {
    method: 'POST',
    path: `${ENV}/batch`,
    minRole: 'member',
    environmentScoped: true,
    success: 200,
    outsideCellScope: { status: 403, code: 'cell_scope_violation' },
    call: (api, t, token) =>
      api.call('POST', batchPath(t), {
        token,
        body: { source: 'matrix-sync', entities: [{ entityType: 'matrix-type', name: fresh('matrix-batch') }] },
      }),
  },
];
