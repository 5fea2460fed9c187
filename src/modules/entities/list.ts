import { and, asc, Column, eq, getTableColumns, gt, gte, is, like, lt, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { authorizeEnvironment, plainAccessColumns, plainAccessRowOf, plainEnvironmentAccess, settlePlainCaller, type EnvRef } from '../../auth/access';
import { accessEpochRow, accessEpochValue, currentAccessEpoch, plainCallerKey, settleAndRemember, type RememberedCaller } from '../../auth/plain-callers';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { accessEpoch, entities } from '../../db/schema';
import { ApiError } from '../../http/errors';
import { decodeCursor, splitPage } from '../../http/pagination';
import { callerCellScope, cellMembershipCondition, getCell } from '../cells/membership';
import { oncePerHandle, perHandle, plainAccessValues, type PathShape } from '../one-statement';
import { entityOf, rowsOf, type EntityDriverRow } from './driver-rows';
import { MAX_PAGE_SIZE, type Entity, type EntityListQuery } from './schemas';

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
  // a token's plain 200 in one statement or two (listPlainly); otherwise the checks below answer
  const plain = await listPlainly(ctx, ref, query);
  if (plain) return plain;
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const after = query.cursor === undefined ? FIRST_PAGE : lastNameOf(query.cursor);
  const labels = parseLabelFilters(query.label);
  const cell = query.cell === undefined ? undefined : cellMembershipCondition(await getCell(ctx.db, project.id, query.cell));
  const scope = await callerCellScope(ctx, project.id);
  const shape = pageShape(query, labels !== undefined);
  // without a cell or a scope, the page's statement is built once per database handle and shape
  const statement = cell || scope ? buildPage(ctx.db, shape, [cell, scope], '') : preparedPage(ctx, shape);
  return pageOf(await rowsOf(statement, pageValues(query, env.id, after, labels)), query);
}

function pageOf(rows: EntityDriverRow[], query: EntityListQuery): { page: Entity[]; next: string | null } {
  const { page, next } = splitPage(rows, query.limit, (row) => [row.name]);
  return { page: page.map(entityOf), next };
}

// --- a token's plain list ---------------------------------------------------------

/**
 * The list of a caller plainly allowed to read it — a live token without
 * cell scopes, holding data:read, not pinned elsewhere, its organization not
 * suspended — checked by plainEnvironmentAccess (src/auth/access.ts) instead
 * of authorizeEnvironment. When it matches no caller, the request goes the
 * usual way (listEntities), which gives every 401, 403, 404 and scoped answer
 * as before; a cell filter goes the usual way too (the cell's row comes
 * first). The token is checked against the database on every request.
 *
 * A page that is one index range (isIndexRange) is one named statement,
 * planned once per connection: the check as a WITH item, then its row and
 * the page's rows, read only when that row exists. So a found caller answers
 * one row more than the page (a page of no entities included), and no row
 * at all means the check did not pass.
 *
 * Any other page is two statements: the check (named, planned once), then
 * the page (unnamed, planned with its values), as on the usual way. Folded
 * into one statement, the page's statement would be planned per request with
 * the check inside it, and parsing and planning the check's four tables
 * costs Postgres more than the round trip it saves (docs/entity-lists.md).
 * Once the check's answer is remembered (src/auth/plain-callers.ts), such a
 * page is one statement: the access epoch's one row beside the page's rows,
 * which costs the planner next to nothing.
 */
