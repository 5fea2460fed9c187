import { hostileReason, resolveProperties, type DesiredRelationship, type MappedState, type SkippedProperty, type TypePlan } from './mapping';
import type { EntityConflict, StoredEntity, StoredRelationship } from './target';

/**
 * The diff between what the state wants and what the source owns now, and
 * the deletion threshold. Pure: the engine (run.ts) fetches, this decides.
 */

/** The batch endpoint's limits (docs/batch.md): items per request, and the request body (1 MiB) with room to spare. */
export const MAX_ENTITIES_PER_REQUEST = 1000;
export const MAX_RELATIONSHIPS_PER_REQUEST = 5000;
export const MAX_REQUEST_BYTES = 800_000;
/** An entity whose JSON is larger than this cannot be sent even alone within the 1 MiB body limit. */
export const MAX_ENTITY_BYTES = 1_000_000;

/** An entity ready to send: properties already resolved against its type's definitions. */
export interface PreparedEntity {
  name: string;
  address: string;
  entityType: string;
  properties: Record<string, unknown>;
  labels: Record<string, string>;
  /** Size of the entity as sent, for chunking. */
  bytes: number;
}

export interface InvalidEntity {
  name: string;
  address: string;
  reason: string;
}

export interface DeletionCheck {
  /** Entities the source owns that the state no longer has. */
  count: number;
  /** The most this import may delete: `--max-delete`, else 10 % of what the source owns (rounded down). */
  limit: number;
  /** How many entities the source owns before the import. */
  owned: number;
  forced: boolean;
  exceeded: boolean;
}

export interface EntityPlan {
  /** Entities whose stored form differs from the desired one, or that the source does not own (yet). */
  send: PreparedEntity[];
  /** Owned entities already exactly as desired: not sent at all. */
  unchanged: string[];
  /** Entities that cannot be written (their type's rules refuse the values); never sent, never deleted. */
  invalid: InvalidEntity[];
  skippedProperties: SkippedProperty[];
  deletes: string[];
  deletion: DeletionCheck;
}

/** The import would delete more than its limit: nothing has been changed. */
export class ImportRefusedError extends Error {
  override readonly name = 'ImportRefusedError';
  constructor(
    readonly source: string,
    readonly deletion: DeletionCheck,
  ) {
    super(
      `refusing to import: it would delete ${deletion.count} ${deletion.count === 1 ? 'entity' : 'entities'} that ${source} owns, ` +
        `more than the limit of ${deletion.limit} (${deletion.forced ? 'forced' : `--max-delete, default 10 % of the ${deletion.owned} it owns`}); ` +
        `nothing was changed. Check that this is the right state, then rerun with --max-delete ${deletion.count} or --force`,
    );
  }
}

/** JSON with object keys sorted, so two values that jsonb stores alike compare equal. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

export const sameStored = (stored: StoredEntity, desired: PreparedEntity): boolean =>
  stored.entityTypeName === desired.entityType &&
  canonicalJson(stored.properties) === canonicalJson(desired.properties) &&
  canonicalJson(stored.labels) === canonicalJson(desired.labels);

export function deletionCheck(count: number, owned: number, options: { maxDelete?: number; force?: boolean }): DeletionCheck {
  const limit = options.maxDelete ?? Math.floor(owned / 10);
  const forced = options.force === true;
  return { count, limit, owned, forced, exceeded: !forced && count > limit };
}

export function planEntities(
  mapped: MappedState,
  types: TypePlan,
  owned: Map<string, StoredEntity>,
  options: { maxDelete?: number; force?: boolean } = {},
): EntityPlan {
  const plan: EntityPlan = { send: [], unchanged: [], invalid: [], skippedProperties: [], deletes: [], deletion: deletionCheck(0, owned.size, options) };
  const skipped = new Map<string, SkippedProperty>();
  const desiredNames = new Set<string>();
  for (const entity of mapped.entities) {
    desiredNames.add(entity.name);
    const resolved = resolveProperties(entity, types.definitions.get(entity.entityType) ?? []);
    if (!resolved.ok) {
      plan.invalid.push({ name: entity.name, address: entity.address, reason: resolved.reason });
      continue;
    }
    for (const { property, reason } of resolved.skipped) {
      const key = `${entity.entityType}\u0000${property}\u0000${reason}`;
      const entry = skipped.get(key) ?? { entityType: entity.entityType, property, reason, count: 0 };
      entry.count += 1;
      skipped.set(key, entry);
    }
    const item = { entityType: entity.entityType, name: entity.name, properties: resolved.properties, labels: entity.labels };
    const json = JSON.stringify(item);
    const hostile = hostileReason(json, item);
    if (hostile) {
      plan.invalid.push({ name: entity.name, address: entity.address, reason: hostile });
      continue;
    }
    const bytes = Buffer.byteLength(json);
    const prepared: PreparedEntity = { ...item, address: entity.address, bytes };
    if (bytes > MAX_ENTITY_BYTES) {
      plan.invalid.push({ name: entity.name, address: entity.address, reason: `its properties are too large to send (${bytes} bytes of JSON; a request carries at most 1 MiB)` });
      continue;
    }
    const stored = owned.get(entity.name);
    if (stored && sameStored(stored, prepared)) plan.unchanged.push(entity.name);
    else plan.send.push(prepared);
  }
  plan.skippedProperties = [...mapped.skippedProperties, ...skipped.values()];
  for (const name of owned.keys()) if (!desiredNames.has(name)) plan.deletes.push(name);
  plan.deletes.sort();
  plan.deletion = deletionCheck(plan.deletes.length, owned.size, options);
  return plan;
}

export interface EntityOutcome {
  created: string[];
  updated: string[];
  unchanged: number;
  conflicts: EntityConflict[];
}

/** The conflict reason the batch endpoint gives for an entity the source does not own (docs/batch.md). */
export const conflictReason = (stored: Pick<StoredEntity, 'syncSource'>): string =>
  stored.syncSource === null ? 'created by hand' : `owned by "${stored.syncSource}"`;

