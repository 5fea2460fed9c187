import { sql } from 'drizzle-orm';
import { boolean, check, index, jsonb, pgTable, primaryKey, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { createdAt, id, optionalTimestamp, updatedAt } from './columns';
import { orgId, orgs, projectId } from './tenancy';

/**
 * People: Better Auth's own tables (user, session, account, verification,
 * ssoProvider: the keys of `authSchema` below are its model names, the
 * property names its field names), then what Cellplane keeps about users —
 * memberships, graph views, notifications, preferences — and the audit log.
 */

const requiredTimestamp = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' }).notNull();

export const users = pgTable('users', {
  id: id(),
  name: text('name').notNull(),
  // Better Auth lowercases addresses before every lookup and insert
  email: text('email').notNull().unique(),
  emailVerified: boolean('email_verified').notNull().default(false),
  image: text('image'),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
});

const userId = () =>
  uuid('user_id')
    .notNull()
    .references(() => users.id, { onDelete: 'cascade' });

export const sessions = pgTable(
  'sessions',
  {
    id: id(),
    userId: userId(),
    token: text('token').notNull().unique(),
    expiresAt: requiredTimestamp('expires_at'),
    ipAddress: text('ip_address'),
    userAgent: text('user_agent'),
    /** The SSO provider the session came through; null for email and password (forceSso, docs/decisions.md). */
    ssoProviderId: text('sso_provider_id'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('sessions_user_idx').on(t.userId)],
);

export const accounts = pgTable(
  'accounts',
  {
    id: id(),
    userId: userId(),
    accountId: text('account_id').notNull(),
    providerId: text('provider_id').notNull(),
    accessToken: text('access_token'),
    refreshToken: text('refresh_token'),
    idToken: text('id_token'),
    accessTokenExpiresAt: optionalTimestamp('access_token_expires_at'),
    refreshTokenExpiresAt: optionalTimestamp('refresh_token_expires_at'),
    scope: text('scope'),
    /** Better Auth's scrypt hash; null for a provisioned user who has not set one yet, and for SSO accounts. */
    password: text('password'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('accounts_user_idx').on(t.userId)],
);

export const verifications = pgTable(
  'verifications',
  {
    id: id(),
    identifier: text('identifier').notNull(),
    value: text('value').notNull(),
    expiresAt: requiredTimestamp('expires_at'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('verifications_identifier_idx').on(t.identifier)],
);

/** Better Auth's SSO plugin's providers, one organization each; `force_sso` is Cellplane's (SPEC sso-extras). */
export const ssoProviders = pgTable(
  'sso_providers',
  {
    id: id(),
    providerId: text('provider_id').notNull().unique(),
    issuer: text('issuer').notNull(),
    domain: text('domain').notNull(),
    oidcConfig: text('oidc_config'),
    samlConfig: text('saml_config'),
    userId: uuid('user_id').references(() => users.id, { onDelete: 'set null' }),
    /** The Cellplane organization (its id) whose members sign in through this provider. */
    organizationId: text('organization_id'),
    forceSso: boolean('force_sso').notNull().default(false),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('sso_providers_org_idx').on(t.organizationId)],
);

/** The tables Better Auth reads and writes, by its model names. */
export const authSchema = { user: users, session: sessions, account: accounts, verification: verifications, ssoProvider: ssoProviders };

export const ORG_ROLES = ['owner', 'admin', 'member'] as const;

/** A user's role in an organization: its role in every project of it (DECISIONS §5). */
export const orgMembers = pgTable(
  'org_members',
  {
    orgId: orgId(),
    userId: userId(),
    role: text('role', { enum: ORG_ROLES }).notNull(),
    joinedAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.orgId, t.userId] }), index('org_members_user_idx').on(t.userId)],
);

export const graphViews = pgTable(
  'graph_views',
  {
    id: id(),
    orgId: orgId(),
    projectId: projectId(),
    scope: text('scope', { enum: ['user', 'project'] }).notNull(),
    /** The owner of a personal (`user`) view; null for project views. */
    ownerUserId: uuid('owner_user_id').references(() => users.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    isDefault: boolean('is_default').notNull().default(false),
    config: jsonb('config').notNull(),
    pinnedPositions: jsonb('pinned_positions'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    check('graph_views_owner_matches_scope', sql`(${t.scope} = 'user') = (${t.ownerUserId} is not null)`),
    index('graph_views_project_idx').on(t.projectId),
    // one default per (project, scope, owner): the partial index enforces it under concurrency
    uniqueIndex('graph_views_one_default')
      .on(t.projectId, t.scope, sql`coalesce(${t.ownerUserId}, '00000000-0000-0000-0000-000000000000'::uuid)`)
      .where(sql`${t.isDefault}`),
  ],
);

export const notifications = pgTable(
  'notifications',
  {
    id: id(),
    userId: userId(),
    /** The organization the notification is about, when there is one (removing a member removes these). */
    orgId: uuid('org_id').references(() => orgs.id, { onDelete: 'cascade' }),
    kind: text('kind').notNull(),
    title: text('title').notNull(),
    body: text('body').notNull().default(''),
    data: jsonb('data').notNull().default(sql`'{}'::jsonb`),
    readAt: optionalTimestamp('read_at'),
    createdAt: createdAt(),
  },
  (t) => [index('notifications_user_created_idx').on(t.userId, t.createdAt)],
);

export const userPreferences = pgTable(
  'user_preferences',
  {
    userId: userId(),
    key: text('key').notNull(),
    value: jsonb('value').notNull(),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.key] })],
);

/**
 * Control-plane audit events (SPEC Audit events, GET /admin/audit), each
 * written in the transaction of the change it records. Not foreign-keyed:
 * the log outlives what it names.
 */
export const auditEvents = pgTable(
  'audit_events',
  {
    id: id(),
    at: createdAt(),
    action: text('action').notNull(),
    orgId: uuid('org_id'),
    /** `user`, `token`, `bootstrap`, `super-admin`, `codehost` or `system`. */
    actorType: text('actor_type').notNull(),
    actorId: text('actor_id'),
    targetType: text('target_type'),
    targetId: text('target_id'),
    data: jsonb('data').notNull().default(sql`'{}'::jsonb`),
  },
  (t) => [index('audit_events_at_idx').on(t.at), index('audit_events_org_at_idx').on(t.orgId, t.at)],
);
