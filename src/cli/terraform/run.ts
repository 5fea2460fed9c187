import { readFile } from 'node:fs/promises';
import { CellplaneError } from '../../sdk';
import {
  mapState,
  planEntityTypes,
  type DesiredRelationship,
  type EntityTypeView,
  type SkippedProperty,
} from './mapping';
import {
  chunk,
  classifyLocally,
  ImportRefusedError,
  MAX_ENTITIES_PER_REQUEST,
  MAX_RELATIONSHIPS_PER_REQUEST,
  MAX_REQUEST_BYTES,
  namePrefixes,
  ownedRelationships,
  planEntities,
  planRelationships,
  type DeletionCheck,
  type EntityOutcome,
  type InvalidEntity,
  type PreparedEntity,
} from './plan';
import { fetchRemoteState } from './remote';
import { parseState, StateFormatError, type TerraformState } from './state';
import type { BatchRequest, BatchResult, EntityConflict, ImportTarget, StoredEntity, StoredRelationship } from './target';

/**
 * `cellplane import terraform`: the whole import, from a state file or a
 * Terraform Cloud workspace to the catalog, through `POST ENV/batch`.
 * Order: read and map the state; read what the project has and what the
 * source owns; plan, and refuse above the deletion limit before anything
 * changes; write entity types, relationship types, entities, relationships,
 * then deletes. A dry run writes nothing (docs/terraform-import.md).
 */

export { ImportRefusedError } from './plan';
export { RemoteStateError } from './remote';
export { StateFormatError } from './state';

/** The options cannot work together (the CLI exits 2, a usage error). */
export class ImportUsageError extends Error {
  override readonly name = 'ImportUsageError';
}

export type ImportPhase = 'read' | 'scan' | 'entity-types' | 'relationship-types' | 'entities' | 'relationships' | 'deletes';

export interface ImportOptions {
  /** `--state <file>`. */
  statePath?: string;
  /** `--workspace <org>/<name>`. */
  workspace?: string;
  /** `--hostname <host[:port]>`. */
  hostname?: string;
  dryRun?: boolean;
  /** `--max-delete N`: the most entities this import may delete (default 10 % of what the source owns). */
  maxDelete?: number;
  /** `--force`: no deletion limit. */
  force?: boolean;
}

export interface ImportDeps {
  target: ImportTarget;
  /** Environment variables for remote state (TF_TOKEN_*, SERVICE_TFC_*); process.env in the CLI. */
  env?: Record<string, string | undefined>;
  /** Warnings for people (the custom-host warning): stderr in the CLI. */
  warn?: (message: string) => void;
  /** `(phase, done, total)`; total 0 when not known yet. `read` ends with done = total = the managed instances. */
  onProgress?: (phase: ImportPhase, done: number, total: number) => void;
  /** Fetch for the remote-state host (tests, proxies). */
  fetch?: typeof globalThis.fetch;
  homeDir?: string;
  now?: () => Date;
  /** A state already parsed (the benchmark), instead of statePath or workspace. */
  state?: TerraformState;
}

export interface ImportReport {
  source: string;
  lineage: string;
  serial: number;
  terraformVersion: string;
  dryRun: boolean;
  from: { file: string } | { workspace: string; host: string } | { state: 'given' };
  observedAt: string;
  /** Managed resources and their instances in the state; data-source instances are skipped. */
  resources: number;
  instances: number;
  dataSourceInstancesSkipped: number;
  /** In a dry run: the types that would be created or extended. */
  entityTypes: { created: string[]; extended: { name: string; added: string[] }[] };
  relationshipTypes: { created: string[]; unusable: { name: string; reason: string }[] };
  entities: {
    created: string[];
    updated: string[];
    unchanged: number;
    deleted: string[];
    /** Deletes of entities already gone when the request ran. */
    alreadyGone: number;
    conflicts: (EntityConflict & { address: string | null })[];
    invalid: InvalidEntity[];
  };
  relationships: { created: number; updated: number; unchanged: number; deleted: number; skipped: number; conflicts: number };
  /** Attribute values not stored as properties, per type and property. */
  skippedProperties: SkippedProperty[];
  deletion: DeletionCheck;
}

