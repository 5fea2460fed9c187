import { z } from '@hono/zod-openapi';
import { INSTALLATION_STATUSES, ORG_ROLES } from '../../db/schema';
import { DateTimeInput, Timestamp } from '../../http/openapi';

/** The super-admin control plane's shapes (SPEC "Admin schemas"; row fields: docs/people/admin.md). */

export const AdminOrg = z
  .object({
    id: z.uuid(),
    name: z.string(),
    slug: z.string(),
    createdAt: Timestamp,
    suspendedAt: Timestamp.nullable().openapi({ description: 'When the organization was suspended; null while active' }),
    memberCount: z.number().int().openapi({ description: 'Users with a membership of any role' }),
    projectCount: z.number().int(),
  })
  .openapi('AdminOrg');

export const AdminOrgList = z.object({ data: z.array(AdminOrg) }).openapi('AdminOrgList');

export const AdminOrgMember = z
  .object({
    userId: z.uuid(),
    email: z.string(),
    name: z.string(),
    role: z.enum(ORG_ROLES),
    joinedAt: Timestamp,
  })
  .openapi('AdminOrgMember');

export const AdminOrgProject = z
  .object({
    id: z.uuid(),
    name: z.string(),
    slug: z.string(),
    createdAt: Timestamp,
  })
  .openapi('AdminOrgProject');

export const AdminOrgDetail = z
  .object({
    id: z.uuid(),
    name: z.string(),
    slug: z.string(),
    createdAt: Timestamp,
    suspendedAt: Timestamp.nullable(),
    deletedAt: Timestamp.nullable().openapi({ description: 'Set when the owner deleted the organization (soft delete)' }),
    members: z.array(AdminOrgMember).openapi({ description: 'By join time, oldest first' }),
    projects: z.array(AdminOrgProject).openapi({ description: 'By creation time, oldest first' }),
  })
  .openapi('AdminOrgDetail');

export const AdminOrgSuspendResult = z
  .object({
    id: z.uuid(),
    suspendedAt: Timestamp.nullable(),
  })
  .openapi('AdminOrgSuspendResult');

export const AdminOrgParam = z.object({
  id: z.string().min(1).max(200).openapi({ description: 'Organization id or slug', example: 'acme' }),
});

export const AdminAuditEvent = z
  .object({
    id: z.uuid(),
    at: Timestamp,
    action: z.string().openapi({ example: 'org.suspended' }),
    orgId: z.uuid().nullable(),
    actorType: z.string().openapi({ description: '`user`, `token`, `bootstrap`, `super-admin`, `codehost` or `system`' }),
    actorId: z.string().nullable(),
    targetType: z.string().nullable(),
    targetId: z.string().nullable(),
    data: z.record(z.string(), z.unknown()).openapi({ description: 'What the event is about: names and ids, never a secret' }),
  })
  .openapi('AdminAuditEvent');

export const AdminAuditList = z
  .object({
    data: z.array(AdminAuditEvent).openapi({ description: 'Newest first' }),
    total: z.number().int().openapi({ description: 'Events matching the filters, all pages together' }),
    limit: z.number().int(),
    offset: z.number().int(),
  })
  .openapi('AdminAuditList');

export const DEFAULT_AUDIT_PAGE = 50;
export const MAX_AUDIT_PAGE = 200;
/** Far beyond any real log, and well inside Postgres' bigint: a huge offset is a 400, not a database error. */
const MAX_AUDIT_OFFSET = 1_000_000_000;

export const AdminAuditQuery = z.object({
  limit: z.coerce.number().int().min(1).max(MAX_AUDIT_PAGE).default(DEFAULT_AUDIT_PAGE).openapi({ description: `1–${MAX_AUDIT_PAGE}, default ${DEFAULT_AUDIT_PAGE}` }),
  offset: z.coerce.number().int().min(0).max(MAX_AUDIT_OFFSET).default(0),
  action: z.string().min(1).max(128).optional().openapi({ description: 'Exact action, e.g. `org.suspended`', example: 'org.suspended' }),
  orgId: z.uuid().optional().openapi({ description: 'Organization id (not a slug)' }),
  actorId: z.string().min(1).max(200).optional().openapi({ description: 'A user id, token id, …: the row `actorId`' }),
  since: DateTimeInput.optional().openapi({ description: 'Events at or after this instant' }),
  until: DateTimeInput.optional().openapi({ description: 'Events strictly before this instant' }),
});
export type AdminAuditQuery = z.infer<typeof AdminAuditQuery>;

export const AdminMetricsOverview = z
  .object({
    totalUsers: z.number().int(),
    signups24h: z.number().int().openapi({ description: 'Users created in the last 24 hours' }),
    signups7d: z.number().int(),
    signups30d: z.number().int(),
    activeSessions: z.number().int().openapi({ description: 'Sessions not yet expired' }),
    mauApprox: z
      .number()
      .int()
      .openapi({ description: 'Distinct users with a session created or refreshed in the last 30 days (signed-out sessions are gone, hence approximate)' }),
  })
  .openapi('AdminMetricsOverview');

/** The tables a nuke empties for one project, in the order it deletes them (children first). */
export const NUKED_TABLES = [
  'run_attempts',
  'delivery_jobs',
  'action_runs',
  'entity_changes',
  'cell_members',
  'relationships',
  'entity_metrics',
  'entity_unique_keys',
  'entities',
  'actions',
  'cells',
  'relationship_types',
  'entity_types',
] as const;
export type NukedTable = (typeof NUKED_TABLES)[number];

export const NukeResult = z
  .object({
    projectId: z.uuid(),
    rowCountsDeleted: z
      .object(Object.fromEntries(NUKED_TABLES.map((table) => [table, z.number().int()])) as Record<NukedTable, z.ZodNumber>)
      .openapi({ description: 'Rows deleted, by table; every table is listed, 0 included' }),
  })
  .openapi('NukeResult');

export const NukeParams = z.object({
  projectId: z.uuid().openapi({ description: 'Project id (slugs are unique only within an organization)' }),
});

export const AdminGithubInstallation = z
  .object({
    id: z.uuid().openapi({ description: "The service's id of the installation record" }),
    installationId: z.number().int().openapi({ description: "GitHub's installation id", example: 12345678 }),
    orgId: z.uuid(),
    orgSlug: z.string(),
    accountLogin: z.string().openapi({ description: 'The GitHub account the App is installed on', example: 'acme' }),
    accountType: z.string().openapi({ description: '`Organization` or `User`' }),
    status: z.enum(INSTALLATION_STATUSES),
    repositorySelection: z.string().openapi({ description: '`all` or `selected`' }),
    grantedRepos: z.array(z.string()).openapi({ description: '`owner/name`, lowercased' }),
    createdAt: Timestamp,
    updatedAt: Timestamp,
    deletedAt: Timestamp.nullable(),
  })
  .openapi('AdminGithubInstallation');

export const AdminGithubInstallationList = z
  .object({
    data: z.array(AdminGithubInstallation).openapi({ description: 'Every installation of every organization, deleted ones included, newest first; no pagination' }),
  })
  .openapi('AdminGithubInstallationList');
