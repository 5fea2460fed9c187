import { sql } from 'drizzle-orm';
import { bigint, boolean, jsonb, pgTable, text, unique } from 'drizzle-orm/pg-core';
import { createdAt, id, updatedAt } from './columns';
import { orgId, projectId } from './tenancy';

/**
 * The catalog of a project: definitions shared by all its environments.
 * Item structures of the jsonb columns are DECISIONS §2; they are validated
 * by the modules' zod schemas before they reach these rows.
 */

export const entityTypes = pgTable(
  'entity_types',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    name: text('name').notNull(),
    displayName: text('display_name'),
    states: text('states').array().notNull(),
    initialState: text('initial_state').notNull(),
    properties: jsonb('properties').notNull().default(sql`'[]'::jsonb`),
    metrics: jsonb('metrics').notNull().default(sql`'[]'::jsonb`),
    constraints: jsonb('constraints').notNull().default(sql`'[]'::jsonb`),
    syncTracked: boolean('sync_tracked').notNull().default(false),
    syncFreshness: jsonb('sync_freshness'),
    applier: text('applier'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [unique('entity_types_project_name_unique').on(t.projectId, t.name)],
);

export const relationshipTypes = pgTable(
  'relationship_types',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    name: text('name').notNull(),
    displayName: text('display_name'),
    fromEntityTypeName: text('from_entity_type_name').notNull(),
    toEntityTypeName: text('to_entity_type_name').notNull(),
    cardinality: text('cardinality', { enum: ['one-to-one', 'one-to-many', 'many-to-one', 'many-to-many'] }).notNull(),
    states: text('states').array().notNull(),
    properties: jsonb('properties').notNull().default(sql`'[]'::jsonb`),
    constraints: jsonb('constraints').notNull().default(sql`'[]'::jsonb`),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [unique('relationship_types_project_name_unique').on(t.projectId, t.name)],
);

export const cells = pgTable(
  'cells',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    name: text('name').notNull(),
    displayName: text('display_name'),
    entityTypeName: text('entity_type_name').notNull(),
    placementPolicy: text('placement_policy', { enum: ['least-loaded', 'round-robin', 'random'] }).notNull(),
    constraints: jsonb('constraints').notNull().default(sql`'[]'::jsonb`),
    parentCells: text('parent_cells').array().notNull().default(sql`'{}'::text[]`),
    deploymentTarget: text('deployment_target'),
    membershipMode: text('membership_mode', { enum: ['explicit', 'derived'] }).notNull(),
    membershipDerivedFrom: jsonb('membership_derived_from'),
    /** Advanced by one atomic UPDATE per round-robin recommendation. */
    placementCounter: bigint('placement_counter', { mode: 'number' }).notNull().default(0),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [unique('cells_project_name_unique').on(t.projectId, t.name)],
);