async function listPlainly(ctx: ServiceContext, ref: EnvRef, query: EntityListQuery): Promise<{ page: Entity[]; next: string | null } | undefined> {
  if (query.cell !== undefined) return undefined;
  const access = plainAccessValues(ctx, ref);
  if (!access) return undefined;
  let labels: string | null | undefined;
  try {
    labels = parseLabelFilters(query.label);
  } catch {
    return undefined; // a 400, which the usual way gives once it has settled the caller (a 401 comes first)
  }
  const shape = pageShape(query, labels !== undefined);
  if (!isIndexRange(shape)) {
    const key = plainCallerKey(access.tokenHash, ref, 'data:read');
    const remembered = ctx.plainCallers?.recall(key, access.now);
    if (remembered) {
      const page = await rememberedPage(ctx, shape, query, labels, remembered);
      if (page) return page;
      ctx.plainCallers?.forget(key);
    }
    const [caller] = await rowsOf<CallerRow & { access_epoch: string | null }>(plainCheck(ctx, ref), access.values);
    if (!caller) return undefined;
    const row = plainAccessRowOf(caller);
    settleAndRemember(ctx, key, row, caller.access_epoch, ref, access.now);
    // the caller is settled: a bad cursor is the usual way's 400
    const after = query.cursor === undefined ? FIRST_PAGE : lastNameOf(query.cursor);
    return pageOf(await rowsOf(preparedPage(ctx, shape), pageValues(query, row.envId, after, labels)), query);
  }
  let after: string;
  try {
    after = query.cursor === undefined ? FIRST_PAGE : lastNameOf(query.cursor);
  } catch {
    return undefined; // as a bad label filter
  }
  const rows = await rowsOf<EntityDriverRow & CallerRow>(plainPage(ctx, ref, shape), { ...pageValues(query, '', after, labels), ...access.values });
  // the caller's row, first in practice; the page's rows keep their order whatever comes between them
  const callerAt = rows.findIndex((row) => row[CALLER_MARK] !== null);
  if (callerAt < 0) return undefined;
  settlePlainCaller(ctx.callerState, plainAccessRowOf(rows[callerAt]!), ref, access.now);
  return pageOf(callerAt === 0 ? rows.slice(1) : rows.filter((_, i) => i !== callerAt), query);
}

/** The columns of the caller's row, by their aliases (plainAccessRowOf reads them); null in the page's rows. */
type CallerRow = Record<string, unknown>;

/** A column only the caller's row fills: how it is told from the page's rows. */
const CALLER_MARK = 'caller_token_id';

/** The check alone, with the access epoch it was read at, for the pages planned per request: named, built once per database handle and path shape. */
const plainCheck = perHandle((db, access, name) => {
  const checked = plainEnvironmentAccess(db, access, 'data:read').as('checked');
  return db
    .select({ ...plainAccessColumns(checked), epoch: currentAccessEpoch().as('access_epoch') })
    .from(checked)
    .prepare(name);
}, 'cellplane_entity_list_check');

/**
 * A page planned per request for a remembered caller (src/auth/plain-callers.ts),
 * in one statement: the access epoch's row and the page's rows. The page, or
 * undefined when the epoch has moved (the caller is then checked in full) or
 * the cursor is not one (the usual way answers its 400, after the check).
 */
async function rememberedPage(
  ctx: ServiceContext,
  shape: PageShape,
  query: EntityListQuery,
  labels: string | null | undefined,
  remembered: RememberedCaller,
): Promise<{ page: Entity[]; next: string | null } | undefined> {
  let after: string;
  try {
    after = query.cursor === undefined ? FIRST_PAGE : lastNameOf(query.cursor);
  } catch {
    return undefined;
  }
  const rows = await rowsOf<EntityDriverRow & { [EPOCH_MARK]: string | null }>(
    rememberedPages(ctx, shape),
    pageValues(query, remembered.row.envId, after, labels),
  );
  // the epoch's row, first in practice; the page's rows keep their order whatever comes between them
  const epochAt = rows.findIndex((row) => row[EPOCH_MARK] !== null);
  if (epochAt < 0 || rows[epochAt]![EPOCH_MARK] !== remembered.epoch) return undefined;
  ctx.callerState.settle(remembered.caller);
  return pageOf(epochAt === 0 ? rows.slice(1) : rows.filter((_, i) => i !== epochAt), query);
}

/** A column only the epoch's row fills. */
const EPOCH_MARK = 'access_epoch';

/** The epoch's row, then a page's rows (nulls, then the entity's columns): unnamed, planned with its values like the page alone. */
function buildRememberedPage(db: Queryable, shape: PageShape) {
  const epochRow = db
    .select({
      [EPOCH_MARK]: accessEpochValue().as(EPOCH_MARK),
      ...Object.fromEntries(Object.values(entityColumns).map((column) => [column.name, sql`null`.as(column.name)])),
    })
    .from(accessEpoch)
    .where(accessEpochRow());
  const pageRows = pageSelect(db, shape, sql.placeholder('envId'), [], {
    [EPOCH_MARK]: sql`null`,
    ...Object.fromEntries(Object.values(entityColumns).map((column) => [column.name, column])),
  });
  const rows = epochRow.unionAll(pageRows as unknown as typeof epochRow).as('rows');
  return db.select().from(rows).prepare('');
}