async function loadState(options: ImportOptions, deps: ImportDeps): Promise<{ state: TerraformState; from: ImportReport['from'] }> {
  if (deps.state) return { state: deps.state, from: { state: 'given' } };
  if (options.statePath && options.workspace) throw new ImportUsageError('pass either --state <file> or --workspace <org>/<name>, not both');
  if (options.statePath) {
    let text: string;
    try {
      text = await readFile(options.statePath, 'utf8');
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new StateFormatError(
        code === 'ENOENT'
          ? `state file ${options.statePath} does not exist: pass the path of terraform.tfstate (or run \`terraform state pull > state.json\`)`
          : `cannot read state file ${options.statePath} (${code ?? 'error'})`,
      );
    }
    return { state: parseState(text, options.statePath), from: { file: options.statePath } };
  }
  if (options.workspace) {
    const state = await fetchRemoteState({
      workspace: options.workspace,
      hostname: options.hostname,
      env: deps.env ?? {},
      warn: deps.warn ?? (() => {}),
      fetch: deps.fetch,
      homeDir: deps.homeDir,
    });
    return { state, from: { workspace: state.workspace, host: state.host } };
  }
  throw new ImportUsageError('pass --state <file> or --workspace <org>/<name>');
}

async function collect<T>(items: AsyncIterable<T>, onItem?: (count: number) => void): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) {
    out.push(item);
    if (out.length % 1000 === 0) onItem?.(out.length);
  }
  return out;
}

/** Codes with which the batch endpoint refuses items it names in `details` (`entities.3.properties.x`). */
const ITEM_REFUSALS = new Set(['validation_failed', 'constraint_violation', 'cardinality_violation', 'transition_not_allowed']);

/**
 * Sends one chunk. When the server refuses items of it by index (an
 * existing type's rule this client could not check, a unique value another
 * entity holds), those items are reported through `refused` and the rest is
 * sent again, so one bad resource does not stop the import. A refusal that
 * names no item is thrown.
 */
async function sendChunk<T>(
  items: T[],
  field: 'entities' | 'relationships',
  send: (items: T[]) => Promise<BatchResult>,
  refused: (item: T, message: string) => void,
): Promise<BatchResult | undefined> {
  let remaining = items;
  while (remaining.length > 0) {
    try {
      return await send(remaining);
    } catch (error) {
      if (!(error instanceof CellplaneError) || !ITEM_REFUSALS.has(error.code) || !error.details?.length) throw error;
      const messages = new Map<number, string[]>();
      for (const detail of error.details) {
        const match = new RegExp(`^${field}\\.(\\d+)(?:\\.(.*))?$`).exec(detail.path ?? '');
        if (!match || Number(match[1]) >= remaining.length) throw error;
        const list = messages.get(Number(match[1])) ?? [];
        list.push(`${match[2] ? `${match[2]} ` : ''}${detail.message}`);
        messages.set(Number(match[1]), list);
      }
      remaining.forEach((item, i) => {
        const found = messages.get(i);
        if (found) refused(item, found.join('; '));
      });
      remaining = remaining.filter((_, i) => !messages.has(i));
    }
  }
  return undefined;
}

/**
 * How many batch requests are in flight at once: one request's server work
 * overlaps the next one's serialization and transfer. Chunks of one phase
 * are independent (distinct names, one source), so their order does not matter.
 */
export const REQUESTS_IN_FLIGHT = 2;

