import { and, eq, sql, type SQL } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import { violatedUniqueConstraint } from '../../db/errors';
import type { Queryable, Tx } from '../../db/client';
import { entities, entityUniqueKeys } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { completeRunsByEntityMove } from '../../runs/transitions';
import { recordEntityChange } from '../../stream/change-log';
import { assertEntityInScope, callerCellScope, entityCells } from '../cells/membership';
import { getEntityTypeDefinition, shareEntityTypeVersion, type EntityTypeDefinition } from '../entity-types/service';
import type { EntityJsonText } from './driver-rows';
import { createEntityPlainly, readEntityPlainly, rememberedEntityType, rememberEntityType } from './fast-paths';
import { validateProperties } from '../properties';
import {
  type Entity,
  type EntityCreate,
  type EntityUpdate,
} from './schemas';

export type EntityRow = typeof entities.$inferSelect;

export const toEntity = (row: EntityRow): Entity => ({
  id: row.id,
  entityTypeName: row.entityTypeName,
  name: row.name,
  state: row.state,
  properties: row.properties as Record<string, unknown>,
  labels: row.labels as Record<string, string>,
  lastSyncedAt: optionalTimestamp(row.lastSyncedAt),
  syncSource: row.syncSource,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
  orgId: row.orgId,
  projectId: row.projectId,
  envId: row.envId,
});

/**
 * Entities: the runtime instances of entity types, per environment.
 *
 * Invariants every write keeps:
 * - one transaction writes the entity row, its unique keys and its change-log
 *   row (src/stream/change-log.ts), so a failed write leaves neither an entity
 *   nor a change behind, and the log never names a write that did not commit;
 * - lock order is the entity row, then its type's row (FOR SHARE, so a type
 *   update or delete, which takes it FOR UPDATE, waits for the write or is
 *   seen by it), then the environment's change counter last
 *   (recordEntityChange), so writers of one environment cannot deadlock;
 * - a cell-scoped token's writes are checked against its cells inside the
 *   transaction, after the row is written, so a violation rolls everything back.
 *
 * Nothing here queries `ctx.db` while a transaction is open: on PGlite (one
 * session) that would wait forever (ARCHITECTURE.md).
 */

/** How far ahead of the server's clock a reported sync time may be (clients' clocks drift). */
export const MAX_CLOCK_SKEW_MS = 5 * 60 * 1000;

// --- validation against the catalog ---------------------------------------

function assertStateDeclared(type: EntityTypeDefinition, state: string): void {
  if (!type.states.includes(state)) {
    throw new ApiError('invalid_state', `state "${state}" is not one of entity type "${type.name}"'s states: ${type.states.join(', ')}`);
  }
}

/** Once a type declares any transition, only listed direct changes are allowed; staying put is not a transition. */
function assertTransition(type: EntityTypeDefinition, from: string, to: string): void {
  if (from === to) return;
  const transitions = type.constraints.filter((constraint) => constraint.kind === 'transition');
  if (transitions.length === 0) return;
  if (transitions.some((transition) => transition.from === from && transition.to.includes(to))) return;
  throw new ApiError('transition_not_allowed', `entity type "${type.name}" does not allow the transition ${from} → ${to}`);
}

function validatedProperties(type: EntityTypeDefinition, values: Record<string, unknown>): Record<string, unknown> {
  const result = validateProperties(type.properties, values, { fillDefaults: true });
  if (!result.ok) {
    throw new ApiError(
      'validation_failed',
      `properties do not match entity type "${type.name}": ${result.details.map((d) => `${d.path} ${d.message}`).join('; ')}`,
      result.details,
    );
  }
  return result.values;
}

export function notInFuture(ctx: ServiceContext, value: string, path: string): Date {
  const date = new Date(value);
  if (date.getTime() > ctx.clock.now().getTime() + MAX_CLOCK_SKEW_MS) {
    throw new ApiError('validation_failed', `${path} is in the future`, [
      { path, message: `must not be more than ${MAX_CLOCK_SKEW_MS / 60_000} minutes ahead of the server's clock` },
    ]);
  }
  return date;
}

