import { and, eq, sql } from 'drizzle-orm';
import { plainAccessColumns, plainEnvironmentAccess, settlePlainCaller, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { entities } from '../../db/schema';
import { isUuid } from '../names';
import type { EntityRow } from './service';

/**
 * The hottest entity requests in one round trip each. A request with a
 * token is usually a plain success: the token is live, reaches this
 * environment, holds the permission, has no cell scopes, and the entity is
 * there. These statements fold the token and tenancy lookup
 * (plainEnvironmentAccess in src/auth/access.ts) into the entity's own
 * statement and answer only that case. Any other answer — no row — sends the
 * request down the usual path (authorizeEnvironment, then the service's
 * queries), which is what gives every 401, 403, 404 and scoped answer, as
 * before. The token is still checked against the database on every request.
 *
 * Each statement is prepared once per database handle and path shape (org and
 * project by id or by slug), named where Platform.namedStatements allows, so
 * Postgres parses it once per connection and keeps its generic plan.
 */

type Shape = { orgById: boolean; projectById: boolean };

/** One prepared statement per database handle and shape, built on first use. */
function perHandle<T>(build: (db: Queryable, shape: Shape, name: string) => T, prefix: string) {
  const built = new WeakMap<Queryable, Map<string, T>>();
  return (ctx: ServiceContext, ref: EnvRef): T => {
    const db = ctx.db;
    let byShape = built.get(db);
    if (!byShape) built.set(db, (byShape = new Map()));
    const shape = { orgById: isUuid(ref.org), projectById: isUuid(ref.project) };
    const key = `${shape.orgById ? 'id' : 'slug'}_${shape.projectById ? 'id' : 'slug'}`;
    let statement = byShape.get(key);
    if (!statement) byShape.set(key, (statement = build(db, shape, ctx.namedStatements ? `${prefix}_${key}` : '')));
    return statement;
  };
}

const plainEntityRead = perHandle((db, shape, name) => {
  const caller = plainEnvironmentAccess(db, shape, 'data:read').as('caller');
  return db
    .select({ caller: plainAccessColumns(caller), entity: entities })
    .from(caller)
    .innerJoin(entities, and(eq(entities.envId, caller.envId), eq(entities.name, sql.placeholder('name'))))
    .limit(1)
    .prepare(name);
}, 'cellplane_entity_read');

/**
 * GET .../entities/{name} for a caller without cell scopes, when the entity
 * exists: the entity, the caller settled. Undefined for anything else.
 */
export async function readEntityPlainly(ctx: ServiceContext, ref: EnvRef, name: string): Promise<EntityRow | undefined> {
  const state = ctx.callerState;
  if (state.resolved) return undefined; // bootstrap mode: no token to fold in
  const now = ctx.clock.now();
  const [row] = await plainEntityRead(ctx, ref).execute({
    tokenHash: state.tokenHash!,
    org: ref.org,
    project: ref.project,
    env: ref.env,
    name,
    now: now.toISOString(),
  });
  if (!row) return undefined;
  settlePlainCaller(state, row.caller, ref, now);
  return row.entity;
}
