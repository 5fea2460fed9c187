import type { Config } from '../config';
import type { Queryable } from '../db/client';
import type { actionRuns } from '../db/schema';
import type { RunPorts } from './engine';
import type { InterpolationContext } from './interpolation';

/**
 * What a run's templates refer to (SPEC "Outbound webhook trigger"): the
 * secrets of its environment (only those named), its parameters, the entity
 * as it was when triggered, and its callback. The same at trigger time (a
 * dry run, with a stand-in token) and at every delivery attempt.
 */

export type RunRow = typeof actionRuns.$inferSelect;

/** What a run's templates are filled from: its row, or the row about to be written. */
export type RunDraft = Pick<RunRow, 'id' | 'orgId' | 'projectId' | 'envId' | 'callbackBaseUrl' | 'parameters' | 'entitySnapshot'>;

/** The callback address handed to the receiver: ids, not slugs, so a rename never breaks it. */
export const callbackUrl = (run: Pick<RunRow, 'callbackBaseUrl' | 'orgId' | 'projectId' | 'envId' | 'id'>): string =>
  `${run.callbackBaseUrl.replace(/\/+$/, '')}/${run.orgId}/${run.projectId}/envs/${run.envId}/action-runs/${run.id}/callback`;

/** The context of `run`'s templates; secrets are decrypted for the run's own environment only. */
export async function templateContext(
  deps: { db: Queryable; config: Config; ports: Pick<RunPorts, 'resolveSecrets'> },
  run: RunDraft,
  callbackToken: string,
  secretNames: string[],
): Promise<InterpolationContext> {
  const tenancy = { orgId: run.orgId, projectId: run.projectId, envId: run.envId };
  const secrets = await deps.ports.resolveSecrets(deps.db, deps.config.encryptionKey, tenancy, secretNames);
  return {
    secrets: Object.fromEntries(secrets),
    parameters: run.parameters as Record<string, unknown>,
    entity: run.entitySnapshot as InterpolationContext['entity'],
    run: { id: run.id, callbackUrl: callbackUrl(run), callbackToken },
  };
}
