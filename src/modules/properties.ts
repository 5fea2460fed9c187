import { z } from '@hono/zod-openapi';
import type { ErrorDetail } from '../http/errors';
import { ResourceName } from './names';

/**
 * Property definitions (DECISIONS §2), shared by entity types, relationship
 * types and action parameters, and the validation of values against them.
 */
export const PROPERTY_TYPES = ['string', 'number', 'integer', 'boolean', 'object', 'array'] as const;
export type PropertyType = (typeof PROPERTY_TYPES)[number];

/** What every element of an `array` property must be (docs/decisions.md, "Array items"). */
export const PropertyItems = z
  .strictObject({
    type: z.enum(PROPERTY_TYPES),
    enum: z.array(z.unknown()).min(1).optional(),
  })
  .superRefine((items, ctx) => {
    items.enum?.forEach((value, i) => {
      if (!matchesType(items.type, value)) ctx.addIssue({ code: 'custom', path: ['enum', i], message: `must be of type ${items.type}` });
    });
  })
  .openapi('PropertyItems', { example: { type: 'string' } });
export type PropertyItems = z.infer<typeof PropertyItems>;

export const PropertyDefinition = z
  .strictObject({
    name: ResourceName,
    type: z.enum(PROPERTY_TYPES),
    required: z.boolean().optional(),
    default: z.unknown().optional(),
    enum: z.array(z.unknown()).min(1).optional(),
    items: PropertyItems.optional().openapi({ description: 'Only for `type: array`: the type (and allowed values) of every element' }),
    description: z.string().max(1000).optional(),
  })
  .superRefine((definition, ctx) => {
    if (definition.items !== undefined && definition.type !== 'array') {
      ctx.addIssue({ code: 'custom', path: ['items'], message: 'is only for properties of type array' });
    }
    if (definition.items !== undefined && Array.isArray(definition.default)) {
      itemProblems(definition.items, definition.default).forEach(({ index, message }) =>
        ctx.addIssue({ code: 'custom', path: ['default', index], message }),
      );
    }
    if (definition.default !== undefined && !matchesType(definition.type, definition.default)) {
      ctx.addIssue({ code: 'custom', path: ['default'], message: `must be of type ${definition.type}` });
    }
    definition.enum?.forEach((value, i) => {
      if (!matchesType(definition.type, value)) {
        ctx.addIssue({ code: 'custom', path: ['enum', i], message: `must be of type ${definition.type}` });
      }
    });
  })
  .openapi('PropertyDefinition');
export type PropertyDefinition = z.infer<typeof PropertyDefinition>;

/** Definitions with unique names. */
export const PropertyDefinitions = z.array(PropertyDefinition).superRefine((definitions, ctx) => {
  const seen = new Set<string>();
  definitions.forEach((definition, i) => {
    if (seen.has(definition.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate property "${definition.name}"` });
    seen.add(definition.name);
  });
});

export function matchesType(type: PropertyType, value: unknown): boolean {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    case 'array':
      return Array.isArray(value);
  }
}

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** The elements of `values` that `items` refuses, by index. */
function itemProblems(items: PropertyItems, values: unknown[]): { index: number; message: string }[] {
  const problems: { index: number; message: string }[] = [];
  values.forEach((value, index) => {
    if (!matchesType(items.type, value)) problems.push({ index, message: `must be of type ${items.type}` });
    else if (items.enum && !items.enum.some((allowed) => sameJson(allowed, value))) {
      problems.push({ index, message: `must be one of ${JSON.stringify(items.enum)}` });
    }
  });
  return problems;
}

/**
 * Checks `values` against `definitions`: wrong type, missing required, value
 * outside `enum`, or an undeclared name are each one detail. With
 * `fillDefaults` (create), absent properties that have a default get it.
 * Returns the values to store, or the problems.
 */
export function validateProperties(
  definitions: PropertyDefinition[],
  values: Record<string, unknown>,
  options: { fillDefaults: boolean; path?: string },
): { ok: true; values: Record<string, unknown> } | { ok: false; details: ErrorDetail[] } {
  const path = options.path ?? 'properties';
  const details: ErrorDetail[] = [];
  const byName = new Map(definitions.map((definition) => [definition.name, definition]));
  const out: Record<string, unknown> = { ...values };
  for (const [name, value] of Object.entries(values)) {
    const definition = byName.get(name);
    if (!definition) {
      details.push({ path: `${path}.${name}`, message: 'is not declared by the type' });
    } else if (value === null && !definition.required) {
      delete out[name];
    } else if (!matchesType(definition.type, value)) {
      details.push({ path: `${path}.${name}`, message: `must be of type ${definition.type}` });
    } else if (definition.enum && !definition.enum.some((allowed) => sameJson(allowed, value))) {
      details.push({ path: `${path}.${name}`, message: `must be one of ${JSON.stringify(definition.enum)}` });
    } else if (definition.items && Array.isArray(value)) {
      for (const { index, message } of itemProblems(definition.items, value)) details.push({ path: `${path}.${name}.${index}`, message });
    }
  }
  for (const definition of definitions) {
    if (out[definition.name] !== undefined) continue;
    if (options.fillDefaults && definition.default !== undefined) out[definition.name] = definition.default;
    else if (definition.required) details.push({ path: `${path}.${definition.name}`, message: 'is required' });
  }
  return details.length > 0 ? { ok: false, details } : { ok: true, values: out };
}