/**
 * What the batch endpoint would answer, decided here: used by a dry run for
 * entities whose type does not exist yet, or lacks definitions the import
 * would add (the server cannot validate those before the type is written).
 * `others` holds the entities of the environment, not owned by the source,
 * that share a name with one of `entities`.
 */
export function classifyLocally(entities: PreparedEntity[], owned: Map<string, StoredEntity>, others: Map<string, StoredEntity>): EntityOutcome {
  const outcome: EntityOutcome = { created: [], updated: [], unchanged: 0, conflicts: [] };
  for (const entity of entities) {
    const mine = owned.get(entity.name);
    const other = others.get(entity.name);
    if (mine) {
      if (mine.entityTypeName !== entity.entityType) outcome.conflicts.push({ name: entity.name, reason: 'different entity type', syncSource: mine.syncSource });
      else if (sameStored(mine, entity)) outcome.unchanged += 1;
      else outcome.updated.push(entity.name);
    } else if (other) {
      outcome.conflicts.push({ name: entity.name, reason: conflictReason(other), syncSource: other.syncSource });
    } else {
      outcome.created.push(entity.name);
    }
  }
  return outcome;
}

/**
 * The first segment of every name, up to and including its first `.`
 * (`module.`, `aws_instance.`): listing the environment by these prefixes
 * finds every entity that could share a name with one of `names`.
 */
export function namePrefixes(names: Iterable<string>): string[] {
  const prefixes = new Set<string>();
  for (const name of names) {
    const dot = name.indexOf('.');
    prefixes.add(dot === -1 ? name : name.slice(0, dot + 1));
  }
  return [...prefixes].sort();
}

const relationshipKey = (relationship: DesiredRelationship) => `${relationship.relationshipType}\u0000${relationship.from}\u0000${relationship.to}`;

export interface RelationshipPlan {
  /** Desired, not there yet, both ends present as the source's entities. */
  create: DesiredRelationship[];
  /** Desired and already there. */
  unchanged: number;
  /** Desired, but an end is not the source's entity (a conflict, or an entity that could not be written), or its type cannot be used. */
  skipped: number;
  /** There, no longer desired, both ends staying: sent as deletes. */
  delete: DesiredRelationship[];
  /** There, no longer desired, an end being deleted: removed with the entity. */
  cascaded: number;
}

/**
 * `existing` are the relationships of the import's types whose both ends the
 * source owns, by name; `present` the entities that are the source's once the
 * entity writes are done; `deleted` the entities about to be deleted.
 */
export function planRelationships(input: {
  desired: DesiredRelationship[];
  existing: DesiredRelationship[];
  present: Set<string>;
  deleted: Set<string>;
  unusableTypes: Set<string>;
}): RelationshipPlan {
  const plan: RelationshipPlan = { create: [], unchanged: 0, skipped: 0, delete: [], cascaded: 0 };
  const there = new Set(input.existing.map(relationshipKey));
  const wanted = new Set<string>();
  for (const relationship of input.desired) {
    const key = relationshipKey(relationship);
    wanted.add(key);
    if (there.has(key)) plan.unchanged += 1;
    else if (input.unusableTypes.has(relationship.relationshipType) || !input.present.has(relationship.from) || !input.present.has(relationship.to)) plan.skipped += 1;
    else plan.create.push(relationship);
  }
  for (const relationship of input.existing) {
    if (wanted.has(relationshipKey(relationship))) continue;
    if (input.deleted.has(relationship.from) || input.deleted.has(relationship.to)) plan.cascaded += 1;
    else plan.delete.push(relationship);
  }
  return plan;
}

/** The relationships `stored` whose both ends are owned entities, by name. */
export function ownedRelationships(stored: StoredRelationship[], ownedById: Map<string, string>): DesiredRelationship[] {
  const out: DesiredRelationship[] = [];
  for (const relationship of stored) {
    const from = ownedById.get(relationship.fromEntityId);
    const to = ownedById.get(relationship.toEntityId);
    if (from !== undefined && to !== undefined) out.push({ relationshipType: relationship.relationshipTypeName, from, to });
  }
  return out;
}

/**
 * Splits `items` into requests of at most `maxItems` items and about
 * `maxBytes` of JSON each (an item larger than that goes alone).
 */
export function chunk<T>(items: T[], maxItems: number, maxBytes: number, sizeOf: (item: T) => number = (item) => Buffer.byteLength(JSON.stringify(item))): T[][] {
  const chunks: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = sizeOf(item) + 1;
    if (current.length > 0 && (current.length >= maxItems || bytes + size > maxBytes)) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}
