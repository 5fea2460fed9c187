import { z } from '@hono/zod-openapi';
import { ResourceName } from './names';

/**
 * Item structures of the catalog (DECISIONS §2), shared by the modules that
 * define them and those that enforce them.
 */

export const MetricDefinition = z
  .strictObject({
    name: ResourceName,
    unit: z.string().max(64).optional(),
    min: z.number().optional(),
    max: z.number().optional(),
    capacity: z.number().positive().optional(),
  })
  .refine((m) => m.min === undefined || m.max === undefined || m.min <= m.max, { message: 'min must not exceed max', path: ['min'] })
  .openapi('MetricDefinition');
export type MetricDefinition = z.infer<typeof MetricDefinition>;

export const UniqueConstraint = z.strictObject({
  kind: z.literal('unique'),
  properties: z.array(ResourceName).min(1),
});

export const TransitionConstraint = z.strictObject({
  kind: z.literal('transition'),
  from: z.string().min(1),
  to: z.array(z.string().min(1)).min(1),
});

export const EntityTypeConstraint = z
  .discriminatedUnion('kind', [UniqueConstraint, TransitionConstraint])
  .openapi('EntityTypeConstraint');
export type EntityTypeConstraint = z.infer<typeof EntityTypeConstraint>;

export const SyncFreshness = z
  .strictObject({ maxAgeSeconds: z.number().int().positive() })
  .openapi('SyncFreshness');
export type SyncFreshness = z.infer<typeof SyncFreshness>;
export const DEFAULT_SYNC_MAX_AGE_SECONDS = 3600;

export const CARDINALITIES = ['one-to-one', 'one-to-many', 'many-to-one', 'many-to-many'] as const;
export type Cardinality = (typeof CARDINALITIES)[number];

/** Whether a relationship type allows at most one outgoing (from) / incoming (to) relationship per entity. */
export const cardinalityLimits = (cardinality: Cardinality) => ({
  oneOutgoing: cardinality === 'one-to-one' || cardinality === 'many-to-one',
  oneIncoming: cardinality === 'one-to-one' || cardinality === 'one-to-many',
});

export const CONSTRAINT_OPERATORS = ['eq', 'ne', 'in', 'notIn', 'exists', 'notExists', 'lt', 'lte', 'gt', 'gte'] as const;

/** Cell constraint and action condition item: `key` is state, labels.<k>, properties.<k> or metrics.<k>. */
export const CellConstraint = z
  .strictObject({
    key: z.string().regex(/^(state|(labels|properties|metrics)\.[^.].*)$/, {
      message: 'must be state, labels.<key>, properties.<key> or metrics.<key>',
    }),
    operator: z.enum(CONSTRAINT_OPERATORS),
    value: z.unknown().optional(),
  })
  .superRefine((c, ctx) => {
    const needsValue = c.operator !== 'exists' && c.operator !== 'notExists';
    if (needsValue && c.value === undefined) ctx.addIssue({ code: 'custom', path: ['value'], message: `is required for ${c.operator}` });
    if ((c.operator === 'in' || c.operator === 'notIn') && c.value !== undefined && !Array.isArray(c.value)) {
      ctx.addIssue({ code: 'custom', path: ['value'], message: `must be an array for ${c.operator}` });
    }
    if (['lt', 'lte', 'gt', 'gte'].includes(c.operator) && c.value !== undefined && typeof c.value !== 'number') {
      ctx.addIssue({ code: 'custom', path: ['value'], message: `must be a number for ${c.operator}` });
    }
  })
  .openapi('CellConstraint');
export type CellConstraint = z.infer<typeof CellConstraint>;

/** The facts a constraint is evaluated against. */
export interface ConstraintSubject {
  state: string;
  labels: Record<string, unknown>;
  properties: Record<string, unknown>;
  metrics: Record<string, number>;
}

function lookup(subject: ConstraintSubject, key: string): unknown {
  if (key === 'state') return subject.state;
  const dot = key.indexOf('.');
  const area = key.slice(0, dot) as 'labels' | 'properties' | 'metrics';
  return subject[area][key.slice(dot + 1)];
}

/** Evaluates one constraint; returns null when it holds, or the reason it does not. */
export function failedConstraint(constraint: CellConstraint, subject: ConstraintSubject): string | null {
  const actual = lookup(subject, constraint.key);
  const expected = constraint.value;
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  let holds: boolean;
  switch (constraint.operator) {
    case 'eq':
      holds = same(actual, expected);
      break;
    case 'ne':
      holds = !same(actual, expected);
      break;
    case 'in':
      holds = (expected as unknown[]).some((v) => same(actual, v));
      break;
    case 'notIn':
      holds = !(expected as unknown[]).some((v) => same(actual, v));
      break;
    case 'exists':
      holds = actual !== undefined && actual !== null;
      break;
    case 'notExists':
      holds = actual === undefined || actual === null;
      break;
    case 'lt':
      holds = typeof actual === 'number' && actual < (expected as number);
      break;
    case 'lte':
      holds = typeof actual === 'number' && actual <= (expected as number);
      break;
    case 'gt':
      holds = typeof actual === 'number' && actual > (expected as number);
      break;
    case 'gte':
      holds = typeof actual === 'number' && actual >= (expected as number);
      break;
  }
  if (holds) return null;
  const shown = constraint.value === undefined ? '' : ` ${JSON.stringify(constraint.value)}`;
  return `${constraint.key} ${constraint.operator}${shown} (is ${actual === undefined ? 'absent' : JSON.stringify(actual)})`;
}

/** Derived membership (DECISIONS §2): a selector, or the entities related to one entity. */
export const DerivedFrom = z
  .union([
    z.strictObject({
      selector: z
        .strictObject({
          labels: z.record(z.string(), z.string()).optional(),
          states: z.array(z.string().min(1)).optional(),
          properties: z.record(z.string(), z.unknown()).optional(),
        })
        .refine(
          (s) => Object.keys(s.labels ?? {}).length + (s.states ?? []).length + Object.keys(s.properties ?? {}).length > 0,
          { message: 'an empty selector would match every entity: give labels, states or properties' },
        ),
    }),
    z.strictObject({
      relationship: z.strictObject({
        type: ResourceName,
        entity: ResourceName,
        direction: z.enum(['outgoing', 'incoming']).optional(),
      }),
    }),
  ])
  .openapi('CellDerivedFrom');
