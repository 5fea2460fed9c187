import type { Entity } from './schemas';

/**
 * Entities read without drizzle's row mapping, for the hottest reads (the
 * list in ./list.ts, the GET in ./fast-paths.ts): the driver's row, and the
 * API's Entity made from it directly.
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
