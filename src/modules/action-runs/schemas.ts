import { z } from '@hono/zod-openapi';
import { DateTimeInput, Timestamp } from '../../http/openapi';
import { RUN_STATUSES } from '../../db/schema/runs';
import { EntityParams, EnvParams } from '../entities/schemas';

/** Action runs (SPEC ActionRun and ActionRunListRow; DECISIONS §4). */

export const RunStatus = z.enum(RUN_STATUSES).openapi('ActionRunStatus');

/** One delivery attempt, as kept for the run (docs/decisions.md, Runs). */
export const RunAttempt = z
  .object({
    attempt: z.number().int().openapi({ description: 'From 1' }),
    startedAt: Timestamp,
    latencyMs: z.number().int(),
    httpStatus: z.number().int().nullable().openapi({ description: "The receiver's status; null when none came" }),
    outcome: z.enum(['delivered', 'retry', 'failed']),
    error: z.string().nullable(),
  })
  .openapi('ActionRunAttempt');

const runFields = {
  id: z.uuid(),
  actionName: z.string(),
  entityId: z.uuid().nullable(),
  status: RunStatus,
  parameters: z.record(z.string(), z.unknown()),
  recommendations: z.record(z.string(), z.unknown()),
  triggeredBy: z.string(),
  createdAt: Timestamp,
  startedAt: Timestamp.nullable(),
  completedAt: Timestamp.nullable(),
  error: z.string().nullable().openapi({ description: 'Delivery failures start with `[delivery]`' }),
  output: z.record(z.string(), z.unknown()).nullable(),
  // a pull-request run's pull request (DECISIONS §8): present on pull-request runs only
  repo: z.string().optional().openapi({ description: 'Pull-request runs: the repository, `owner/name` (lowercased)', example: 'acme/infra' }),
  prNumber: z.number().int().nullable().optional().openapi({ description: 'Pull-request runs: the pull request, once opened (null before)' }),
  prUrl: z.string().nullable().optional().openapi({ description: "Pull-request runs: the pull request's page" }),
  headSha: z.string().nullable().optional().openapi({ description: 'Pull-request runs: the head commit when the pull request was opened' }),
};

export const ActionRun = z
  .object({
    ...runFields,
    attempts: z.array(RunAttempt).openapi({ description: 'Every delivery attempt, oldest first' }),
  })
  .openapi('ActionRun');
export type ActionRun = z.infer<typeof ActionRun>;

export const ActionRunListRow = z
  .object({
    ...runFields,
    entityName: z.string().nullable().openapi({ description: "The entity's name; null once it is deleted" }),
    operationEntityName: z
      .string()
      .nullable()
      .openapi({ description: 'The name of the entity the run was triggered on, kept after the entity is deleted' }),
  })
  .openapi('ActionRunListRow');
export type ActionRunListRow = z.infer<typeof ActionRunListRow>;

export const TriggerRequest = z
  .strictObject({
    parameters: z.record(z.string(), z.unknown()).optional().openapi({ description: "Checked against the action's parameter definitions" }),
    recommendations: z.record(z.string(), z.unknown()).optional(),
  })
  .openapi('ActionTriggerRequest');
export type TriggerRequest = z.infer<typeof TriggerRequest>;

export const IDEMPOTENCY_KEY_MAX = 255;

export const TriggerHeaders = z.object({
  'idempotency-key': z
    .string()
    .min(1)
    .max(IDEMPOTENCY_KEY_MAX)
    .optional()
    .openapi({ description: 'A retried trigger with the same key (per environment) returns the same run' }),
});

export const CallbackRequest = z
  .discriminatedUnion('status', [
    z.strictObject({ status: z.literal('succeeded'), output: z.record(z.string(), z.unknown()).optional() }),
    z.strictObject({
      status: z.literal('failed'),
      error: z
        .string()
        .min(1)
        .max(10_000)
        .refine((error) => !error.startsWith('[delivery]'), { message: 'must not start with "[delivery]", which marks delivery failures' }),
      output: z.record(z.string(), z.unknown()).optional(),
    }),
  ])
  .openapi('ActionRunCallback');
export type CallbackRequest = z.infer<typeof CallbackRequest>;

export const DEFAULT_RUN_PAGE = 50;
export const MAX_RUN_PAGE = 500;

export const RunListQuery = z.object({
  status: z
    .union([RunStatus, z.array(RunStatus)])
    .optional()
    .openapi({ description: 'Repeat for several' }),
  entity: z.string().min(1).optional().openapi({ description: 'Entity name (runs triggered on it)' }),
  action: z.string().min(1).optional().openapi({ description: 'Action name' }),
  since: DateTimeInput.optional().openapi({ description: 'Only runs created at or after this instant' }),
  limit: z.coerce.number().int().min(1).max(MAX_RUN_PAGE).default(DEFAULT_RUN_PAGE),
  cursor: z.string().min(1).optional().openapi({ description: 'The X-Next-Cursor of the previous page, unchanged' }),
});
export type RunListQuery = z.infer<typeof RunListQuery>;

export const RunParams = EnvParams.extend({ id: z.string().min(1).openapi({ description: 'Action run id' }) });

export const TriggerParams = EntityParams.extend({
  actionName: z.string().min(1).openapi({ description: 'Action name', example: 'restart' }),
});
