import { and, asc, eq, sql } from 'drizzle-orm';
import type { Tx } from '../../db/client';
import { entities, relationships } from '../../db/schema';
import type { ErrorDetail } from '../../http/errors';
import { cardinalityLimits } from '../catalog-items';
import { validateProperties } from '../properties';
import type { RelationshipTypeDefinition } from '../relationship-types/service';
import { refuse, sameJson, textsIn, transitionAllowed, type Json, type Target } from './common';
import type { BatchRequest, BatchResult } from './schemas';

/** The relationship half of `POST ENV/batch` (./service.ts runs it after the entities). */

// --- relationships -----------------------------------------------------------------

interface DesiredRelationship {
  index: number;
  type: RelationshipTypeDefinition;
  from: string;
  to: string;
  state: string | undefined;
  properties: Json;
  labels: Record<string, string>;
}

type RelationshipRow = typeof relationships.$inferSelect;
type EndRow = { id: string; name: string; entityTypeName: string; syncSource: string | null };

export function validateRelationships(
  items: NonNullable<BatchRequest['relationships']>,
  types: Map<string, RelationshipTypeDefinition>,
  details: ErrorDetail[],
): DesiredRelationship[] {
  const desired: DesiredRelationship[] = [];
  items.forEach((item, index) => {
    const type = types.get(item.relationshipType);
    if (!type) {
      details.push({
        path: `relationships.${index}.relationshipType`,
        message: `relationship type "${item.relationshipType}" does not exist in this project`,
      });
      return;
    }
    let ok = true;
    if (item.state !== undefined && !type.states.includes(item.state)) {
      details.push({ path: `relationships.${index}.state`, message: `is not one of relationship type "${type.name}"'s states: ${type.states.join(', ')}` });
      ok = false;
    }
    const properties = validateProperties(type.properties, item.properties ?? {}, {
      fillDefaults: true,
      path: `relationships.${index}.properties`,
    });
    if (!properties.ok) {
      details.push(...properties.details);
      ok = false;
    }
    if (ok && properties.ok) {
      desired.push({ index, type, from: item.from, to: item.to, state: item.state, properties: properties.values, labels: item.labels ?? {} });
    }
  });
  return desired;
}

/** The ends relationships name, key-share-locked so that none is deleted before the relationship referring to it commits. */
async function endsByName(tx: Tx, envId: string, names: string[]): Promise<Map<string, EndRow>> {
  if (names.length === 0) return new Map();
  const rows = await tx
    .select({ id: entities.id, name: entities.name, entityTypeName: entities.entityTypeName, syncSource: entities.syncSource })
    .from(entities)
    .where(and(eq(entities.envId, envId), sql`${entities.name} in ${textsIn(names)}`))
    .orderBy(asc(entities.name))
    .for('key share');
  return new Map(rows.map((row) => [row.name, row]));
}

const pairKey = (type: string, fromId: string, toId: string) => `${type}/${fromId}/${toId}`;

async function relationshipsByPair(
  tx: Tx,
  envId: string,
  pairs: { type: string; fromId: string; toId: string }[],
  lock?: 'no key update',
): Promise<Map<string, RelationshipRow>> {
  if (pairs.length === 0) return new Map();
  const json = JSON.stringify(pairs.map((p) => ({ t: p.type, f: p.fromId, o: p.toId })));
  const query = tx
    .select()
    .from(relationships)
    .where(
      and(
        eq(relationships.envId, envId),
        sql`(${relationships.relationshipTypeName}, ${relationships.fromEntityId}, ${relationships.toEntityId}) in
          (select p.t, p.f, p.o from jsonb_to_recordset(${json}::jsonb) as p(t text, f uuid, o uuid))`,
      ),
    )
    .orderBy(asc(relationships.id));
  const rows = lock ? await query.for(lock) : await query;
  return new Map(rows.map((row) => [pairKey(row.relationshipTypeName, row.fromEntityId, row.toEntityId), row]));
}

const relationshipUnchanged = (d: DesiredRelationship, row: RelationshipRow) =>
  (d.state === undefined || d.state === row.state) && sameJson(d.properties, row.properties) && sameJson(d.labels, row.labels);

interface RelationshipOutcome {
  created: number;
  updated: number;
  unchanged: number;
  deleted: number;
  conflicts: BatchResult['relationships']['conflicts'];
}

