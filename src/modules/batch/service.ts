import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Tx } from '../../db/client';
import { databaseError } from '../../db/errors';
import { entities, entityTypes, entityUniqueKeys, relationshipTypes } from '../../db/schema';
import { ApiError, type ErrorDetail } from '../../http/errors';
import { completeRunsByEntityMove } from '../../runs/transitions';
import { recordEntityChanges, type EntityChangeRef } from '../../stream/change-log';
import { entityCells } from '../cells/membership';
import { notInFuture, uniqueKeysOf, type EntityRow } from '../entities/service';
import type { EntityTypeDefinition } from '../entity-types/service';
import { validateProperties } from '../properties';
import type { RelationshipTypeDefinition } from '../relationship-types/service';
import type { BatchRequest, BatchResult } from './schemas';
import { ownerOf, refuse, sameJson, textsIn, transitionAllowed, type Json, type Target } from './common';
import { validateRelationships, writeRelationships } from './relationships';

/**
 * `POST ENV/batch`: a sync source's entities and relationships, written set
 * by set (a few statements per request, whatever its size), with every
 * guarantee the single-entity writes keep (src/modules/entities/service.ts):
 *
 * - one transaction per request, and nothing written when any item is
 *   refused (400, 409): every check throws inside it;
 * - a change-log row per written entity, in that transaction, the counter
 *   taken last (recordEntityChanges); the environment is noted for the
 *   stream only once the transaction committed, and never for a dry run;
 * - ownership: an entity is updated or deleted only when its syncSource is
 *   the request's source; any other is a conflict, reported and left alone.
 *   An entity already as requested is not written at all (no updatedAt, no
 *   change row, no restamp), so a re-import of an unchanged state writes nothing;
 * - lock order as the single writes: the entity rows written (deletes FOR
 *   UPDATE, updates FOR NO KEY UPDATE, each set in name order so two batches
 *   cannot lock crosswise), then the types FOR SHARE, then the counter. Rows
 *   only compared are read unlocked: a row locked for an update is compared
 *   again once locked. The rows a create finds taken (a concurrent writer
 *   committed the name meanwhile) are locked after the types, and a deadlock
 *   that this or anything else causes is retried with the whole transaction.
 *
 * Nothing here queries `ctx.db` while the transaction is open (PGlite).
 */

/** Attempts of the whole transaction when Postgres chose it as a deadlock's victim or a type changed under it. */
const MAX_ATTEMPTS = 5;
/** Rounds of "create, find the name taken, lock what took it" for one request. */
const MAX_CREATE_ROUNDS = 3;
const DEADLOCK_DETECTED = '40P01';

/** A dry run's answer, carried out of the transaction by the rollback. */
class DryRunRollback extends Error {
  constructor(readonly result: BatchResult) {
    super('dry run');
  }
}

/** An entity type changed between the read the request validated against and its share lock: start again. */
class TypeChanged extends Error {}

export async function applyBatch(ctx: ServiceContext, ref: EnvRef, input: BatchRequest): Promise<BatchResult> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const { grants } = ctx.caller;
  if (grants.scope !== 'unrestricted' && grants.cellScopes.length > 0) {
    throw new ApiError(
      'cell_scope_violation',
      'a cell-scoped token cannot write through ENV/batch (it is for unscoped sync tools); write entity by entity through ENV/entities',
    );
  }
  const now = ctx.clock.now();
  const observedAt = input.observedAt === undefined ? now : notInFuture(ctx, input.observedAt, 'observedAt');
  for (let attempt = 1; ; attempt++) {
    const target: Target = {
      orgId: project.orgId,
      projectId: project.id,
      envId: env.id,
      source: input.source,
      observedAt,
      now,
      clock: ctx.clock,
      notes: new Set(),
    };
    try {
      const result = await ctx.db.transaction(async (tx) => {
        const written = await writeBatch(tx, target, input);
        if (input.dryRun) throw new DryRunRollback(written);
        return written;
      });
      for (const envId of target.notes) ctx.changedEnvironments.add(envId);
      return result;
    } catch (error) {
      if (error instanceof DryRunRollback) return error.result;
      const retry = error instanceof TypeChanged || databaseError(error)?.code === DEADLOCK_DETECTED;
      if (retry && attempt < MAX_ATTEMPTS) continue;
      throw error;
    }
  }
}

