import { z } from '@hono/zod-openapi';
import { ApiError } from '../../http/errors';
import { Undeliverable, type AnyTriggerKind, type TriggerDefinition, type TriggerKind } from '../trigger-kind';
import { pullRequestTriggerKind } from './pull-request';
import { PullRequestTrigger } from './pull-request-trigger';
import { WebhookTrigger, webhookTriggerKind } from './webhook';

/**
 * The registry of trigger kinds (src/runs/trigger-kind.ts has the contract).
 * Everything that depends on a trigger's type asks here: the definition's
 * schema, how a response shows it, whether a run of it can be triggered
 * (501 not_implemented otherwise) and delivered.
 *
 * A new kind is one file beside these — its schema and its TriggerKind —
 * and its entries below: in the definitions the API accepts, and registered.
 */

/** Every trigger definition the API accepts (DECISIONS §4): one variant per kind. */
export const TriggerDefinitions = z.discriminatedUnion('type', [WebhookTrigger, PullRequestTrigger]);
export type TriggerDefinitions = z.output<typeof TriggerDefinitions>;

/** The types of TriggerDefinitions, as the API names them (an available action's `triggerType`). */
export const TriggerType = z.enum([webhookTriggerKind.type, pullRequestTriggerKind.type]);

const kinds = new Map<string, AnyTriggerKind>();

/**
 * Adds a kind to the registry: the built-in ones below, or a kind of a test's
 * own (test/node/run-seam.test.ts). A type registered twice is refused.
 */
export function registerTriggerKind(kind: AnyTriggerKind): void {
  if (kinds.has(kind.type)) throw new Error(`a trigger kind "${kind.type}" is registered already`);
  kinds.set(kind.type, kind);
}

registerTriggerKind(webhookTriggerKind);
registerTriggerKind(pullRequestTriggerKind);

/** The kind that carries new runs of `type`; 501 not_implemented when this server does not run it. */
export function triggerableKind(type: string): TriggerKind {
  const kind = kinds.get(type);
  if (!kind) throw new ApiError('not_implemented', `"${type}" triggers are not available on this server`);
  if ('unavailable' in kind) throw new ApiError('not_implemented', kind.unavailable);
  return kind;
}

/** The kind that delivers a run of `type`; Undeliverable (the run fails) when this server does not run it. */
export function deliverableKind(type: string): TriggerKind {
  const kind = kinds.get(type);
  if (!kind) throw new Undeliverable(`"${type}" triggers are not available on this server`);
  if ('unavailable' in kind) throw new Undeliverable(kind.unavailable);
  return kind;
}

/** The kind of a stored run or trigger, if this server knows it (its `complete`, for one). */
export const knownKind = (type: string): AnyTriggerKind | undefined => kinds.get(type);

/**
 * A stored trigger as responses show it (its kind's redaction). A trigger of a
 * kind this server does not know shows its type only: nothing in it can be
 * vouched for as not a credential.
 */
export function redactTrigger(trigger: TriggerDefinition): TriggerDefinition {
  const kind = kinds.get(trigger.type);
  return kind ? kind.redact(trigger) : { type: trigger.type };
}