export async function writeRelationships(
  tx: Tx,
  t: Target,
  desired: DesiredRelationship[],
  unlinks: NonNullable<BatchRequest['deleteRelationships']>,
): Promise<RelationshipOutcome> {
  const outcome: RelationshipOutcome = { created: 0, updated: 0, unchanged: 0, deleted: 0, conflicts: [] };
  if (desired.length === 0 && unlinks.length === 0) return outcome;
  const ends = await endsByName(tx, t.envId, [...new Set([...desired, ...unlinks].flatMap((r) => [r.from, r.to]))]);

  // every end exists (after this request's entity writes) and is of the type's entity types
  const details: ErrorDetail[] = [];
  for (const d of desired) {
    for (const [end, name, wanted] of [
      ['from', d.from, d.type.fromEntityTypeName],
      ['to', d.to, d.type.toEntityTypeName],
    ] as const) {
      const row = ends.get(name);
      if (!row) details.push({ path: `relationships.${d.index}.${end}`, message: `entity "${name}" does not exist in this environment` });
      else if (row.entityTypeName !== wanted) {
        details.push({
          path: `relationships.${d.index}.${end}`,
          message: `entity "${name}" is a "${row.entityTypeName}"; relationship type "${d.type.name}" goes ${end} "${wanted}" entities`,
        });
      }
    }
  }
  if (details.length > 0) refuse('validation_failed', 'relationships name missing or mistyped entities', details);

  const conflict = (type: string, from: string, to: string, owner: EndRow) =>
    outcome.conflicts.push({
      relationshipType: type,
      from,
      to,
      reason: owner.syncSource === null ? `from entity "${from}" was created by hand` : `from entity "${from}" is owned by "${owner.syncSource}"`,
    });

  const allowed = desired.filter((d) => {
    const from = ends.get(d.from)!;
    if (from.syncSource === t.source) return true;
    conflict(d.type.name, d.from, d.to, from);
    return false;
  });
  const unlinkable = unlinks.flatMap((u) => {
    const from = ends.get(u.from);
    const to = ends.get(u.to);
    return from && to ? [{ ...u, fromRow: from, toRow: to }] : [];
  });
  const keyOf = (d: { type: RelationshipTypeDefinition | string; from: string; to: string }) =>
    pairKey(typeof d.type === 'string' ? d.type : d.type.name, ends.get(d.from)!.id, ends.get(d.to)!.id);
  const existing = await relationshipsByPair(
    tx,
    t.envId,
    unlinkable.map((u) => ({ type: u.relationshipType, fromId: u.fromRow.id, toId: u.toRow.id })),
  );

  // deletes first, so that a request may replace a one-to-one relationship
  const doomed: string[] = [];
  for (const u of unlinkable) {
    const row = existing.get(keyOf({ type: u.relationshipType, from: u.from, to: u.to }));
    if (!row) continue;
    if (u.fromRow.syncSource !== t.source) conflict(u.relationshipType, u.from, u.to, u.fromRow);
    else doomed.push(row.id);
  }
  if (doomed.length > 0) {
    const gone = await tx.execute(sql`
      delete from ${relationships}
      where ${relationships.envId} = ${t.envId}::uuid and ${relationships.id} in (select jsonb_array_elements_text(${JSON.stringify(doomed)}::jsonb)::uuid)
      returning id`);
    outcome.deleted = (gone as unknown as { rows: unknown[] }).rows.length;
  }

  /** Locks the existing rows of `items`, updates those that differ; returns the items with no such pair. */
  const settle = async (items: DesiredRelationship[]) => {
    const locked = await relationshipsByPair(
      tx,
      t.envId,
      items.map((d) => ({ type: d.type.name, fromId: ends.get(d.from)!.id, toId: ends.get(d.to)!.id })),
      'no key update',
    );
    const updates: { desired: DesiredRelationship; row: RelationshipRow }[] = [];
    const missing: DesiredRelationship[] = [];
    for (const d of items) {
      const row = locked.get(keyOf(d));
      if (!row) missing.push(d);
      else if (relationshipUnchanged(d, row)) outcome.unchanged++;
      else updates.push({ desired: d, row });
    }
    const refused = updates
      .filter(({ desired: d, row }) => d.state !== undefined && !transitionAllowed(d.type.constraints, row.state, d.state))
      .map(({ desired: d, row }) => ({
        path: `relationships.${d.index}.state`,
        message: `relationship type "${d.type.name}" does not allow the change from "${row.state}" to "${d.state}"`,
      }));
    if (refused.length > 0) refuse('transition_not_allowed', 'state changes are not allowed', refused);
    if (updates.length > 0) {
      const rows = updates.map(({ desired: d, row }) => ({ id: row.id, state: d.state ?? row.state, properties: d.properties, labels: d.labels }));
      await tx.execute(sql`
        update ${relationships}
        set state = u.state, properties = u.properties, labels = u.labels, updated_at = ${t.now.toISOString()}::timestamptz
        from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as u(id uuid, state text, properties jsonb, labels jsonb)
        where ${relationships.id} = u.id and ${relationships.envId} = ${t.envId}::uuid`);
      outcome.updated += updates.length;
    }
    return missing;
  };

  // Inserted first, with no lookup before: what a sync sends is mostly new (the import sends only what it
  // has not stored), and a lookup of thousands of pairs is at the planner's mercy on a table without
  // statistics (PGlite never analyzes; nor does a server with autovacuum off, or before its first pass):
  // beyond ~65,000 relationships in an environment it probed (env_id, relationship_type_name) of another
  // unique index per pair, ~35 s per 5000 pairs (bench/README.md, import). A pair that exists is then
  // compared, and updated if it differs, under its row lock. A row the insert skipped with no such pair
  // has an exclusive end taken (cardinality), or lost its pair to a concurrent delete: tried once more, then refused.
  let pending = allowed;
  for (let round = 1; pending.length > 0; round++) {
    const made = await insertRelationships(tx, t, pending, ends);
    outcome.created += made.size;
    const lost = pending.filter((d) => !made.has(keyOf(d)));
    if (lost.length === 0) break;
    const missing = await settle(lost);
    if (missing.length > 0 && round >= 2) await refuseCardinality(tx, t.envId, missing, ends);
    pending = missing;
  }
  return outcome;
}

