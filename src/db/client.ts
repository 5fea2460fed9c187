import type { ExtractTablesWithRelations } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import type * as schema from './schema';

export type Schema = typeof schema;

/**
 * The database port: a drizzle database over any of the three drivers
 * (PGlite, node-postgres, Neon serverless). The core writes queries against
 * this type only.
 */
export type Db = PgDatabase<PgQueryResultHKT, Schema>;
export type Tx = PgTransaction<PgQueryResultHKT, Schema, ExtractTablesWithRelations<Schema>>;
/** Either a database or an open transaction: what a read helper accepts. */
export type Queryable = Db | Tx;