const rememberedPageStatements = new Map<string, (ctx: ServiceContext) => ReturnType<typeof buildRememberedPage>>();

function rememberedPages(ctx: ServiceContext, shape: PageShape) {
  const key = shapeKey(shape);
  let statement = rememberedPageStatements.get(key);
  if (!statement) rememberedPageStatements.set(key, (statement = oncePerHandle((db) => buildRememberedPage(db, shape), '')));
  return statement(ctx);
}

const entityColumns = getTableColumns(entities);

/** An index range's page, the check folded in: named, built once per database handle, path shape and page shape. */
function buildPlainPage(db: Queryable, access: PathShape, shape: PageShape, name: string) {
  const caller = db.$with('caller').as(plainEnvironmentAccess(db, access, 'data:read'));
  const callerColumns = Object.fromEntries(Object.entries(plainAccessColumns(caller)).map(([key, column]) => [`caller_${key}`, column]));
  // the first branch names the statement's columns: the caller's, then the entity's
  const callerRow = db
    .select({ ...callerColumns, ...Object.fromEntries(Object.values(entityColumns).map((column) => [column.name, sql`null`.as(column.name)])) })
    .from(caller);
  const pageRows = pageSelect(db, shape, sql`(select ${caller.envId} from ${caller})`, [], {
    ...Object.fromEntries(Object.keys(callerColumns).map((key) => [key, sql`null`])),
    ...Object.fromEntries(Object.values(entityColumns).map((column) => [column.name, column])),
  });
  const rows = callerRow.unionAll(pageRows as unknown as typeof callerRow).as('rows');
  return db.with(caller).select().from(rows).prepare(name);
}

const plainPages = new Map<string, (ctx: ServiceContext, ref: EnvRef) => ReturnType<typeof buildPlainPage>>();

