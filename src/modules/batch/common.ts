import { sql } from 'drizzle-orm';
import { ApiError, type ErrorDetail } from '../../http/errors';
import type { Clock } from '../../platform';
import { TransitionConstraint } from '../catalog-items';

/** What the batch endpoint's entity and relationship halves share (./service.ts, ./relationships.ts). */

export type Json = Record<string, unknown>;

export interface Target {
  orgId: string;
  projectId: string;
  envId: string;
  source: string;
  observedAt: Date;
  now: Date;
  clock: Clock;
  /** This attempt's changed environments: handed to the request once it committed. */
  notes: Set<string>;
}

// --- comparison and validation ----------------------------------------------------

/** Equal JSON values: arrays in order, objects by their keys whatever the order (jsonb keeps its own). */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((item, i) => sameJson(item, b[i]));
  if (!a || !b || typeof a !== 'object' || typeof b !== 'object' || Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((key) => Object.hasOwn(b, key) && sameJson((a as Json)[key], (b as Json)[key]));
}

/** The transition rule of entity and relationship types: once any is declared, only listed changes; staying is none. */
export function transitionAllowed(constraints: unknown[], from: string, to: string): boolean {
  if (from === to) return true;
  const transitions = constraints.flatMap((item) => {
    const parsed = TransitionConstraint.safeParse(item);
    return parsed.success ? [parsed.data] : [];
  });
  return transitions.length === 0 || transitions.some((t) => t.from === from && t.to.includes(to));
}

export const ownerOf = (syncSource: string | null) => (syncSource === null ? 'created by hand' : `owned by "${syncSource}"`);

export function refuse(code: 'validation_failed' | 'transition_not_allowed' | 'constraint_violation' | 'cardinality_violation', what: string, details: ErrorDetail[]): never {
  const shown = details.slice(0, 5).map((d) => `${d.path} ${d.message}`).join('; ');
  const more = details.length > 5 ? ` (and ${details.length - 5} more)` : '';
  throw new ApiError(code, `${what}, nothing was written: ${shown}${more}`, details);
}

/** A JSON array of texts as a set for `in (...)`: one parameter, however many names. */
export const textsIn = (values: string[]) => sql`(select jsonb_array_elements_text(${JSON.stringify(values)}::jsonb))`;