/** Inserts what it can of `items`, in pair order; any unique violation (the pair, or an exclusive end) skips the row. Returns the pairs made. */
async function insertRelationships(tx: Tx, t: Target, items: DesiredRelationship[], ends: Map<string, EndRow>): Promise<Set<string>> {
  const rows = items.map((d) => {
    const limits = cardinalityLimits(d.type.cardinality);
    const fromId = ends.get(d.from)!.id;
    const toId = ends.get(d.to)!.id;
    return {
      type: d.type.name,
      from_id: fromId,
      to_id: toId,
      from_exclusive: limits.oneOutgoing ? fromId : null,
      to_exclusive: limits.oneIncoming ? toId : null,
      state: d.state ?? d.type.states[0]!,
      properties: d.properties,
      labels: d.labels,
    };
  });
  // sorted, as for entities: two racing batches meet on their first common pair, never crosswise
  const result = await tx.execute<{ relationship_type_name: string; from_entity_id: string; to_entity_id: string }>(sql`
    insert into ${relationships} (org_id, project_id, env_id, relationship_type_name, from_entity_id, to_entity_id,
                                  from_exclusive, to_exclusive, state, properties, labels, created_at, updated_at)
    select ${t.orgId}::uuid, ${t.projectId}::uuid, ${t.envId}::uuid, r.type, r.from_id, r.to_id, r.from_exclusive, r.to_exclusive,
           r.state, r.properties, r.labels, ${t.now.toISOString()}::timestamptz, ${t.now.toISOString()}::timestamptz
    from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
      as r(type text, from_id uuid, to_id uuid, from_exclusive uuid, to_exclusive uuid, state text, properties jsonb, labels jsonb)
    order by r.type, r.from_id, r.to_id
    on conflict do nothing
    returning relationship_type_name, from_entity_id, to_entity_id`);
  return new Set(
    (result as unknown as { rows: { relationship_type_name: string; from_entity_id: string; to_entity_id: string }[] }).rows.map((r) =>
      pairKey(r.relationship_type_name, r.from_entity_id, r.to_entity_id),
    ),
  );
}

/** 409 cardinality_violation for relationships an exclusive end refused (by another relationship, stored or of this request). */
async function refuseCardinality(tx: Tx, envId: string, refused: DesiredRelationship[], ends: Map<string, EndRow>): Promise<never> {
  const ids = [...new Set(refused.flatMap((d) => [ends.get(d.from)!.id, ends.get(d.to)!.id]))];
  const holders = await tx
    .select({ type: relationships.relationshipTypeName, fromExclusive: relationships.fromExclusive, toExclusive: relationships.toExclusive })
    .from(relationships)
    .where(
      and(
        eq(relationships.envId, envId),
        sql`(${relationships.fromExclusive} in (select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::uuid)
          or ${relationships.toExclusive} in (select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::uuid))`,
      ),
    );
  const outgoing = new Set(holders.map((h) => `${h.type}/${h.fromExclusive}`));
  const incoming = new Set(holders.map((h) => `${h.type}/${h.toExclusive}`));
  const details = refused.map((d) => {
    const limits = cardinalityLimits(d.type.cardinality);
    const path = `relationships.${d.index}`;
    if (limits.oneOutgoing && outgoing.has(`${d.type.name}/${ends.get(d.from)!.id}`)) {
      return { path, message: `"${d.from}" already has an outgoing "${d.type.name}" relationship, and the type allows one` };
    }
    if (limits.oneIncoming && incoming.has(`${d.type.name}/${ends.get(d.to)!.id}`)) {
      return { path, message: `"${d.to}" already has an incoming "${d.type.name}" relationship, and the type allows one` };
    }
    // an exclusive end taken by an earlier item of this request (not visible as a row of another writer)
    return { path, message: `an end of this "${d.type.name}" relationship is taken by another item of this request (the type is ${d.type.cardinality})` };
  });
  refuse('cardinality_violation', 'relationship cardinality would be exceeded', details);
}
