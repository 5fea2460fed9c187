import { sql } from 'drizzle-orm';
import { bigint, boolean, check, index, integer, pgTable, text, unique, uuid } from 'drizzle-orm/pg-core';
import { createdAt, id, optionalTimestamp } from './columns';

/** Tenant keys for the other tables: each row goes with its organization, project or environment. */
export const orgId = () =>
  uuid('org_id')
    .notNull()
    .references(() => orgs.id, { onDelete: 'cascade' });
export const projectId = () =>
  uuid('project_id')
    .notNull()
    .references(() => projects.id, { onDelete: 'cascade' });
export const envId = () =>
  uuid('env_id')
    .notNull()
    .references(() => environments.id, { onDelete: 'cascade' });

export const orgs = pgTable('orgs', {
  id: id(),
  name: text('name').notNull(),
  // unique across soft-deleted rows too: a slug is never handed to a second owner
  slug: text('slug').notNull().unique(),
  createdAt: createdAt(),
  suspendedAt: optionalTimestamp('suspended_at'),
  deletedAt: optionalTimestamp('deleted_at'),
});

export const projects = pgTable(
  'projects',
  {
    id: id(),
    orgId: orgId(),
    name: text('name').notNull(),
    slug: text('slug').notNull(),
    createdAt: createdAt(),
  },
  (t) => [unique('projects_org_slug_unique').on(t.orgId, t.slug)],
);

export const environments = pgTable(
  'environments',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    name: text('name').notNull(),
    /** The last change-log sequence handed out in this environment (runtime.ts, entity_changes). */
    changeSeq: bigint('change_seq', { mode: 'number' }).notNull().default(0),
    createdAt: createdAt(),
  },
  (t) => [unique('environments_project_name_unique').on(t.projectId, t.name)],
);

/**
 * One row, always. `bootstrap_closed_at` is set by the first token mint and
 * never cleared: revoking every token does not reopen an unauthenticated server.
 */
export const systemState = pgTable(
  'system_state',
  {
    id: integer('id').primaryKey().default(1),
    bootstrapClosedAt: optionalTimestamp('bootstrap_closed_at'),
  },
  (t) => [check('system_state_singleton', sql`${t.id} = 1`)],
);

/**
 * One row, always: a counter that every change able to alter a plain
 * caller's answer moves, in that change's own transaction (triggers in
 * migrations/0009_access_epoch.sql: any UPDATE, DELETE or TRUNCATE of
 * `service_tokens`, `orgs` or `projects`, and of `environments` but for its
 * `change_seq`). The entity GET remembers a token's plain answer with the
 * epoch it was read at, and its one statement checks the epoch instead of
 * joining the four tables again (src/auth/plain-callers.ts).
 */
export const accessEpoch = pgTable(
  'access_epoch',
  {
    id: integer('id').primaryKey().default(1),
    value: bigint('value', { mode: 'number' }).notNull().default(0),
  },
  (t) => [check('access_epoch_singleton', sql`${t.id} = 1`)],
);

export const serviceTokens = pgTable(
  'service_tokens',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    name: text('name').notNull(),
    /** The readable start of the token (`cpl_` + 8 characters), for humans. */
    prefix: text('prefix').notNull(),
    /** SHA-256 of the whole token, hex. The token itself is never stored. */
    tokenHash: text('token_hash').notNull().unique(),
    role: text('role', { enum: ['owner', 'admin', 'member', 'viewer'] }).notNull(),
    // deleting an environment deletes the tokens pinned to it
    envId: uuid('env_id').references(() => environments.id, { onDelete: 'cascade' }),
    cellScopes: text('cell_scopes').array().notNull().default(sql`'{}'::text[]`),
    /** The user whose session minted it (people.ts users.id), or null for tokens minted by a token or bootstrap. */
    createdByUserId: uuid('created_by_user_id'),
    /**
     * A personal token acts as its minter's membership allows at the time of
     * use (never above the user's current role) and is revoked when the user
     * leaves or is removed from the organization.
     */
    personal: boolean('personal').notNull().default(false),
    expiresAt: optionalTimestamp('expires_at'),
    revokedAt: optionalTimestamp('revoked_at'),
    createdAt: createdAt(),
  },
  (t) => [index('service_tokens_project_idx').on(t.projectId)],
);