// --- unique constraints ----------------------------------------------------

/** JSON with object keys sorted, so equal values always produce the same key. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * One key per `unique` constraint of the type. An entity missing one of the
 * constraint's properties has no key for it (as NULLs in a SQL unique index).
 * The batch upsert (src/modules/batch/service.ts) claims the same keys.
 */
export function uniqueKeysOf(type: EntityTypeDefinition, properties: Record<string, unknown>) {
  const keys = new Map<string, { constraintKey: string; valueKey: string; properties: string[] }>();
  for (const constraint of type.constraints) {
    if (constraint.kind !== 'unique') continue;
    const values = constraint.properties.map((property) => properties[property]);
    if (values.some((value) => value === undefined || value === null)) continue;
    const constraintKey = constraint.properties.join(',');
    keys.set(constraintKey, { constraintKey, valueKey: canonicalJson(values), properties: constraint.properties });
  }
  return [...keys.values()];
}

/**
 * Claims the entity's unique keys. The primary key of entity_unique_keys is
 * the arbiter: of two concurrent writers of one value, the second waits for
 * the first to commit and then finds the key taken — no check-then-insert race.
 */
async function claimUniqueKeys(tx: Tx, type: EntityTypeDefinition, row: EntityRow): Promise<void> {
  const keys = uniqueKeysOf(type, row.properties as Record<string, unknown>);
  if (keys.length === 0) return;
  const claimed = await tx
    .insert(entityUniqueKeys)
    .values(
      keys.map((key) => ({
        envId: row.envId,
        entityTypeName: row.entityTypeName,
        constraintKey: key.constraintKey,
        valueKey: key.valueKey,
        entityId: row.id,
      })),
    )
    .onConflictDoNothing()
    .returning({ constraintKey: entityUniqueKeys.constraintKey });
  if (claimed.length === keys.length) return;
  const taken = keys.filter((key) => !claimed.some((c) => c.constraintKey === key.constraintKey));
  throw new ApiError(
    'constraint_violation',
    `another entity of type "${type.name}" in this environment has the same ${taken
      .map((key) => `(${key.properties.join(', ')})`)
      .join(' and ')}`,
    taken.map((key) => ({ path: `properties.${key.properties.join(',')}`, message: 'must be unique in the environment' })),
  );
}

// --- reads ---------------------------------------------------------------------

/**
 * The entity `name` of an environment for a write: 404 when it does not
 * exist, 403 cell_scope_violation when it is outside the caller's cells.
 * (Entity names are unique per environment and a create already answers 409
 * for a taken name, so the 403 tells a scoped token nothing a create would not.)
 */
export async function entityForWrite(
  db: Queryable,
  envId: string,
  name: string,
  scope: SQL | undefined,
  options: { lock: boolean },
): Promise<EntityRow> {
  const query = db
    .select({ row: entities, inScope: scope ? sql<boolean>`(${scope})` : sql<boolean>`true` })
    .from(entities)
    .where(and(eq(entities.envId, envId), eq(entities.name, name)))
    .limit(1);
  const [found] = options.lock ? await query.for('update') : await query;
  if (!found) throw notFound(`entity "${name}"`);
  if (!found.inScope) throw new ApiError('cell_scope_violation', `entity "${name}" is outside the token's cells`);
  return found.row;
}

/** The entity `name` as the caller may see it: outside its cells is the same 404 as absent. */
const buildEntityByName = (db: Queryable, name: string) =>
  db
    .select()
    .from(entities)
    .where(and(eq(entities.envId, sql.placeholder('envId')), eq(entities.name, sql.placeholder('name'))))
    .limit(1)
    .prepare(name);

/** The unscoped read by name is the hottest query there is: built once per database handle. */
const entityByName = new WeakMap<Queryable, ReturnType<typeof buildEntityByName>>();

