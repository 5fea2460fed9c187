import { sql } from 'drizzle-orm';
import {
  bigint,
  doublePrecision,
  foreignKey,
  index,
  jsonb,
  pgTable,
  primaryKey,
  text,
  unique,
  uuid,
} from 'drizzle-orm/pg-core';
import { cells, entityTypes, relationshipTypes } from './catalog';
import { createdAt, id, optionalTimestamp, updatedAt } from './columns';
import { envId } from './tenancy';

/**
 * The runtime data of an environment. Every row carries `env_id`; every
 * lookup filters by it (src/auth/access.ts and the services).
 */

export const entities = pgTable(
  'entities',
  {
    id: id(),
    orgId: uuid('org_id').notNull(),
    projectId: uuid('project_id').notNull(),
    envId: envId(),
    entityTypeName: text('entity_type_name').notNull(),
    name: text('name').notNull(),
    state: text('state').notNull(),
    properties: jsonb('properties').notNull().default(sql`'{}'::jsonb`),
    labels: jsonb('labels').notNull().default(sql`'{}'::jsonb`),
    lastSyncedAt: optionalTimestamp('last_synced_at'),
    syncSource: text('sync_source'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    // entity names are unique per environment, across types (DECISIONS §1); also the keyset order
    unique('entities_env_name_unique').on(t.envId, t.name),
    // each equality filter of the list is an ordered range of one of these, so a page reads its n+1 rows at any depth
    // and however rare the value (src/modules/entities/list.ts, docs/entity-lists.md); an entity no sync tool
    // reports is in no list by sync source, and its create need not write that index
    index('entities_env_type_name_idx').on(t.envId, t.entityTypeName, t.name),
    index('entities_env_state_name_idx').on(t.envId, t.state, t.name),
    index('entities_env_sync_source_name_idx').on(t.envId, t.syncSource, t.name).where(sql`${t.syncSource} is not null`),
    // the entity-type foreign key's RESTRICT check and "is this type still used" look up by project
    index('entities_project_type_idx').on(t.projectId, t.entityTypeName),
    index('entities_labels_idx').using('gin', t.labels.op('jsonb_path_ops')),
    // an entity type with entities cannot be deleted, and its name cannot change under them
    foreignKey({
      name: 'entities_entity_type_fk',
      columns: [t.projectId, t.entityTypeName],
      foreignColumns: [entityTypes.projectId, entityTypes.name],
    }).onDelete('restrict'),
  ],
);

/**
 * One row per (unique constraint, value) of an entity: the `unique`
 * constraints of an entity type are enforced by this table's unique index,
 * so two concurrent writes can never both commit the same value.
 */
export const entityUniqueKeys = pgTable(
  'entity_unique_keys',
  {
    envId: envId(),
    entityTypeName: text('entity_type_name').notNull(),
    /** The constraint's properties, comma-joined: which constraint this key belongs to. */
    constraintKey: text('constraint_key').notNull(),
    /** The JSON of the values, in the constraint's property order. */
    valueKey: text('value_key').notNull(),
    entityId: uuid('entity_id')
      .notNull()
      .references(() => entities.id, { onDelete: 'cascade' }),
  },
  (t) => [
    primaryKey({ columns: [t.envId, t.entityTypeName, t.constraintKey, t.valueKey] }),
    index('entity_unique_keys_entity_idx').on(t.entityId),
  ],
);

export const entityMetrics = pgTable(
  'entity_metrics',
  {
    entityId: uuid('entity_id')
      .notNull()
      .references(() => entities.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    value: doublePrecision('value').notNull(),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.entityId, t.name] })],
);

export const relationships = pgTable(
  'relationships',
  {
    id: id(),
    orgId: uuid('org_id').notNull(),
    projectId: uuid('project_id').notNull(),
    envId: envId(),
    relationshipTypeName: text('relationship_type_name').notNull(),
    fromEntityId: uuid('from_entity_id')
      .notNull()
      .references(() => entities.id, { onDelete: 'cascade' }),
    toEntityId: uuid('to_entity_id')
      .notNull()
      .references(() => entities.id, { onDelete: 'cascade' }),
    /**
     * Cardinality, enforced by unique indexes so concurrent writes cannot both
     * pass: `from_exclusive` is from_entity_id when the type allows one
     * outgoing relationship per entity (one-to-one, many-to-one), else NULL;
     * `to_exclusive` likewise for incoming (one-to-one, one-to-many).
     */
    fromExclusive: uuid('from_exclusive'),
    toExclusive: uuid('to_exclusive'),
    state: text('state').notNull(),
    properties: jsonb('properties').notNull().default(sql`'{}'::jsonb`),
    labels: jsonb('labels').notNull().default(sql`'{}'::jsonb`),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    unique('relationships_pair_unique').on(t.envId, t.relationshipTypeName, t.fromEntityId, t.toEntityId),
    unique('relationships_from_exclusive_unique').on(t.envId, t.relationshipTypeName, t.fromExclusive),
    unique('relationships_to_exclusive_unique').on(t.envId, t.relationshipTypeName, t.toExclusive),
    index('relationships_to_idx').on(t.toEntityId),
    index('relationships_from_idx').on(t.fromEntityId),
    foreignKey({
      name: 'relationships_relationship_type_fk',
      columns: [t.projectId, t.relationshipTypeName],
      foreignColumns: [relationshipTypes.projectId, relationshipTypes.name],
    }).onDelete('cascade'),
  ],
);

export const cellMembers = pgTable(
  'cell_members',
  {
    cellId: uuid('cell_id')
      .notNull()
      .references(() => cells.id, { onDelete: 'cascade' }),
    envId: envId(),
    entityId: uuid('entity_id')
      .notNull()
      .references(() => entities.id, { onDelete: 'cascade' }),
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.cellId, t.entityId] }), index('cell_members_entity_idx').on(t.entityId)],
);

/**
 * The change log: one row per committed entity create, update or delete,
 * written in the same transaction. `seq` comes from the environment's
 * counter (environments.change_seq), whose row lock orders the writers, so
 * sequence order is commit order and has no gaps.
 */
export const entityChanges = pgTable(
  'entity_changes',
  {
    envId: envId(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    type: text('type', { enum: ['entity.created', 'entity.updated', 'entity.deleted'] }).notNull(),
    entityId: uuid('entity_id').notNull(),
    entityName: text('entity_name').notNull(),
    entityTypeName: text('entity_type_name').notNull(),
    /** The event's `entity`: the full Entity, or `{ id, name, entityTypeName }` for a delete. */
    entity: jsonb('entity').notNull(),
    /**
     * Deletes only: the cells the entity was a direct member of just before it
     * went, so cell-filtered and cell-scoped streams still learn of the
     * delete (its memberships are gone with it). Null for other changes,
     * whose cells are read from the entity when the change is streamed.
     */
    cells: text('cells').array(),
    at: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.envId, t.seq] }), index('entity_changes_at_idx').on(t.at)],
);
