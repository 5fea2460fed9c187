import { and, eq, getTableColumns, sql } from 'drizzle-orm';
import { plainAccessColumns, plainAccessRowOf, plainEnvironmentAccess, settlePlainCaller, type EnvRef } from '../../auth/access';
import { accessEpochRow, accessEpochValue, currentAccessEpoch, plainCallerKey, settleAndRemember } from '../../auth/plain-callers';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { databaseError, SQLSTATE } from '../../db/errors';
import { accessEpoch, entities, entityChanges, entityTypes, entityUniqueKeys, environments } from '../../db/schema';
import type { EntityTypeDefinition, EntityTypeVersion } from '../entity-types/service';
import { oncePerHandle, perHandle, plainAccessValues, typeDefinitionCache, type PathShape } from '../one-statement';
import { CHANGE_LOG_COLUMNS, changeRowOf, type ChangeRow } from '../../stream/feed';
import { entityJson, rowsOf, type EntityJsonText } from './driver-rows';
import { toEntity, type EntityRow } from './service';

/**
 * The hottest entity requests in one round trip each. A request with a
 * token is usually a plain success: the token is live, reaches this
 * environment, holds the permission, has no cell scopes, and the entity is
 * there. These statements fold the token and tenancy lookup
 * (plainEnvironmentAccess in src/auth/access.ts) into the entity's own
 * statement and answer only that case. Any other answer — no row — sends the
 * request down the usual path (authorizeEnvironment, then the service's
 * queries), which is what gives every 401, 403, 404 and scoped answer, as
 * before. The token is still checked against the database on every request:
 * in full, or, for a GET whose caller is remembered, by the access epoch that
 * any change to the token or its tenancy moves (src/auth/plain-callers.ts).
 *
 * Each statement is prepared once per database handle and path shape (org and
 * project by id or by slug), named where Platform.namedStatements allows, so
 * Postgres parses it once per connection and keeps its generic plan.
 */

/**
 * The entity GET's statement for a token whose plain answer is not
 * remembered, not yet prepared: the token and tenancy (placeholders
 * tokenHash, org, project, env, now), the access epoch in the same snapshot,
 * and the entity (name). Exported for the HTTP bench's least-work floor
 * (bench/http/bare.ts), which sends this same text without the app around it.
 */
export function entityReadQuery(db: Queryable, shape: PathShape) {
  const caller = plainEnvironmentAccess(db, shape, 'data:read').as('caller');
  return db
    .select({
      caller: plainAccessColumns(caller),
      // the epoch the caller is remembered with (src/auth/plain-callers.ts)
      epoch: currentAccessEpoch().as('access_epoch'),
      entity: entityJson(getTableColumns(entities)).as('entity_json'),
    })
    .from(caller)
    .innerJoin(entities, and(eq(entities.envId, caller.envId), eq(entities.name, sql.placeholder('name'))))
    .limit(1);
}

/**
 * The entity GET's statement for a remembered caller: the access epoch now,
 * and the entity named `name` in the caller's environment (envId), null if
 * there is none. One row whenever the epoch's row exists. Exported for the
 * least-work floor too.
 */
export function rememberedEntityReadQuery(db: Queryable) {
  return db
    .select({
      epoch: accessEpochValue().as('access_epoch'),
      entity: entityJson(getTableColumns(entities)).as('entity_json'),
    })
    .from(accessEpoch)
    .leftJoin(entities, and(eq(entities.envId, sql.placeholder('envId')), eq(entities.name, sql.placeholder('name'))))
    .where(accessEpochRow())
    .limit(1);
}

const plainEntityRead = perHandle((db, shape, name) => entityReadQuery(db, shape).prepare(name), 'cellplane_entity_read');
const rememberedEntityRead = oncePerHandle((db, name) => rememberedEntityReadQuery(db).prepare(name), 'cellplane_entity_read_remembered');

/**
 * GET .../entities/{name} for a caller without cell scopes, when the entity
 * exists: the entity as its response's JSON, written by Postgres
 * (entityJson), the caller settled. Undefined for anything else. The row is
 * read as the driver returns it (./driver-rows.ts): the caller's columns by
 * their aliases.
 */