// --- reads -------------------------------------------------------------------------


async function entitiesByName(
  tx: Tx,
  envId: string,
  names: string[],
  lock?: 'update' | 'no key update',
): Promise<Map<string, EntityRow>> {
  if (names.length === 0) return new Map();
  const query = tx
    .select()
    .from(entities)
    .where(and(eq(entities.envId, envId), sql`${entities.name} in ${textsIn(names)}`))
    .orderBy(asc(entities.name));
  const rows = lock ? await query.for(lock) : await query;
  return new Map(rows.map((row) => [row.name, row]));
}

interface VersionedType {
  definition: EntityTypeDefinition;
  /** The row version read (see EntityTypeVersion in src/modules/entity-types/service.ts). */
  version: string;
}

async function entityTypesNamed(tx: Tx, projectId: string, names: string[], lock: boolean): Promise<Map<string, VersionedType>> {
  if (names.length === 0) return new Map();
  const query = tx
    .select({ row: entityTypes, xmin: sql<string>`${entityTypes}.xmin::text` })
    .from(entityTypes)
    .where(and(eq(entityTypes.projectId, projectId), inArray(entityTypes.name, names)))
    .orderBy(asc(entityTypes.name));
  const rows = lock ? await query.for('share') : await query;
  return new Map(rows.map(({ row, xmin }) => [row.name, { definition: row as EntityTypeDefinition, version: `${row.id}/${xmin}` }]));
}

async function relationshipTypesNamed(tx: Tx, projectId: string, names: string[]): Promise<Map<string, RelationshipTypeDefinition>> {
  if (names.length === 0) return new Map();
  // share-locked to commit, so a type update or delete waits for the relationships validated against it
  const rows = await tx
    .select()
    .from(relationshipTypes)
    .where(and(eq(relationshipTypes.projectId, projectId), inArray(relationshipTypes.name, names)))
    .orderBy(asc(relationshipTypes.name))
    .for('share');
  return new Map(rows.map((row) => [row.name, row as RelationshipTypeDefinition]));
}

// --- entities ----------------------------------------------------------------------

interface DesiredEntity {
  index: number;
  name: string;
  type: EntityTypeDefinition;
  /** As requested: undefined keeps an existing entity's state (a created one gets the type's initialState). */
  state: string | undefined;
  properties: Json;
  labels: Record<string, string>;
}

type Verdict =
  | { kind: 'create' }
  | { kind: 'unchanged' }
  | { kind: 'update'; row: EntityRow }
  | { kind: 'conflict'; reason: string; syncSource: string | null };

function classify(desired: DesiredEntity, row: EntityRow | undefined, source: string): Verdict {
  if (!row) return { kind: 'create' };
  if (row.syncSource !== source) return { kind: 'conflict', reason: ownerOf(row.syncSource), syncSource: row.syncSource };
  if (row.entityTypeName !== desired.type.name) return { kind: 'conflict', reason: 'different entity type', syncSource: row.syncSource };
  const same =
    (desired.state === undefined || desired.state === row.state) &&
    sameJson(desired.properties, row.properties) &&
    sameJson(desired.labels, row.labels);
  return same ? { kind: 'unchanged' } : { kind: 'update', row };
}

function validateEntities(items: NonNullable<BatchRequest['entities']>, types: Map<string, VersionedType>, details: ErrorDetail[]) {
  const desired: DesiredEntity[] = [];
  items.forEach((item, index) => {
    const type = types.get(item.entityType)?.definition;
    if (!type) {
      details.push({ path: `entities.${index}.entityType`, message: `entity type "${item.entityType}" does not exist in this project` });
      return;
    }
    let ok = true;
    if (item.state !== undefined && !type.states.includes(item.state)) {
      details.push({ path: `entities.${index}.state`, message: `is not one of entity type "${type.name}"'s states: ${type.states.join(', ')}` });
      ok = false;
    }
    const properties = validateProperties(type.properties, item.properties ?? {}, { fillDefaults: true, path: `entities.${index}.properties` });
    if (!properties.ok) {
      details.push(...properties.details);
      ok = false;
    }
    if (ok && properties.ok) {
      desired.push({ index, name: item.name, type, state: item.state, properties: properties.values, labels: item.labels ?? {} });
    }
  });
  return desired;
}

type Written = { id: string; name: string };

