import { and, asc, eq, gt, gte, like, lt, sql, type SQL } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { entities } from '../../db/schema';
import { ApiError } from '../../http/errors';
import { decodeCursor, splitPage } from '../../http/pagination';
import { callerCellScope, cellMembershipCondition, getCell } from '../cells/membership';
import type { Entity, EntityListQuery } from './schemas';
import { toEntity } from './service';

/**
 * GET ENV/entities: one page of an environment's entities in name order.
 * Keyset pagination: the cursor is the last name seen, and the query reads
 * `name > cursor ORDER BY name LIMIT n+1`. Every filter, the caller's cell
 * scope included, is in the query. docs/entity-lists.md has the measurements
 * behind the rest of this file.
 *
 * A page costs what the first page costs, at any depth, because each filter
 * is read one of two ways, neither depending on the cursor:
 * - entityType, state, syncSource and namePrefix are a range of one btree
 *   index ending in `name` ((env_id, <column>, name); namePrefix a range of
 *   (env_id, name)): the page is the next n+1 entries of that range;
 * - labels, cell and updatedSince cannot be such a range. The planner either
 *   walks the name order and drops what does not match (when matches are
 *   common), or gathers every match (the labels' GIN index, the cell's
 *   members) and sorts them (when rare). A walk costs the same on every page
 *   only while matches are spread over the name order; where they stop early,
 *   the last page walks the rest of the environment to find none.
 * Which way is cheaper depends on the filter's values, not on the cursor; but
 * Postgres plans `name > 'x'` knowing how few names lie after 'x', and so
 * read the first and the last pages of one filter different ways. The cursor
 * therefore reaches the planner as a subquery, whose value it does not see:
 * every page of one filter is planned alike.
 */
export async function listEntities(
  ctx: ServiceContext,
  ref: EnvRef,
  query: EntityListQuery,
): Promise<{ page: Entity[]; next: string | null }> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const after = query.cursor === undefined ? FIRST_PAGE : lastNameOf(query.cursor);
  const labels = parseLabelFilters(query.label);
  const cell = query.cell === undefined ? undefined : cellMembershipCondition(await getCell(ctx.db, project.id, query.cell));
  const scope = await callerCellScope(ctx, project.id);
  const equalities = EQUALITY_FILTERS.filter((filter) => query[filter] !== undefined);
  const shape: PageShape = { equalities, namePrefix: query.namePrefix !== undefined };
  const values = {
    envId: env.id,
    after,
    entityType: query.entityType,
    state: query.state,
    syncSource: query.syncSource,
    ...(query.namePrefix === undefined ? {} : namePrefixBounds(query.namePrefix)),
    limit: query.limit + 1,
  };
  const rest = [
    labels,
    query.updatedSince === undefined ? undefined : gte(entities.updatedAt, new Date(query.updatedSince)),
    cell,
    scope,
  ].filter((condition): condition is SQL => condition !== undefined);
  const statement =
    rest.length === 0 && equalities.length <= 1 ? preparedPage(ctx, shape) : buildPage(ctx.db, shape, rest, '');
  const rows = await statement.execute(values);
  const { page, next } = splitPage(rows, query.limit, (row) => [row.name]);
  return { page: page.map(toEntity), next };
}

/** Sorts before every entity name (names are never empty), so the first page is `name > ''`. */
const FIRST_PAGE = '';

function lastNameOf(cursor: string): string {
  const [last] = decodeCursor(cursor, 1);
  if (typeof last !== 'string') {
    throw new ApiError('validation_failed', 'cursor is not valid: pass the X-Next-Cursor value unchanged', [
      { path: 'cursor', message: 'is not a cursor this endpoint issued' },
    ]);
  }
  return last;
}

/** The filters each answered by an index (env_id, <column>, name) (src/db/schema/runtime.ts). */
const EQUALITY_FILTERS = ['entityType', 'state', 'syncSource'] as const;
type EqualityFilter = (typeof EQUALITY_FILTERS)[number];

const EQUALITY_COLUMNS = {
  entityType: entities.entityTypeName,
  state: entities.state,
  syncSource: entities.syncSource,
} as const satisfies Record<EqualityFilter, unknown>;