export async function visibleEntity(ctx: ServiceContext, envId: string, name: string, scope: SQL | undefined): Promise<EntityRow> {
  const db = ctx.db;
  let row: EntityRow | undefined;
  if (scope) {
    [row] = await db
      .select()
      .from(entities)
      .where(and(eq(entities.envId, envId), eq(entities.name, name), scope))
      .limit(1);
  } else {
    let query = entityByName.get(db);
    if (!query) entityByName.set(db, (query = buildEntityByName(db, ctx.namedStatements ? 'cellplane_entity_by_name' : '')));
    [row] = await query.execute({ envId, name });
  }
  if (!row) throw notFound(`entity "${name}"`);
  return row;
}

/** The entity `name` as its response's JSON text (written by Postgres on the plain path: ./driver-rows.ts). */
export async function getEntity(ctx: ServiceContext, ref: EnvRef, name: string): Promise<EntityJsonText> {
  // one round trip when the answer is a plain 200 (fast-paths.ts); otherwise the checks below answer
  const plain = await readEntityPlainly(ctx, ref, name);
  if (plain !== undefined) return plain;
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const scope = await callerCellScope(ctx, project.id);
  return JSON.stringify(toEntity(await visibleEntity(ctx, env.id, name, scope)));
}

/** The list, and why each of its filters costs the same on every page, are in ./list.ts. */
export { listEntities } from './list';

// --- writes ------------------------------------------------------------------

export async function createEntity(ctx: ServiceContext, ref: EnvRef, input: EntityCreate): Promise<Entity> {
  // its statement writes the change row too, and notes it for the stream (createEntityPlainly)
  const plain = await createEntityInOneStatement(ctx, ref, input);
  if (plain) return plain;
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const lastSyncedAt = input.lastSyncedAt === undefined ? null : notInFuture(ctx, input.lastSyncedAt, 'lastSyncedAt');
  const scope = await callerCellScope(ctx, project.id);
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    // share-locked until commit: a PUT or DELETE of the type waits, so its checks never miss this entity
    const versioned = await shareEntityTypeVersion(tx, project.id, input.entityType);
    // what the next create of this type validates against, if the row is still this version then
    rememberEntityType(ctx, ref, versioned);
    const type = versioned.definition;
    const state = input.state ?? type.initialState;
    assertStateDeclared(type, state);
    const properties = validatedProperties(type, input.properties ?? {});
    // the (env_id, name) unique index decides between concurrent creates of one name
    const [row] = await tx
      .insert(entities)
      .values({
        orgId: project.orgId,
        projectId: project.id,
        envId: env.id,
        entityTypeName: type.name,
        name: input.name,
        state,
        properties,
        labels: input.labels ?? {},
        lastSyncedAt,
        syncSource: input.syncSource ?? null,
        createdAt: now,
        updatedAt: now,
      })
      .onConflictDoNothing({ target: [entities.envId, entities.name] })
      .returning();
    if (!row) throw new ApiError('already_exists', `entity "${input.name}" exists in environment "${env.name}"`);
    await assertEntityInScope(tx, scope, row.id, row.name);
    await claimUniqueKeys(tx, type, row);
    const entity = toEntity(row);
    await recordEntityChange(tx, ctx.changedEnvironments, env.id, { type: 'entity.created', entity });
    return entity;
  });
}

/**
 * The create in one statement (fast-paths.ts), validated against the type
 * as this process last saw it; the statement itself checks that the type
 * is still that version. Undefined sends the request the transactional way,
 * which gives every answer but a plain 201: so does a request that does not
 * validate, because authorization comes before validation there.
 */
