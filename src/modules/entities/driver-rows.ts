import { sql, type SQL } from 'drizzle-orm';
import type { entities } from '../../db/schema';
import type { Entity } from './schemas';

/**
 * Entities read without drizzle's row mapping, for the hottest reads (the
 * list in ./list.ts, the GET in ./fast-paths.ts): the driver's row, and the
 * API's Entity made from it directly (entityOf), or by Postgres as the
 * response's JSON text (entityJson).
 */

/** An entity row as the driver returns it: columns by their SQL names, timestamps as Postgres prints them. */
export type EntityDriverRow = {
  id: string;
  org_id: string;
  project_id: string;
  env_id: string;
  entity_type_name: string;
  name: string;
  state: string;
  properties: unknown;
  labels: unknown;
  last_synced_at: string | Date | null;
  sync_source: string | null;
  created_at: string | Date;
  updated_at: string | Date;
};

/**
 * A statement's rows as the driver returns them, without drizzle's row
 * mapping: a list page is up to 1,000 rows, and mapping each column of each
 * row through drizzle (then each timestamp through a Date, by toEntity) was
 * the largest cost of a list request after the statement itself, and a
 * quarter of the entity GET's own work. Drizzle's prepared statements have
 * all() on each driver (node-postgres, PGlite, Neon): the driver's rows as
 * objects keyed by column name, read with drizzle's type parsers
 * (timestamps as text), named statements as named.
 */
export function rowsOf<Row = EntityDriverRow & Record<string, unknown>>(statement: unknown, values: Record<string, unknown>): Promise<Row[]> {
  return (statement as { all(values: Record<string, unknown>): Promise<Row[]> }).all(values);
}

/** toEntity (./service.ts) of a driver's row: the same Entity, key for key, value for value. */
export function entityOf(row: EntityDriverRow): Entity {
  return {
    id: row.id,
    entityTypeName: row.entity_type_name,
    name: row.name,
    state: row.state,
    properties: jsonOf(row.properties) as Record<string, unknown>,
    labels: jsonOf(row.labels) as Record<string, string>,
    lastSyncedAt: row.last_synced_at === null ? null : isoTimestamp(row.last_synced_at),
    syncSource: row.sync_source,
    createdAt: isoTimestamp(row.created_at),
    updatedAt: isoTimestamp(row.updated_at),
    orgId: row.org_id,
    projectId: row.project_id,
    envId: row.env_id,
  };
}

/** A jsonb value as drizzle maps it: drivers parse it, but text is parsed here. */
const jsonOf = (value: unknown): unknown => (typeof value === 'string' ? JSON.parse(value) : value);

/** How Postgres prints a timestamptz in UTC, years 1000–9999: `2026-11-21 10:20:00.123456+00`, fraction optional. */
const UTC_TEXT = /^([1-9]\d{3}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?\+00$/;

/**
 * A timestamptz as the API writes it, `new Date(text).toISOString()` as
 * drizzle and toEntity make it: the milliseconds truncated, in UTC. Text
 * in UTC is rewritten without a Date; anything else (another session time
 * zone, a year outside 1000–9999) goes through one.
 */
function isoTimestamp(value: string | Date): string {
  if (typeof value !== 'string') return value.toISOString();
  const utc = UTC_TEXT.exec(value);
  if (!utc) return new Date(value).toISOString();
  const fraction = utc[3] ?? '';
  return `${utc[1]}T${utc[2]}.${fraction.length >= 3 ? fraction.slice(0, 3) : fraction.padEnd(3, '0')}Z`;
}

// --- the Entity's JSON, written by Postgres ----------------------------------------

/** An Entity as the JSON text of a response. */
export type EntityJsonText = string;

/** The entity columns entityJson reads. */
type EntityColumnRefs = { [K in keyof typeof entities.$inferSelect]: unknown };

/** A timestamptz as toISOString() writes it in years 1–9999: UTC, milliseconds truncated (to_char's MS truncates). */
const isoText = (column: unknown) => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** A text column as a JSON string (`null` for null): to_json escapes what JSON.stringify escapes. */
const jsonString = (column: unknown) => sql`coalesce(to_json(${column})::text, 'null')`;

/**
 * The API's Entity (entityOf, toEntity) of a row as JSON text, its keys in
 * entityOf's order, for the entity GET (./fast-paths.ts). The GET's own work
 * in the Node process was mostly the row: node-postgres describing thirteen
 * entity columns and building their parsers anew on every execution, then
 * parsing each, JSON.parse of properties and labels, three timestamps, the
 * object, and JSON.stringify of it all. As one column written by Postgres,
 * which the response carries unchanged, the server's CPU per GET fell by a
 * tenth at 10 clients and a fifth at one, and Postgres's grew by about a
 * third of what the server saved (bench/http-results.md, "2026-11-27, later"). A
 * list page is not written this way: per row, Postgres writing the JSON
 * (about 6 µs) costs what the Node process saves, and would only move the
 * work to the one part that does not scale out.
 *
 * The text is the same JSON value as JSON.stringify(entityOf(row)), not the
 * same bytes: properties and labels are jsonb's own output (`{"a": 1}`, a
 * space after each colon and comma; keys in jsonb's order, which is the
 * order entityOf gets from the same text, except that JavaScript puts
 * integer-like keys first; numbers as jsonb keeps them, which parse to the
 * same doubles). test/node/entity-json.test.ts holds the two to that.
 */
export function entityJson(row: EntityColumnRefs): SQL<EntityJsonText> {
  // one call of format(), not a chain of ||: Postgres builds a statement's expressions anew on every execution, and
  // twenty-six concatenations cost it about 5 µs more a GET than one call with thirteen arguments (bench/http-results.md,
  // "2026-11-29, fifth"). format() writes a null argument as nothing, so no entity (the remembered GET's left
  // join) is tested for first, to stay null as the chain of || was.
  return sql<EntityJsonText>`case when ${row.id} is null then null else format(
    '{"id":"%s","entityTypeName":%s,"name":%s,"state":%s,"properties":%s,"labels":%s,"lastSyncedAt":%s,"syncSource":%s,"createdAt":"%s","updatedAt":"%s","orgId":"%s","projectId":"%s","envId":"%s"}',
    ${row.id}, ${jsonString(row.entityTypeName)}, ${jsonString(row.name)}, ${jsonString(row.state)},
    ${row.properties}, ${row.labels}, coalesce('"' || ${isoText(row.lastSyncedAt)} || '"', 'null'), ${jsonString(row.syncSource)},
    ${isoText(row.createdAt)}, ${isoText(row.updatedAt)}, ${row.orgId}, ${row.projectId}, ${row.envId}) end`;
}
