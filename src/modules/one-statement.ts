import type { EnvRef } from '../auth/access';
import type { ServiceContext } from '../context';
import type { Queryable } from '../db/client';
import { isUuid } from './names';

/**
 * What the one-statement paths of the hottest requests share
 * (src/modules/entities/fast-paths.ts, src/modules/relationships/fast-path.ts).
 */

/** How the path names its organization and project: by id or by slug. The statements differ. */
export type PathShape = { orgById: boolean; projectById: boolean };

/**
 * One prepared statement per database handle and path shape, built on first
 * use and named `${prefix}_<shape>` where Platform.namedStatements allows, so
 * Postgres parses it once per connection and keeps its generic plan.
 */
export function perHandle<T>(build: (db: Queryable, shape: PathShape, name: string) => T, prefix: string) {
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

/**
 * What plainEnvironmentAccess's placeholders take for this request (the
 * token's hash, the path's tenancy, the time), or undefined when there is no
 * token to fold in (bootstrap mode, a user, a caller already settled).
 */
export function plainAccessValues(ctx: ServiceContext, ref: EnvRef): PlainAccess | undefined {
  const state = ctx.callerState;
  if (state.resolved || state.tokenHash === undefined) return undefined;
  return new PlainAccess(state.tokenHash, ref, ctx.clock.now());
}

/**
 * A request's token and tenancy for a one-statement path. `values`, the
 * placeholders' values, are built when a statement needs them: a caller
 * remembered by its access epoch (src/auth/plain-callers.ts) needs only the
 * hash and the time, and the time's text is the dearest part of them.
 */
export class PlainAccess {
  #values: PlainAccessPlaceholders | undefined;

  constructor(
    readonly tokenHash: string,
    private readonly ref: EnvRef,
    readonly now: Date,
  ) {}

  get values(): PlainAccessPlaceholders {
    return (this.#values ??= { tokenHash: this.tokenHash, org: this.ref.org, project: this.ref.project, env: this.ref.env, now: this.now.toISOString() });
  }
}

export type PlainAccessPlaceholders = { tokenHash: string; org: string; project: string; env: string; now: string };

/** One prepared statement per database handle, whatever the path's shape (it names no tenancy), named `name` where allowed. */
export function oncePerHandle<T>(build: (db: Queryable, name: string) => T, name: string) {
  const built = new WeakMap<Queryable, T>();
  return (ctx: ServiceContext): T => {
    let statement = built.get(ctx.db);
    if (!statement) built.set(ctx.db, (statement = build(ctx.db, ctx.namedStatements ? name : '')));
    return statement;
  };
}

/**
 * Catalog type definitions (entity or relationship types) as a create last
 * validated against them, per process, keyed by the path's organization and
 * project (as written: id or slug) and the type's name. Only a hint: the
 * create statement re-checks, under its share lock, that the type row is
 * still the version the definition was read from (its id and xmin), and
 * does nothing otherwise. An entry lives a minute at most, so an xmin cannot
 * come round again (2^32 transactions) while it is in use.
 */
export function typeDefinitionCache<T extends { definition: { name: string } }>() {
  const TTL_MS = 60_000;
  const SIZE = 1000;
  const entries = new Map<string, T & { at: number }>();
  const keyOf = (ref: EnvRef, typeName: string) => JSON.stringify([ref.org, ref.project, typeName]);
  return {
    remember(ctx: ServiceContext, ref: EnvRef, type: T): void {
      const key = keyOf(ref, type.definition.name);
      entries.delete(key);
      if (entries.size >= SIZE) entries.delete(entries.keys().next().value!);
      entries.set(key, { ...type, at: ctx.clock.now().getTime() });
    },
    recall(ctx: ServiceContext, ref: EnvRef, typeName: string): T | undefined {
      const entry = entries.get(keyOf(ref, typeName));
      if (!entry) return undefined;
      const age = ctx.clock.now().getTime() - entry.at;
      return age >= 0 && age < TTL_MS ? entry : undefined;
    },
  };
}