/** `work` on every item, at most `limit` at a time; the results in item order. The first failure is thrown once all have settled. */
async function inParallel<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async () => {
    while (failure === undefined && next < items.length) {
      const index = next++;
      try {
        results[index] = await work(items[index]!);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.error;
  return results;
}

const toItem = (entity: PreparedEntity): NonNullable<BatchRequest['entities']>[number] => ({
  entityType: entity.entityType,
  name: entity.name,
  properties: entity.properties,
  labels: entity.labels,
});

export async function importTerraform(options: ImportOptions, deps: ImportDeps): Promise<ImportReport> {
  const { target } = deps;
  const progress = deps.onProgress ?? (() => {});
  const dryRun = options.dryRun === true;
  if (options.maxDelete !== undefined && (!Number.isSafeInteger(options.maxDelete) || options.maxDelete < 0)) {
    throw new ImportUsageError(`--max-delete must be a non-negative integer, got ${options.maxDelete}`);
  }

  progress('read', 0, 0);
  const { state, from } = await loadState(options, deps);
  const mapped = mapState(state);
  // done = total = the managed instances: a progress display sizes itself on it
  progress('read', mapped.entities.length, mapped.entities.length);
  const { source } = mapped;
  const observedAt = (deps.now?.() ?? new Date()).toISOString();

  // what the project and the source have now
  progress('scan', 0, 0);
  const [types, relationshipTypes] = await Promise.all([target.entityTypes(), target.relationshipTypes()]);
  const typePlan = planEntityTypes(mapped, new Map(types.map((type): [string, EntityTypeView] => [type.name, type])));
  const owned = new Map<string, StoredEntity>();
  for await (const entity of target.ownedEntities(source)) {
    owned.set(entity.name, entity);
    if (owned.size % 1000 === 0) progress('scan', owned.size, 0);
  }
  const plan = planEntities(mapped, typePlan, owned, { maxDelete: options.maxDelete, force: options.force });
  if (plan.deletion.exceeded && !dryRun) throw new ImportRefusedError(source, plan.deletion);

  const relationshipTypesByName = new Map(relationshipTypes.map((type) => [type.name, type]));
  const relationshipTypesToCreate = [...mapped.relationshipTypes.values()].filter((spec) => !relationshipTypesByName.has(spec.name));
  const unusable: { name: string; reason: string }[] = [];
  for (const spec of mapped.relationshipTypes.values()) {
    const existing = relationshipTypesByName.get(spec.name);
    if (!existing) continue;
    if (existing.from !== spec.from || existing.to !== spec.to) {
      unusable.push({ name: spec.name, reason: `it links ${existing.from} to ${existing.to}, not ${spec.from} to ${spec.to}` });
    } else if (existing.cardinality !== 'many-to-many') {
      unusable.push({ name: spec.name, reason: `its cardinality is ${existing.cardinality}, not many-to-many` });
    }
  }

  // the source's relationships now: those of the dependsOn types whose `from` type the source has entities of
  const ownedTypes = new Set([...owned.values()].map((entity) => entity.entityTypeName));
  const ownedById = new Map([...owned.values()].map((entity) => [entity.id, entity.name]));
  const existingRelationships: DesiredRelationship[] = [];
  for (const type of relationshipTypes) {
    if (!type.name.startsWith('dependsOn.') || !ownedTypes.has(type.from)) continue;
    const stored: StoredRelationship[] = await collect(target.relationships(type.name));
    existingRelationships.push(...ownedRelationships(stored, ownedById));
  }
  progress('scan', owned.size, owned.size);

  const report: ImportReport = {
    source,
    lineage: mapped.lineage,
    serial: mapped.serial,
    terraformVersion: mapped.terraformVersion,
    dryRun,
    from,
    observedAt,
    resources: mapped.resourceCount,
    instances: mapped.entities.length,
    dataSourceInstancesSkipped: mapped.dataSourceInstances,
    entityTypes: { created: typePlan.create.map((type) => type.name), extended: typePlan.extend.map(({ body, added }) => ({ name: body.name, added })) },
    relationshipTypes: { created: relationshipTypesToCreate.map((spec) => spec.name), unusable },
    entities: { created: [], updated: [], unchanged: plan.unchanged.length, deleted: [], alreadyGone: 0, conflicts: [], invalid: plan.invalid },
    relationships: { created: 0, updated: 0, unchanged: 0, deleted: 0, skipped: 0, conflicts: 0 },
    skippedProperties: plan.skippedProperties,
    deletion: plan.deletion,
  };

  // catalog definitions: not written by a dry run, which reports them as "would create"
  if (!dryRun) {
    const total = typePlan.create.length + typePlan.extend.length;
    let done = 0;
    progress('entity-types', 0, total);
    for (const body of typePlan.create) {
      await target.createEntityType(body);
      progress('entity-types', ++done, total);
    }
    for (const { body } of typePlan.extend) {
      await target.replaceEntityType(body);
      progress('entity-types', ++done, total);
    }
    progress('relationship-types', 0, relationshipTypesToCreate.length);
    for (const [i, spec] of relationshipTypesToCreate.entries()) {
      await target.createRelationshipType(spec);
      progress('relationship-types', i + 1, relationshipTypesToCreate.length);
    }
  }

  // entities
  const entityTotal = mapped.entities.length;
  let entitiesDone = plan.unchanged.length + plan.invalid.length;
  progress('entities', entitiesDone, entityTotal);
  const outcome: EntityOutcome = { created: [], updated: [], unchanged: 0, conflicts: [] };
  const merge = (part: EntityOutcome) => {
    outcome.created.push(...part.created);
    outcome.updated.push(...part.updated);
    outcome.unchanged += part.unchanged;
    outcome.conflicts.push(...part.conflicts);
  };
  // a dry run cannot ask the server about entities of a type it has not written yet
  const pendingTypes = new Set([...report.entityTypes.created, ...report.entityTypes.extended.map((type) => type.name)]);
  const serverSide = dryRun ? plan.send.filter((entity) => !pendingTypes.has(entity.entityType)) : plan.send;
  const localSide = dryRun ? plan.send.filter((entity) => pendingTypes.has(entity.entityType)) : [];
  const entityResults = await inParallel(chunk(serverSide, MAX_ENTITIES_PER_REQUEST, MAX_REQUEST_BYTES, (entity) => entity.bytes), REQUESTS_IN_FLIGHT, async (part) => {
    const result = await sendChunk(
      part,
      'entities',
      (items) => target.batch({ source, observedAt, dryRun, entities: items.map(toItem) }),
      (entity, reason) => report.entities.invalid.push({ name: entity.name, address: entity.address, reason }),
    );
    entitiesDone += part.length;
    progress('entities', entitiesDone, entityTotal);
    return result;
  });
  for (const result of entityResults) {
    if (result) merge({ created: result.entities.created, updated: result.entities.updated, unchanged: result.entities.unchanged, conflicts: result.entities.conflicts });
  }
  if (localSide.length > 0) {
    const wanted = new Set(localSide.filter((entity) => !owned.has(entity.name)).map((entity) => entity.name));
    const others = new Map<string, StoredEntity>();
    for (const prefix of namePrefixes(wanted)) {
      for await (const entity of target.entitiesWithPrefix(prefix)) {
        if (wanted.has(entity.name) && entity.syncSource !== source) others.set(entity.name, entity);
      }
    }
    merge(classifyLocally(localSide, owned, others));
    entitiesDone += localSide.length;
    progress('entities', entitiesDone, entityTotal);
  }
  const addressOf = new Map(mapped.entities.map((entity) => [entity.name, entity.address]));
  report.entities.created = outcome.created;
  report.entities.updated = outcome.updated;
  report.entities.unchanged += outcome.unchanged;
  report.entities.conflicts = outcome.conflicts.map((conflict) => ({ ...conflict, address: addressOf.get(conflict.name) ?? null }));

  // relationships: only between entities that are the source's once the entity writes are done
  const conflicting = new Set(outcome.conflicts.map((conflict) => conflict.name));
  const present = new Set([...owned.keys(), ...outcome.created].filter((name) => !conflicting.has(name)));
  const relationshipPlan = planRelationships({
    desired: mapped.relationships,
    existing: existingRelationships,
    present,
    deleted: new Set(plan.deletes),
    unusableTypes: new Set(unusable.map((type) => type.name)),
  });
  const relationshipTotal = mapped.relationships.length;
  let relationshipsDone = relationshipPlan.unchanged + relationshipPlan.skipped;
  report.relationships.unchanged = relationshipPlan.unchanged;
  report.relationships.skipped = relationshipPlan.skipped;
  progress('relationships', relationshipsDone, relationshipTotal);
  if (dryRun) {
    // their ends may not exist yet, so the server cannot check them: the plan is the answer
    report.relationships.created = relationshipPlan.create.length;
    report.relationships.deleted = relationshipPlan.delete.length + relationshipPlan.cascaded;
    relationshipsDone += relationshipPlan.create.length;
  } else {
    await inParallel(chunk(relationshipPlan.create, MAX_RELATIONSHIPS_PER_REQUEST, MAX_REQUEST_BYTES), REQUESTS_IN_FLIGHT, async (part) => {
      const result = await sendChunk(
        part,
        'relationships',
        (items) => target.batch({ source, observedAt, relationships: items }),
        () => (report.relationships.skipped += 1),
      );
      if (result) {
        report.relationships.created += result.relationships.created;
        report.relationships.updated += result.relationships.updated;
        report.relationships.unchanged += result.relationships.unchanged;
        report.relationships.conflicts += result.relationships.conflicts.length;
      }
      relationshipsDone += part.length;
      progress('relationships', relationshipsDone, relationshipTotal);
    });
    for (const part of chunk(relationshipPlan.delete, MAX_RELATIONSHIPS_PER_REQUEST, MAX_REQUEST_BYTES)) {
      const result = await target.batch({ source, observedAt, deleteRelationships: part });
      report.relationships.deleted += result.relationships.deleted;
      report.relationships.conflicts += result.relationships.conflicts.length;
    }
    report.relationships.deleted += relationshipPlan.cascaded;
  }
  progress('relationships', relationshipTotal, relationshipTotal);

  // deletes last, so a failure before here leaves every entity of the state in place
  const deleteTotal = plan.deletes.length;
  progress('deletes', 0, deleteTotal);
  let deletesDone = 0;
  for (const part of chunk(plan.deletes, MAX_ENTITIES_PER_REQUEST, MAX_REQUEST_BYTES)) {
    const result = await target.batch({ source, observedAt, dryRun, deleteEntities: part });
    report.entities.deleted.push(...result.entities.deleted);
    report.entities.alreadyGone += result.entities.alreadyGone;
    report.entities.conflicts.push(...result.entities.conflicts.map((conflict) => ({ ...conflict, address: null })));
    deletesDone += part.length;
    progress('deletes', deletesDone, deleteTotal);
  }
  return report;
}
