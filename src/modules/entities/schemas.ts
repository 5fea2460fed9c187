import { z } from '@hono/zod-openapi';
import { DateTimeInput, Timestamp } from '../../http/openapi';
import { ResourceName } from '../names';

/** The Entity response (SPEC Resources, Entity): exactly these fields. */
export const Entity = z
  .object({
    id: z.uuid(),
    entityTypeName: z.string(),
    name: z.string(),
    state: z.string(),
    properties: z.record(z.string(), z.unknown()),
    labels: z.record(z.string(), z.string()),
    lastSyncedAt: Timestamp.nullable(),
    syncSource: z.string().nullable(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
    orgId: z.uuid(),
    projectId: z.uuid(),
    envId: z.uuid(),
  })
  .openapi('Entity');
export type Entity = z.infer<typeof Entity>;

export const EnvParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
  envName: z.string().min(1).openapi({ description: 'Environment name', example: 'default' }),
});

export const EntityParams = EnvParams.extend({
  name: z.string().min(1).openapi({ description: 'Entity name (URL-encode `/` and `:`)', example: 'web-1' }),
});

export const EntityMetricParams = EntityParams.extend({
  metricName: z.string().min(1).openapi({ description: 'A metric declared by the entity type', example: 'cpu' }),
});

/**
 * Path segments under `ENV/entities/` that are routes of their own: an entity
 * of that name could not be read back by `GET ENV/entities/{name}`, so the
 * names are refused on create and rename (docs/decisions.md).
 */
export const RESERVED_ENTITY_NAMES = new Set(['metrics', 'stream']);

export const EntityName = ResourceName.refine((name) => !RESERVED_ENTITY_NAMES.has(name), {
  message: 'is reserved: ENV/entities/metrics and ENV/entities/stream are routes',
}).openapi({ example: 'web-1' });

/** Label keys may not contain `:`, the separator of the list filter `label=k:v`. */
export const Labels = z
  .record(
    z
      .string()
      .min(1)
      .max(128)
      .refine((key) => !key.includes(':'), { message: 'label keys may not contain ":" (the label=k:v filter separator)' }),
    z.string().max(1024),
  )
  .openapi({ description: 'String labels; filter with `label=k:v`', example: { team: 'payments' } });

export const Properties = z
  .record(z.string(), z.unknown())
  .openapi({ description: "Values of the entity type's properties", example: { size: 'large' } });

export const EntityCreate = z
  .strictObject({
    kind: z.literal('Entity'),
    entityType: ResourceName,
    name: EntityName,
    state: z.string().min(1).optional().openapi({ description: "Defaults to the type's initialState" }),
    properties: Properties.optional(),
    labels: Labels.optional(),
    syncSource: z.string().min(1).max(256).optional(),
    lastSyncedAt: DateTimeInput.optional(),
  })
  .openapi('EntityCreate');
export type EntityCreate = z.infer<typeof EntityCreate>;

export const EntityUpdate = z
  .strictObject({
    name: EntityName.optional().openapi({ description: 'Renames the entity' }),
    state: z.string().min(1).optional(),
    properties: Properties.optional().openapi({ description: 'Replaces all properties; defaults are filled again' }),
    labels: Labels.optional().openapi({ description: 'Replaces all labels' }),
  })
  .openapi('EntityUpdate');
export type EntityUpdate = z.infer<typeof EntityUpdate>;

export const EntityDeleted = z.object({ deleted: z.literal(true), name: z.string() }).openapi('EntityDeleted');

export const MAX_PAGE_SIZE = 1000;
export const DEFAULT_PAGE_SIZE = 100;

export const EntityListQuery = z.object({
  entityType: z.string().min(1).optional().openapi({ description: 'Only entities of this type' }),
  state: z.string().min(1).optional(),
  label: z
    .union([z.string(), z.array(z.string())])
    .optional()
    .openapi({ description: '`key:value`; repeat for several (all must match)', example: 'team:payments' }),
  cell: z.string().min(1).optional().openapi({ description: 'Only direct members of this cell (404 when it does not exist)' }),
  namePrefix: z.string().min(1).max(128).optional(),
  syncSource: z.string().min(1).optional(),
  updatedSince: DateTimeInput.optional().openapi({ description: 'Only entities updated at or after this instant' }),
  limit: z.coerce
    .number()
    .int()
    .min(1)
    .max(MAX_PAGE_SIZE)
    .default(DEFAULT_PAGE_SIZE)
    .openapi({ description: `Page size, 1–${MAX_PAGE_SIZE}`, example: DEFAULT_PAGE_SIZE }),
  cursor: z.string().min(1).optional().openapi({ description: 'The X-Next-Cursor of the previous page, unchanged' }),
});
export type EntityListQuery = z.infer<typeof EntityListQuery>;

export const MAX_BATCH_METRIC_NAMES = 500;

export const BatchMetricsQuery = z.object({
  names: z
    .string()
    .min(1)
    .openapi({ description: `Comma-separated entity names, at most ${MAX_BATCH_METRIC_NAMES}`, example: 'web-1,web-2' }),
  metrics: z.string().min(1).optional().openapi({ description: 'Comma-separated metric names; all when omitted', example: 'cpu,mem' }),
});

export const MetricValues = z.record(z.string(), z.number()).openapi('EntityMetricValues', { example: { cpu: 0.42 } });

export const BatchMetricValues = z
  .record(z.string(), MetricValues)
  .openapi('EntityBatchMetricValues', { example: { 'web-1': { cpu: 0.42 }, 'web-2': {} } });

export const MetricSet = z.strictObject({ value: z.number() }).openapi('EntityMetricSet');

export const MetricValue = z
  .object({ entityName: z.string(), metric: z.string(), value: z.number(), updatedAt: Timestamp })
  .openapi('EntityMetricValue');

export const SyncStamp = z
  .strictObject({
    source: z.string().min(1).max(256).openapi({ example: 'terraform' }),
    observedAt: DateTimeInput.optional().openapi({ description: 'When the source saw the entity in sync; defaults to now' }),
  })
  .openapi('EntitySyncStamp');

export const SyncStampResult = z
  .object({ name: z.string(), lastSyncedAt: Timestamp, syncSource: z.string().nullable() })
  .openapi('EntitySyncStampResult');

export const DRIFT_STATUSES = ['untracked', 'never-synced', 'in-sync', 'stale'] as const;

export const EntityDriftStatus = z
  .object({
    name: z.string(),
    driftStatus: z.enum(DRIFT_STATUSES),
    lastSyncedAt: Timestamp.nullable(),
    syncSource: z.string().nullable(),
    message: z.string(),
  })
  .openapi('EntityDriftStatus');