async function createEntityInOneStatement(ctx: ServiceContext, ref: EnvRef, input: EntityCreate): Promise<Entity | undefined> {
  if (ctx.callerState.resolved || ctx.callerState.tokenHash === undefined) return undefined;
  const type = rememberedEntityType(ctx, ref, input.entityType);
  if (!type) return undefined;
  const definition = type.definition;
  const now = ctx.clock.now();
  let validated;
  try {
    const lastSyncedAt = input.lastSyncedAt === undefined ? null : notInFuture(ctx, input.lastSyncedAt, 'lastSyncedAt');
    const state = input.state ?? definition.initialState;
    assertStateDeclared(definition, state);
    validated = { lastSyncedAt, state, properties: validatedProperties(definition, input.properties ?? {}) };
  } catch (error) {
    if (error instanceof ApiError) return undefined;
    throw error;
  }
  const row = await createEntityPlainly(ctx, ref, {
    type,
    name: input.name,
    ...validated,
    labels: input.labels ?? {},
    syncSource: input.syncSource ?? null,
    uniqueKeys: uniqueKeysOf(definition, validated.properties),
    now,
  });
  return row && toEntity(row);
}

/**
 * Replaces what the body names: `properties` and `labels` wholesale (defaults
 * filled again, as on create), `state` subject to the type's transitions,
 * `name` renames. Every successful call is one `entity.updated`.
 *
 * A state change may end the entity's active runs (DECISIONS §8: moved to an
 * action's onSuccess, the run succeeds; to its onFailure, it fails), in this
 * transaction: so every state change goes this way, never a fast path.
 */
export async function updateEntity(ctx: ServiceContext, ref: EnvRef, name: string, input: EntityUpdate): Promise<Entity> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const scope = await callerCellScope(ctx, project.id);
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const current = await entityForWrite(tx, env.id, name, scope, { lock: true });
    const type = await getEntityTypeDefinition(tx, project.id, current.entityTypeName, { lock: 'share' });
    const changes: Partial<typeof entities.$inferInsert> = { updatedAt: now };
    if (input.state !== undefined) {
      assertStateDeclared(type, input.state);
      assertTransition(type, current.state, input.state);
      changes.state = input.state;
    }
    if (input.properties !== undefined) changes.properties = validatedProperties(type, input.properties);
    if (input.labels !== undefined) changes.labels = input.labels;
    if (input.name !== undefined) changes.name = input.name;
    let row: EntityRow;
    try {
      [row] = (await tx.update(entities).set(changes).where(eq(entities.id, current.id)).returning()) as [EntityRow];
    } catch (err) {
      if (violatedUniqueConstraint(err) === 'entities_env_name_unique') {
        throw new ApiError('already_exists', `entity "${input.name}" exists in environment "${env.name}"`);
      }
      throw err;
    }
    if (input.properties !== undefined) {
      await tx.delete(entityUniqueKeys).where(eq(entityUniqueKeys.entityId, row.id));
      await claimUniqueKeys(tx, type, row);
    }
    // a change of labels, state or properties may take the entity out of derived cells
    await assertEntityInScope(tx, scope, row.id, row.name);
    // the entity's row is locked (above), as every path that ends one of its runs locks it first
    if (row.state !== current.state) await completeRunsByEntityMove(tx, ctx.clock, { entityId: row.id, state: row.state });
    const entity = toEntity(row);
    await recordEntityChange(tx, ctx.changedEnvironments, env.id, { type: 'entity.updated', entity });
    return entity;
  });
}

export async function deleteEntity(ctx: ServiceContext, ref: EnvRef, name: string): Promise<{ deleted: true; name: string }> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:write');
  const scope = await callerCellScope(ctx, project.id);
  await ctx.db.transaction(async (tx) => {
    const row = await entityForWrite(tx, env.id, name, scope, { lock: true });
    // its memberships go with it: the change keeps them, so cell-filtered streams still learn of the delete
    const cells = (await entityCells(tx, project.id, [row.id])).get(row.id) ?? [];
    // metrics, unique keys, cell memberships and relationships go with it (foreign keys cascade)
    await tx.delete(entities).where(eq(entities.id, row.id));
    await recordEntityChange(tx, ctx.changedEnvironments, env.id, { type: 'entity.deleted', entity: toEntity(row), cells });
  });
  return { deleted: true, name };
}