const writtenRows = (result: unknown) => (result as { rows: Written[] }).rows;

async function insertEntities(tx: Tx, t: Target, items: DesiredEntity[]): Promise<Written[]> {
  const rows = items.map((d) => ({
    name: d.name,
    entity_type_name: d.type.name,
    state: d.state ?? d.type.initialState,
    properties: d.properties,
    labels: d.labels,
  }));
  // in name order, as every batch inserts: two racing batches meet on their first common name, never crosswise
  const result = await tx.execute(sql`
    insert into ${entities} (org_id, project_id, env_id, entity_type_name, name, state, properties, labels,
                             last_synced_at, sync_source, created_at, updated_at)
    select ${t.orgId}::uuid, ${t.projectId}::uuid, ${t.envId}::uuid, r.entity_type_name, r.name, r.state, r.properties, r.labels,
           ${t.observedAt.toISOString()}::timestamptz, ${t.source}::text, ${t.now.toISOString()}::timestamptz, ${t.now.toISOString()}::timestamptz
    from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as r(name text, entity_type_name text, state text, properties jsonb, labels jsonb)
    order by r.name
    on conflict (env_id, name) do nothing
    returning id, name`);
  return writtenRows(result);
}

async function updateEntities(tx: Tx, t: Target, items: { desired: DesiredEntity; row: EntityRow }[]): Promise<Written[]> {
  if (items.length === 0) return [];
  const rows = items.map(({ desired, row }) => ({
    id: row.id,
    state: desired.state ?? row.state,
    properties: desired.properties,
    labels: desired.labels,
  }));
  // lastSyncedAt never moves backwards, as with a sync stamp
  const result = await tx.execute(sql`
    update ${entities}
    set state = u.state, properties = u.properties, labels = u.labels,
        last_synced_at = greatest(${entities.lastSyncedAt}, ${t.observedAt.toISOString()}::timestamptz),
        updated_at = ${t.now.toISOString()}::timestamptz
    from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as u(id uuid, state text, properties jsonb, labels jsonb)
    where ${entities.id} = u.id and ${entities.envId} = ${t.envId}::uuid
    returning ${entities.id}, ${entities.name}`);
  return writtenRows(result);
}

/**
 * Claims the unique keys of `written` (created, or updated with their old
 * keys released first). The primary key of entity_unique_keys decides, as
 * for a single write: a value held by another entity, or claimed twice in
 * this request, is 409 constraint_violation.
 */
async function claimUniqueKeys(tx: Tx, envId: string, written: { desired: DesiredEntity; id: string; released: boolean }[]) {
  const wanted = written
    .filter(({ desired }) => desired.type.constraints.some((c) => c.kind === 'unique'))
    .flatMap(({ desired, id }) =>
      // the properties stored are the validated ones
      uniqueKeysOf(desired.type, desired.properties).map((key) => ({ ...key, desired, entityId: id, typeName: desired.type.name })),
    );
  const release = written.filter((w) => w.released && w.desired.type.constraints.some((c) => c.kind === 'unique')).map((w) => w.id);
  if (release.length > 0) {
    await tx.delete(entityUniqueKeys).where(sql`${entityUniqueKeys.entityId} in (select jsonb_array_elements_text(${JSON.stringify(release)}::jsonb)::uuid)`);
  }
  if (wanted.length === 0) return;
  const rows = wanted.map((key) => ({
    entity_type_name: key.typeName,
    constraint_key: key.constraintKey,
    value_key: key.valueKey,
    entity_id: key.entityId,
  }));
  const result = await tx.execute<{ entity_id: string; constraint_key: string }>(sql`
    insert into ${entityUniqueKeys} (env_id, entity_type_name, constraint_key, value_key, entity_id)
    select ${envId}::uuid, k.entity_type_name, k.constraint_key, k.value_key, k.entity_id
    from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as k(entity_type_name text, constraint_key text, value_key text, entity_id uuid)
    order by k.entity_type_name, k.constraint_key, k.value_key
    on conflict do nothing
    returning entity_id, constraint_key`);
  const claimed = new Set((result as unknown as { rows: { entity_id: string; constraint_key: string }[] }).rows.map((r) => `${r.entity_id}/${r.constraint_key}`));
  const taken = wanted.filter((key) => !claimed.has(`${key.entityId}/${key.constraintKey}`));
  if (taken.length === 0) return;
  refuse(
    'constraint_violation',
    'unique values are taken',
    taken
      .sort((a, b) => a.desired.index - b.desired.index)
      .map((key) => ({
        path: `entities.${key.desired.index}.properties.${key.properties.join(',')}`,
        message: `another entity of type "${key.typeName}" in this environment (or of this request) has the same (${key.properties.join(', ')})`,
      })),
  );
}

