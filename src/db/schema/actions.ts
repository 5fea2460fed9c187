import { sql } from 'drizzle-orm';
import { foreignKey, integer, jsonb, pgTable, text, unique, uuid } from 'drizzle-orm/pg-core';
import { entityTypes } from './catalog';
import { createdAt, id, updatedAt } from './columns';
import { envId, orgId, projectId } from './tenancy';

/**
 * Action definitions (DECISIONS §4) belong to the project's catalog;
 * secrets to one environment (DECISIONS §5).
 */

export const actions = pgTable(
  'actions',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    name: text('name').notNull(),
    displayName: text('display_name'),
    description: text('description'),
    entityTypeName: text('entity_type_name').notNull(),
    conditions: jsonb('conditions').notNull().default(sql`'[]'::jsonb`),
    parameters: jsonb('parameters').notNull().default(sql`'[]'::jsonb`),
    trigger: jsonb('trigger').notNull(),
    onSuccess: text('on_success'),
    onFailure: text('on_failure'),
    timeoutMinutes: integer('timeout_minutes').notNull().default(60),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    unique('actions_project_name_unique').on(t.projectId, t.name),
    // an entity type an action acts on cannot be deleted from under it
    foreignKey({
      name: 'actions_entity_type_fk',
      columns: [t.projectId, t.entityTypeName],
      foreignColumns: [entityTypes.projectId, entityTypes.name],
    }).onDelete('restrict'),
  ],
);

/**
 * A secret's value is stored AES-256-GCM encrypted with ENCRYPTION_KEY, a
 * fresh 12-byte IV each time, and the row's org/project/env/name bound as
 * associated data: a ciphertext copied to another row does not decrypt.
 */
export const environmentSecrets = pgTable(
  'environment_secrets',
  {
    id: id(),
    orgId: uuid('org_id').notNull(),
    projectId: uuid('project_id').notNull(),
    envId: envId(),
    name: text('name').notNull(),
    /** base64 of IV (12 bytes) ‖ ciphertext ‖ GCM tag. */
    sealed: text('sealed').notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [unique('environment_secrets_env_name_unique').on(t.envId, t.name)],
);