/** Which placeholders a page's statement has; its values fill them. */
type PageShape = { equalities: EqualityFilter[]; namePrefix: boolean };

/**
 * A page's statement: the placeholders of `shape`, then `rest` (conditions
 * carrying their own parameters). Named (`name`), it is prepared once per
 * connection; unnamed, planned on every execution.
 */
function buildPage(db: Queryable, shape: PageShape, rest: SQL[], name: string) {
  return db
    .select()
    .from(entities)
    .where(
      and(
        eq(entities.envId, sql.placeholder('envId')),
        // a subquery, so the planner does not see the cursor (see listEntities)
        gt(entities.name, sql`(select ${sql.placeholder('after')}::text)`),
        ...shape.equalities.map((filter) => eq(EQUALITY_COLUMNS[filter], sql.placeholder(filter))),
        shape.namePrefix ? namePrefixCondition() : undefined,
        ...rest,
      ),
    )
    .orderBy(asc(entities.name))
    .limit(sql.placeholder('limit'))
    .prepare(name);
}

/**
 * The statements of pages that are one index range: no filter, or one of
 * the equality filters, each with or without namePrefix. These have one
 * right plan whatever the values, so Postgres may keep a generic plan for
 * them: a named statement is parsed and planned once per connection.
 * Everything else is planned per request, knowing its values (a generic
 * plan would guess a label's frequency, and walk the whole environment for
 * a rare one or gather a quarter of it for a common one).
 */
const preparedPages = new WeakMap<Queryable, Map<string, ReturnType<typeof buildPage>>>();

function preparedPage(ctx: ServiceContext, shape: PageShape) {
  const db = ctx.db;
  let byShape = preparedPages.get(db);
  if (!byShape) preparedPages.set(db, (byShape = new Map()));
  const key = [...shape.equalities, ...(shape.namePrefix ? ['namePrefix'] : [])].join('_') || 'all';
  let statement = byShape.get(key);
  if (!statement) byShape.set(key, (statement = buildPage(db, shape, [], ctx.namedStatements ? `cellplane_entity_list_${key}` : '')));
  return statement;
}

function parseLabelFilters(label: EntityListQuery['label']): SQL | undefined {
  const filters = label === undefined ? [] : Array.isArray(label) ? label : [label];
  if (filters.length === 0) return undefined;
  const wanted: Record<string, string> = {};
  let contradictory = false;
  filters.forEach((filter, i) => {
    const colon = filter.indexOf(':');
    if (colon <= 0) {
      throw new ApiError('validation_failed', `label filter "${filter}" is not key:value`, [
        { path: `label.${i}`, message: 'must be key:value' },
      ]);
    }
    const key = filter.slice(0, colon);
    const value = filter.slice(colon + 1);
    if (key in wanted && wanted[key] !== value) contradictory = true;
    wanted[key] = value;
  });
  // one containment test, which the GIN index on labels answers
  return contradictory ? sql`false` : sql`${entities.labels} @> ${JSON.stringify(wanted)}::jsonb`;
}

/**
 * Names starting with `prefix`, as an index range on (env_id, name). Postgres
 * only derives a range from LIKE under the "C" collation, not C.UTF-8, so
 * the bounds are spelled out: entity names are ASCII (DECISIONS §1), which
 * under a code-point collation (C, POSIX, C.UTF-8; PGlite is C) all sort
 * below `prefix + U+007F`. The LIKE (wildcards escaped) keeps the answer
 * exact; test/node/entities.test.ts checks that the database sorts names by
 * code point (a linguistic collation would make the range miss names).
 */
function namePrefixCondition(): SQL {
  return and(
    gte(entities.name, sql.placeholder('prefixFrom')),
    lt(entities.name, sql.placeholder('prefixTo')),
    like(entities.name, sql.placeholder('prefixPattern')),
  )!;
}

function namePrefixBounds(prefix: string) {
  return {
    prefixFrom: prefix,
    prefixTo: `${prefix}\u007f`,
    prefixPattern: `${prefix.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`,
  };
}
