import type { Config } from '../config';
import type { Queryable } from '../db/client';
import type { RunPorts } from './engine';
import { templateContext, type RunDraft } from './run-context';
import type { KindColumns, TriggerDefinition, TriggerKind } from './trigger-kind';
import { triggerableKind } from './trigger-kinds';

/**
 * A run at trigger time (ARCHITECTURE "Trigger"): the kind that will carry
 * it, and its dry run, before the run and its delivery job are written.
 */

/**
 * The kind that carries a new run of `trigger`: 501 not_implemented, through
 * the registry, when this server does not run it (asked before anything
 * else about the request is judged).
 */
export const kindForTrigger = (trigger: TriggerDefinition) => triggerableKind(trigger.type);

/**
 * Everything a delivery could refuse that can be known now: the kind's dry
 * run against the run about to be written (an ApiError for the caller, not a
 * failed run later). `kind` is kindForTrigger's. Returns the kind's
 * columns of the new run.
 */
export async function dryRunTrigger(
  kind: TriggerKind,
  deps: { db: Queryable; config: Config; ports: Pick<RunPorts, 'resolveSecrets'> },
  trigger: TriggerDefinition,
  run: RunDraft,
): Promise<KindColumns> {
  return kind.prepare(
    {
      config: deps.config,
      run,
      // a stand-in: the real token is signed for the delivery (LeasedJob.callbackToken), and a template's reference to it resolves either way
      templateContext: (secretNames) => templateContext(deps, run, 'callback-token', secretNames),
    },
    trigger,
  );
}