function plainPage(ctx: ServiceContext, ref: EnvRef, shape: PageShape) {
  const key = shapeKey(shape);
  let statement = plainPages.get(key);
  if (!statement) {
    plainPages.set(key, (statement = perHandle((db, access, name) => buildPlainPage(db, access, shape, name), `cellplane_entity_list_plain_${key}`)));
  }
  return statement(ctx, ref);
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

/**
 * Which placeholders a page's statement has; its values fill them. Each
 * filter but the cell (and a cell-scoped caller's cells) is a placeholder,
 * so a statement is built once per shape and database handle.
 */
type PageShape = { equalities: EqualityFilter[]; namePrefix: boolean; labels: boolean; updatedSince: boolean };

function pageShape(query: EntityListQuery, labels: boolean): PageShape {
  return {
    equalities: EQUALITY_FILTERS.filter((filter) => query[filter] !== undefined),
    namePrefix: query.namePrefix !== undefined,
    labels,
    updatedSince: query.updatedSince !== undefined,
  };
}

const shapeKey = (shape: PageShape) =>
  [...shape.equalities, ...(['namePrefix', 'labels', 'updatedSince'] as const).filter((filter) => shape[filter])].join('_') || 'all';

/**
 * Whether every page of the shape is a range of one index: no filter, or
 * one of the equality filters, each with or without namePrefix. These have
 * one right plan whatever the values, so Postgres may keep a generic plan
 * for them: a named statement is parsed and planned once per connection.
 * Everything else is planned per request, knowing its values (a generic
 * plan would guess a label's frequency, and walk the whole environment for
 * a rare one or gather a quarter of it for a common one). Sent unnamed, a
 * statement is planned at every execution with the values bound.
 */
const isIndexRange = (shape: PageShape) => !shape.labels && !shape.updatedSince && shape.equalities.length <= 1;

/** The values of a page's placeholders. `labels`: parseLabelFilters' answer. */
function pageValues(query: EntityListQuery, envId: string, after: string, labels: string | null | undefined) {
  return {
    envId,
    after,
    entityType: query.entityType,
    state: query.state,
    syncSource: query.syncSource,
    ...(query.namePrefix === undefined ? {} : namePrefixBounds(query.namePrefix)),
    labels,
    updatedSince: query.updatedSince === undefined ? undefined : new Date(query.updatedSince).toISOString(),
    limit: query.limit + 1,
  };
}

/** The conditions of a page of `shape` on `entities`, in the environment `envId`. */
function pageConditions(shape: PageShape, envId: SQL | Placeholder): SQL {
  return and(
    eq(entities.envId, envId),
    // a subquery, so the planner does not see the cursor (see listEntities)
    gt(entities.name, sql`(select ${sql.placeholder('after')}::text)`),
    ...shape.equalities.map((filter) => eq(EQUALITY_COLUMNS[filter], sql.placeholder(filter))),
    shape.namePrefix ? namePrefixCondition() : undefined,
    // one containment test, which the GIN index on labels answers; null (contradictory filters) matches nothing
    shape.labels ? sql`${entities.labels} @> ${sql.placeholder('labels')}::jsonb` : undefined,
    shape.updatedSince ? sql`${entities.updatedAt} >= ${sql.placeholder('updatedSince')}::timestamptz` : undefined,
  )!;
}

/**
 * The first `limit` (a placeholder) entities of a page of `shape` and `rest`
 * (conditions carrying their own parameters: a cell, a caller's cells), in
 * name order, as `fields`.
 *
 * An index range (isIndexRange, nothing in `rest`) is a named statement, and
 * Postgres plans one anew on every execution unless its generic plan looks
 * no costlier than its custom ones. A generic plan cannot see the LIMIT and
 * counts on a tenth of the rows; a custom one saw the page size, and so
 * looked cheaper: the named page statements were planned on every execution
 * (docs/entity-lists.md). So the page size reaches the planner as a
 * subquery, like the cursor: both plans count on a tenth of the rows, and the
 * generic plan, which for an index range is the custom one, is kept. An
 * inner LIMIT of the largest page, a constant, bounds that tenth: however
 * large the environment, the planner reads a page as at most 100 entries of
 * the index range. Other pages are planned on every execution anyway, seeing
 * the page size, on which the choice to walk or to gather depends.
 */
function pageSelect<F extends Record<string, unknown>>(db: Queryable, shape: PageShape, envId: SQL | Placeholder, rest: (SQL | undefined)[], fields: F) {
  const where = and(pageConditions(shape, envId), ...rest);
  // a cell or a cell-scoped caller's cells are no index range: that page is planned with its page size
  if (!isIndexRange(shape) || rest.some((condition) => condition !== undefined)) {
    return db.select(fields as never).from(entities).where(where).orderBy(asc(entities.name)).limit(sql.placeholder('limit'));
  }
  const capped = db
    .select()
    .from(entities)
    .where(where)
    .orderBy(asc(entities.name))
    // written into the statement: drizzle would send a number as a parameter
    .limit(sql.raw(String(MAX_PAGE_SIZE + 1)) as unknown as number)
    .as('capped');
  const cappedFields = Object.fromEntries(
    Object.entries(fields).map(([key, field]) => [key, is(field, Column) ? capped[(entityKeys.get(field) ?? '') as keyof typeof capped] : field]),
  );
  return db
    .select(cappedFields as never)
    .from(capped)
    .orderBy(asc(capped.name))
    .limit(sql`(select ${sql.placeholder('limit')}::int)` as unknown as number);
}

const entityKeys = new Map<unknown, string>(Object.entries(getTableColumns(entities)).map(([key, column]) => [column, key]));

/**
 * A page's statement: named (`name`), it is prepared once per connection;
 * unnamed, planned on every execution.
 */
function buildPage(db: Queryable, shape: PageShape, rest: (SQL | undefined)[], name: string) {
  return pageSelect(db, shape, sql.placeholder('envId'), rest, getTableColumns(entities)).prepare(name);
}

/**
 * The statements of pages without a cell or a cell-scoped caller: built once
 * per database handle and shape, named only for an index range.
 */
const preparedPages = new Map<string, (ctx: ServiceContext) => ReturnType<typeof buildPage>>();

function preparedPage(ctx: ServiceContext, shape: PageShape) {
  const key = shapeKey(shape);
  let statement = preparedPages.get(key);
  if (!statement) {
    const name = isIndexRange(shape) ? `cellplane_entity_list_${key}` : '';
    preparedPages.set(key, (statement = oncePerHandle((db, named) => buildPage(db, shape, [], named), name)));
  }
  return statement(ctx);
}

/**
 * The label filters as the JSON object every match contains; null when two
 * of them want different values of one key (nothing matches); undefined
 * when there are none.
 */
function parseLabelFilters(label: EntityListQuery['label']): string | null | undefined {
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
  return contradictory ? null : JSON.stringify(wanted);
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