export async function readEntityPlainly(ctx: ServiceContext, ref: EnvRef, name: string): Promise<EntityJsonText | undefined> {
  const access = plainAccessValues(ctx, ref);
  if (!access) return undefined;
  const key = plainCallerKey(access.tokenHash, ref, 'data:read');
  const remembered = ctx.plainCallers?.recall(key, access.now);
  if (remembered) {
    const [row] = await rowsOf<{ access_epoch: string; entity_json: EntityJsonText | null }>(rememberedEntityRead(ctx), { envId: remembered.row.envId, name });
    if (row?.access_epoch === remembered.epoch) {
      // nothing the answer rests on has changed; no entity is the usual way's 404
      if (row.entity_json === null) return undefined;
      ctx.callerState.settle(remembered.caller);
      return row.entity_json;
    }
    // something moved the epoch since: the token is checked in full, and remembered again
    ctx.plainCallers?.forget(key);
  }
  const [row] = await rowsOf<Record<string, unknown> & { access_epoch: string | null; entity_json: EntityJsonText }>(plainEntityRead(ctx, ref), {
    ...access.values,
    name,
  });
  if (!row) return undefined;
  settleAndRemember(ctx, key, plainAccessRowOf(row), row.access_epoch, ref, access.now);
  return row.entity_json;
}

// --- create ------------------------------------------------------------------------

/** Entity type definitions as a create last validated against them (typeDefinitionCache). */
const validatedTypes = typeDefinitionCache<{ definition: EntityTypeDefinition; version: EntityTypeVersion }>();
export const rememberEntityType = validatedTypes.remember;
export const rememberedEntityType = validatedTypes.recall;

const entityColumns = getTableColumns(entities);
type EntityColumns = typeof entityColumns;

const plainEntityCreate = perHandle((db, shape, name) => {
  const caller = db.$with('caller').as(plainEnvironmentAccess(db, shape, 'data:write'));
  // the type row, share-locked to commit like the transactional path's, and only at the version validated against
  const entityType = db.$with('entity_type', { name: entityTypes.name }).as(sql`
    select ${entityTypes.name} from ${entityTypes}, ${caller}
    where ${entityTypes.id} = ${sql.placeholder('typeId')} and ${entityTypes}.xmin = ${sql.placeholder('typeXmin')}::xid
      and ${entityTypes.projectId} = ${caller.projectId}
    for share of ${entityTypes}`);
  // a taken name inserts nothing, and then nothing below happens either
  const inserted = db.$with('inserted', entityColumns).as(sql`
    insert into ${entities} (org_id, project_id, env_id, entity_type_name, name, state, properties, labels,
                             last_synced_at, sync_source, created_at, updated_at)
    select ${caller.orgId}, ${caller.projectId}, ${caller.envId}, ${entityType.name}, ${sql.placeholder('name')},
           ${sql.placeholder('state')}, ${sql.placeholder('properties')}::jsonb, ${sql.placeholder('labels')}::jsonb,
           ${sql.placeholder('lastSyncedAt')}::timestamptz, ${sql.placeholder('syncSource')}::text,
           ${sql.placeholder('now')}::timestamptz, ${sql.placeholder('now')}::timestamptz
    from ${caller}, ${entityType}
    on conflict (env_id, name) do nothing
    returning *`);
  // no ON CONFLICT: a key another entity holds fails the whole statement, and the caller takes the transactional path
  const uniqueKeys = db.$with('unique_keys', { claimed: sql<number>`1` }).as(sql`
    insert into ${entityUniqueKeys} (env_id, entity_type_name, constraint_key, value_key, entity_id)
    select ${inserted.envId}, ${inserted.entityTypeName}, key.constraint_key, key.value_key, ${inserted.id}
    from ${inserted}, jsonb_to_recordset(${sql.placeholder('uniqueKeys')}::jsonb) as key(constraint_key text, value_key text)
    returning 1 as claimed`);
  // recordEntityChange's two steps (src/stream/change-log.ts). The counter's row lock comes last, as on the
  // transactional path: counting unique_keys makes Postgres claim the keys before it reaches the counter's row.
  const changeSeq = db.$with('change_seq', { changeSeq: environments.changeSeq }).as(sql`
    update ${environments} set change_seq = change_seq + 1
    where ${environments.id} = (select ${inserted.envId} from ${inserted}) and (select count(*) from ${uniqueKeys}) >= 0
    returning change_seq`);
  // the change's entity: the API's Entity, built by toEntity from the request, with the ids only the statement knows;
  // the row comes back as the log holds it, for the stream's hub (ChangeStreams.publish)
  const change = db.$with('change', CHANGE_LOG_COLUMNS).as(sql`
    insert into ${entityChanges} (env_id, seq, type, entity_id, entity_name, entity_type_name, entity)
    select ${inserted.envId}, ${changeSeq.changeSeq}, 'entity.created', ${inserted.id}, ${inserted.name}, ${inserted.entityTypeName},
           ${sql.placeholder('entity')}::jsonb || jsonb_build_object('id', ${inserted.id}, 'orgId', ${inserted.orgId},
             'projectId', ${inserted.projectId}, 'envId', ${inserted.envId})
    from ${inserted}, ${changeSeq}
    returning ${sql.join(Object.values(CHANGE_LOG_COLUMNS).map((column) => sql.identifier(column.name)), sql`, `)}`);
  const entity = Object.fromEntries(Object.keys(entityColumns).map((key) => [key, inserted[key as keyof EntityColumns]])) as {
    [K in keyof EntityColumns]: (typeof inserted)[K];
  };
  const changeRow = Object.fromEntries(Object.keys(CHANGE_LOG_COLUMNS).map((key) => [key, change[key as keyof typeof CHANGE_LOG_COLUMNS]])) as {
    [K in keyof typeof CHANGE_LOG_COLUMNS]: (typeof change)[K];
  };
  return db
    .with(caller, entityType, inserted, uniqueKeys, changeSeq, change)
    .select({ caller: plainAccessColumns(caller), entity, change: changeRow })
    .from(inserted)
    .innerJoin(caller, sql`true`)
    .innerJoin(change, sql`true`)
    .prepare(name);
}, 'cellplane_entity_create');