interface EntityOutcome {
  created: Set<string>;
  updated: Set<string>;
  unchanged: Set<string>;
  conflicts: Map<string, { reason: string; syncSource: string | null }>;
  deleted: Set<string>;
  alreadyGone: number;
  deleteConflicts: Map<string, { reason: string; syncSource: string | null }>;
}

function refuseTransitions(moves: { desired: DesiredEntity; row: EntityRow }[]): void {
  const details = moves
    .filter(({ desired, row }) => desired.state !== undefined && !transitionAllowed(desired.type.constraints, row.state, desired.state))
    .map(({ desired, row }) => ({
      path: `entities.${desired.index}.state`,
      message: `entity type "${desired.type.name}" does not allow the transition ${row.state} → ${desired.state}`,
    }));
  if (details.length > 0) refuse('transition_not_allowed', 'state changes are not allowed', details);
}

// --- the request -------------------------------------------------------------------

async function writeBatch(tx: Tx, t: Target, input: BatchRequest): Promise<BatchResult> {
  const items = input.entities ?? [];
  const doomedNames = input.deleteEntities ?? [];

  // 1. the entities to delete, locked (they are written either way), in name order
  const doomed = await entitiesByName(tx, t.envId, doomedNames, 'update');
  // 2. what the upserts name, unlocked: most of a re-import is only compared
  const current = await entitiesByName(tx, t.envId, items.map((item) => item.name));
  // 3. the catalog, and every item checked against it before anything is written
  const typeNames = [...new Set(items.map((item) => item.entityType))];
  const types = await entityTypesNamed(tx, t.projectId, typeNames, false);
  const relationshipTypeNames = [...new Set((input.relationships ?? []).map((r) => r.relationshipType))];
  const relTypes = await relationshipTypesNamed(tx, t.projectId, relationshipTypeNames);
  const details: ErrorDetail[] = [];
  const desired = validateEntities(items, types, details);
  const desiredRelationships = validateRelationships(input.relationships ?? [], relTypes, details);
  if (details.length > 0) refuse('validation_failed', 'the request does not match the catalog', details);

  const outcome: EntityOutcome = {
    created: new Set(),
    updated: new Set(),
    unchanged: new Set(),
    conflicts: new Map(),
    deleted: new Set(),
    alreadyGone: 0,
    deleteConflicts: new Map(),
  };
  const changes: EntityChangeRef[] = [];
  const written: { desired: DesiredEntity; id: string; released: boolean }[] = [];
  const moved: { entityId: string; state: string }[] = [];

  /** Records the unchanged and the conflicts; returns what to create and what to update (once its row is locked). */
  const sortOut = (batch: DesiredEntity[], rows: Map<string, EntityRow>) => {
    const creates: DesiredEntity[] = [];
    const updates: { desired: DesiredEntity; row: EntityRow }[] = [];
    for (const d of batch) {
      const verdict = classify(d, rows.get(d.name), t.source);
      if (verdict.kind === 'create') creates.push(d);
      else if (verdict.kind === 'unchanged') outcome.unchanged.add(d.name);
      else if (verdict.kind === 'conflict') outcome.conflicts.set(d.name, { reason: verdict.reason, syncSource: verdict.syncSource });
      else updates.push({ desired: d, row: verdict.row });
    }
    return { creates, updates };
  };

  const applyUpdates = async (updates: { desired: DesiredEntity; row: EntityRow }[]) => {
    refuseTransitions(updates);
    // every row is locked by this transaction: each is updated
    await updateEntities(tx, t, updates);
    for (const { desired: d, row } of updates) {
      outcome.updated.add(d.name);
      written.push({ desired: d, id: row.id, released: true });
      changes.push({ type: 'entity.updated', entityId: row.id });
      if (d.state !== undefined && d.state !== row.state) moved.push({ entityId: row.id, state: d.state });
    }
  };

  // 4. sorted out on the unlocked read; the updates compared again under their row locks
  const first = sortOut(desired, current);
  let creates = first.creates;
  let updates: { desired: DesiredEntity; row: EntityRow }[] = [];
  if (first.updates.length > 0) {
    const locked = await entitiesByName(tx, t.envId, first.updates.map((u) => u.desired.name), 'no key update');
    const second = sortOut(first.updates.map((u) => u.desired), locked);
    creates = [...creates, ...second.creates];
    updates = second.updates;
  }

  // 5. the types, share-locked to commit; had one changed since step 3, everything above is redone
  const lockedTypes = await entityTypesNamed(tx, t.projectId, typeNames, true);
  for (const [name, type] of types) {
    if (lockedTypes.get(name)?.version !== type.version) throw new TypeChanged();
  }

  // 6. deletes: only what the source owns; relationships, memberships, metrics and unique keys cascade
  const deletions: EntityRow[] = [];
  for (const name of doomedNames) {
    const row = doomed.get(name);
    if (!row) outcome.alreadyGone++;
    else if (row.syncSource !== t.source) outcome.deleteConflicts.set(name, { reason: ownerOf(row.syncSource), syncSource: row.syncSource });
    else deletions.push(row);
  }
  if (deletions.length > 0) {
    // the cells each was a direct member of, kept on its change (as deleteEntity does)
    const cells = await entityCells(tx, t.projectId, deletions.map((row) => row.id));
    await tx
      .delete(entities)
      .where(and(eq(entities.envId, t.envId), sql`${entities.id} in (select jsonb_array_elements_text(${JSON.stringify(deletions.map((r) => r.id))}::jsonb)::uuid)`));
    for (const row of deletions) {
      outcome.deleted.add(row.name);
      changes.push({
        type: 'entity.deleted',
        entity: { id: row.id, name: row.name, entityTypeName: row.entityTypeName },
        cells: cells.get(row.id) ?? [],
      });
    }
  }

  // 7. updates, then creates; a name a concurrent writer took meanwhile is locked and sorted out again
  await applyUpdates(updates);
  for (let round = 1; creates.length > 0; round++) {
    if (round > MAX_CREATE_ROUNDS) {
      throw new ApiError(
        'already_exists',
        `entities ${creates.slice(0, 5).map((d) => `"${d.name}"`).join(', ')} were created and deleted by concurrent writers while this request ran; send it again`,
      );
    }
    const inserted = await insertEntities(tx, t, creates);
    const byName = new Map(creates.map((d) => [d.name, d]));
    for (const row of inserted) {
      outcome.created.add(row.name);
      written.push({ desired: byName.get(row.name)!, id: row.id, released: false });
      changes.push({ type: 'entity.created', entityId: row.id });
    }
    const lost = creates.filter((d) => !outcome.created.has(d.name));
    if (lost.length === 0) break;
    const taken = await entitiesByName(tx, t.envId, lost.map((d) => d.name), 'no key update');
    const again = sortOut(lost, taken);
    await applyUpdates(again.updates);
    creates = again.creates;
  }
  await claimUniqueKeys(tx, t.envId, written);

  // 8. a state move ends the entity's active runs as updateEntity's does (DECISIONS §8), under the row lock held
  for (const move of moved) await completeRunsByEntityMove(tx, t.clock, move);

  // 9. relationships, against the entities as this request left them
  const relationshipOutcome = await writeRelationships(tx, t, desiredRelationships, input.deleteRelationships ?? []);

  // 10. the change log, its counter last
  await recordEntityChanges(tx, t.notes, t.envId, changes);

  const inOrder = (set: Set<string>) => items.map((item) => item.name).filter((name) => set.has(name));
  return {
    source: t.source,
    dryRun: input.dryRun ?? false,
    entities: {
      created: inOrder(outcome.created),
      updated: inOrder(outcome.updated),
      unchanged: outcome.unchanged.size,
      deleted: doomedNames.filter((name) => outcome.deleted.has(name)),
      alreadyGone: outcome.alreadyGone,
      conflicts: [
        ...items.flatMap((item) => {
          const found = outcome.conflicts.get(item.name);
          return found ? [{ name: item.name, ...found }] : [];
        }),
        ...doomedNames.flatMap((name) => {
          const found = outcome.deleteConflicts.get(name);
          return found ? [{ name, ...found }] : [];
        }),
      ],
    },
    relationships: relationshipOutcome,
  };
}