/** What the create statement writes, validated by the caller against `type`. */
export interface PlainCreate {
  type: { definition: EntityTypeDefinition; version: EntityTypeVersion };
  name: string;
  state: string;
  properties: Record<string, unknown>;
  labels: Record<string, string>;
  lastSyncedAt: Date | null;
  syncSource: string | null;
  uniqueKeys: { constraintKey: string; valueKey: string }[];
  now: Date;
}

/**
 * POST .../entities in one statement, for a caller without cell scopes, with
 * the values already validated against `type`: the token and tenancy check,
 * the type's share lock and version check, the entity, its unique keys and
 * its change-log row, all or nothing. Undefined when it wrote nothing (any
 * rule not plainly met, the type changed, the name or a unique value taken,
 * the environment going away): the transactional path then gives the answer.
 * Without a transaction there is no BEGIN or COMMIT to send, and one
 * round trip is left of six.
 */
export async function createEntityPlainly(ctx: ServiceContext, ref: EnvRef, create: PlainCreate): Promise<EntityRow | undefined> {
  const state = ctx.callerState;
  if (state.resolved || state.tokenHash === undefined) return undefined;
  const draft: EntityRow = {
    // set by the statement: the Entity of the change row gets them there too
    id: '',
    orgId: '',
    projectId: '',
    envId: '',
    entityTypeName: create.type.definition.name,
    name: create.name,
    state: create.state,
    properties: create.properties,
    labels: create.labels,
    lastSyncedAt: create.lastSyncedAt,
    syncSource: create.syncSource,
    createdAt: create.now,
    updatedAt: create.now,
  };
  let row;
  try {
    [row] = await plainEntityCreate(ctx, ref).execute({
      tokenHash: state.tokenHash!,
      org: ref.org,
      project: ref.project,
      env: ref.env,
      now: create.now.toISOString(),
      typeId: create.type.version.id,
      typeXmin: create.type.version.xmin,
      name: create.name,
      state: create.state,
      properties: JSON.stringify(create.properties),
      labels: JSON.stringify(create.labels),
      lastSyncedAt: create.lastSyncedAt?.toISOString() ?? null,
      syncSource: create.syncSource,
      uniqueKeys: JSON.stringify(create.uniqueKeys.map((key) => ({ constraint_key: key.constraintKey, value_key: key.valueKey }))),
      entity: JSON.stringify(toEntity(draft)),
    });
  } catch (error) {
    // a unique value another entity holds, or the environment or type deleted meanwhile: nothing was written
    const code = databaseError(error)?.code;
    if (code === SQLSTATE.uniqueViolation || code === SQLSTATE.foreignKeyViolation) return undefined;
    throw error;
  }
  if (!row) return undefined;
  settlePlainCaller(state, row.caller, ref, create.now);
  noteCommittedChange(ctx, row.entity.envId, changeRowOf(row.change));
  return row.entity;
}

/** A change the request's own statement logged, with its row as the log holds it: published with it once the request succeeds (ServiceContext.committedChanges). */
function noteCommittedChange(ctx: ServiceContext, envId: string, change: ChangeRow): void {
  const noted = ctx.committedChanges.get(envId);
  if (noted) noted.push(change);
  else ctx.committedChanges.set(envId, [change]);
}
