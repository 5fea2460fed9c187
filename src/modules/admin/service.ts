import type { z } from '@hono/zod-openapi';
import { and, asc, count, desc, eq, gte, inArray, isNull, lt, sql, type SQL } from 'drizzle-orm';
import { requireSuperAdmin } from '../../auth/memberships';
import type { UserSessionPrincipal } from '../../auth/principal';
import type { ServiceContext } from '../../context';
import type { Tx } from '../../db/client';
import {
  actionRuns,
  actions,
  auditEvents,
  cellMembers,
  cells,
  deliveryJobs,
  entities,
  entityChanges,
  entityMetrics,
  entityTypes,
  entityUniqueKeys,
  environments,
  githubInstallations,
  orgMembers,
  orgs,
  projects,
  relationships,
  relationshipTypes,
  runAttempts,
  sessions,
  users,
} from '../../db/schema';
import { notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { recordAudit, type AuditActor } from '../../db/audit';
import { isUuid } from '../names';
import {
  NUKED_TABLES,
  type AdminAuditList,
  type AdminAuditQuery,
  type AdminGithubInstallationList,
  type AdminMetricsOverview,
  type AdminOrg,
  type AdminOrgDetail,
  type AdminOrgSuspendResult,
  type NukedTable,
  type NukeResult,
} from './schemas';

/**
 * The super-admin control plane (SPEC "Super-admin"). Every verb starts
 * with requireSuperAdmin: a user session whose verified address is in
 * SUPER_ADMIN_EMAILS (401 without a session, service tokens included; 403
 * for anyone else). These verbs read and write across tenants on purpose,
 * so none goes through the tenancy helpers of src/auth/access.ts, and an
 * organization's suspension does not hide it here (DECISIONS §5).
 * Choices SPEC leaves open: docs/people/admin.md.
 */

/** How the audit log names a super-admin: the role, and the user acting in it. */
const superAdminActor = (admin: UserSessionPrincipal): AuditActor => ({ type: 'super-admin', id: admin.userId });

const orgMatches = (ref: string): SQL => (isUuid(ref) ? eq(orgs.id, ref) : eq(orgs.slug, ref));

// --- organizations -------------------------------------------------------------

/** Every organization not soft-deleted (SPEC Organization suspension), newest first, with its counts. */
export async function listOrgs(ctx: ServiceContext): Promise<{ data: z.infer<typeof AdminOrg>[] }> {
  requireSuperAdmin(ctx);
  const rows = await ctx.db
    .select({
      id: orgs.id,
      name: orgs.name,
      slug: orgs.slug,
      createdAt: orgs.createdAt,
      suspendedAt: orgs.suspendedAt,
      // correlated with the outer row: drizzle writes a column of the selected table unqualified, so name the table
      memberCount: sql<number>`(select count(*) from ${orgMembers} where ${orgMembers.orgId} = ${orgs}.id)`.mapWith(Number),
      projectCount: sql<number>`(select count(*) from ${projects} where ${projects.orgId} = ${orgs}.id)`.mapWith(Number),
    })
    .from(orgs)
    .where(isNull(orgs.deletedAt))
    .orderBy(desc(orgs.createdAt), desc(orgs.id));
  return {
    data: rows.map((row) => ({ ...row, createdAt: timestamp(row.createdAt), suspendedAt: optionalTimestamp(row.suspendedAt) })),
  };
}

/**
 * One organization by id or slug, soft-deleted ones included: the audit log
 * keeps naming an organization after its owner deleted it, and a slug is
 * never reused (tenancy.ts), so the lookup stays unambiguous.
 */
export async function getOrgDetail(ctx: ServiceContext, ref: string): Promise<z.infer<typeof AdminOrgDetail>> {
  requireSuperAdmin(ctx);
  const [org] = await ctx.db.select().from(orgs).where(orgMatches(ref)).limit(1);
  if (!org) throw notFound(`organization "${ref}"`);
  const members = await ctx.db
    .select({ userId: orgMembers.userId, email: users.email, name: users.name, role: orgMembers.role, joinedAt: orgMembers.joinedAt })
    .from(orgMembers)
    .innerJoin(users, eq(users.id, orgMembers.userId))
    .where(eq(orgMembers.orgId, org.id))
    .orderBy(asc(orgMembers.joinedAt), asc(orgMembers.userId));
  const orgProjects = await ctx.db
    .select({ id: projects.id, name: projects.name, slug: projects.slug, createdAt: projects.createdAt })
    .from(projects)
    .where(eq(projects.orgId, org.id))
    .orderBy(asc(projects.createdAt), asc(projects.id));
  return {
    id: org.id,
    name: org.name,
    slug: org.slug,
    createdAt: timestamp(org.createdAt),
    suspendedAt: optionalTimestamp(org.suspendedAt),
    deletedAt: optionalTimestamp(org.deletedAt),
    members: members.map((member) => ({ ...member, joinedAt: timestamp(member.joinedAt) })),
    projects: orgProjects.map((project) => ({ ...project, createdAt: timestamp(project.createdAt) })),
  };
}

/**
 * Suspends (`suspended: true`) or unsuspends an organization. Idempotent:
 * the row is locked first, so of concurrent calls exactly one changes it,
 * and a call that finds the organization already in the asked state returns
 * it unchanged (a second suspend keeps the first `suspendedAt`) and writes
 * no audit event: the log records transitions, each in the transaction that
 * made it. A soft-deleted organization is 404: it answers nobody already.
 */
export async function setOrgSuspension(
  ctx: ServiceContext,
  ref: string,
  suspended: boolean,
): Promise<z.infer<typeof AdminOrgSuspendResult>> {
  const admin = requireSuperAdmin(ctx);
  return ctx.db.transaction(async (tx) => {
    const [org] = await tx
      .select({ id: orgs.id, slug: orgs.slug, suspendedAt: orgs.suspendedAt })
      .from(orgs)
      .where(and(orgMatches(ref), isNull(orgs.deletedAt)))
      .limit(1)
      .for('update');
    if (!org) throw notFound(`organization "${ref}"`);
    if ((org.suspendedAt !== null) === suspended) return { id: org.id, suspendedAt: optionalTimestamp(org.suspendedAt) };
    const suspendedAt = suspended ? ctx.clock.now() : null;
    await tx.update(orgs).set({ suspendedAt }).where(eq(orgs.id, org.id));
    await recordAudit(tx, {
      action: suspended ? 'org.suspended' : 'org.unsuspended',
      actor: superAdminActor(admin),
      orgId: org.id,
      target: { type: 'org', id: org.id },
      data: { slug: org.slug },
    });
    ctx.logger.info(suspended ? 'organization suspended' : 'organization unsuspended', { requestId: ctx.requestId, orgId: org.id });
    return { id: org.id, suspendedAt: optionalTimestamp(suspendedAt) };
  });
}

// --- audit ---------------------------------------------------------------------

/** The audit log, newest first, filtered (DECISIONS §7): `since` inclusive, `until` exclusive. */
export async function listAudit(ctx: ServiceContext, query: AdminAuditQuery): Promise<z.infer<typeof AdminAuditList>> {
  requireSuperAdmin(ctx);
  const where = and(
    query.action === undefined ? undefined : eq(auditEvents.action, query.action),
    query.orgId === undefined ? undefined : eq(auditEvents.orgId, query.orgId),
    query.actorId === undefined ? undefined : eq(auditEvents.actorId, query.actorId),
    query.since === undefined ? undefined : gte(auditEvents.at, new Date(query.since)),
    query.until === undefined ? undefined : lt(auditEvents.at, new Date(query.until)),
  );
  const [{ total } = { total: 0 }] = await ctx.db.select({ total: count() }).from(auditEvents).where(where);
  const rows = await ctx.db
    .select()
    .from(auditEvents)
    .where(where)
    // id breaks ties between events of one instant, so pages neither repeat nor skip
    .orderBy(desc(auditEvents.at), desc(auditEvents.id))
    .limit(query.limit)
    .offset(query.offset);
  return {
    data: rows.map((row) => ({
      id: row.id,
      at: timestamp(row.at),
      action: row.action,
      orgId: row.orgId,
      actorType: row.actorType,
      actorId: row.actorId,
      targetType: row.targetType,
      targetId: row.targetId,
      data: row.data as Record<string, unknown>,
    })),
    total,
    limit: query.limit,
    offset: query.offset,
  };
}

// --- metrics -------------------------------------------------------------------

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Counts from the users and sessions tables, as of the service clock.
 * `mauApprox`: distinct users with a session created or refreshed in the
 * last 30 days. Signing out deletes a session, so a user whose only recent
 * session ended that way is missed: hence "approx".
 */
export async function metricsOverview(ctx: ServiceContext): Promise<z.infer<typeof AdminMetricsOverview>> {
  requireSuperAdmin(ctx);
  const now = ctx.clock.now();
  const ago = (days: number) => new Date(now.getTime() - days * DAY_MS);
  const createdSince = (days: number) => sql`count(*) filter (where ${users.createdAt} >= ${ago(days)})`.mapWith(Number);
  const [signups] = await ctx.db
    .select({ totalUsers: count(), signups24h: createdSince(1), signups7d: createdSince(7), signups30d: createdSince(30) })
    .from(users);
  const monthAgo = ago(30);
  const [activity] = await ctx.db
    .select({
      activeSessions: sql`count(*) filter (where ${sessions.expiresAt} > ${now})`.mapWith(Number),
      mauApprox: sql`count(distinct ${sessions.userId}) filter (where ${sessions.createdAt} >= ${monthAgo} or ${sessions.updatedAt} >= ${monthAgo})`.mapWith(
        Number,
      ),
    })
    .from(sessions);
  return { ...signups!, ...activity! };
}

// --- nuke ----------------------------------------------------------------------

/**
 * The DELETE of one table's rows of a project, for each table of
 * NUKED_TABLES. Each returns the environment of the rows it deletes (null
 * for tables without one), so the nuke knows whose change log it cut.
 */
function nukeStatements(projectId: string): Record<NukedTable, SQL> {
  const projectEnvs = sql`(select ${environments.id} from ${environments} where ${environments.projectId} = ${projectId})`;
  const projectRuns = sql`(select ${actionRuns.id} from ${actionRuns} where ${actionRuns.projectId} = ${projectId})`;
  const noEnv = sql`null::uuid as env_id`;
  return {
    run_attempts: sql`delete from ${runAttempts} where ${runAttempts.runId} in ${projectRuns} returning ${noEnv}`,
    delivery_jobs: sql`delete from ${deliveryJobs} where ${deliveryJobs.runId} in ${projectRuns} returning env_id`,
    action_runs: sql`delete from ${actionRuns} where ${actionRuns.projectId} = ${projectId} returning env_id`,
    entity_changes: sql`delete from ${entityChanges} where ${entityChanges.envId} in ${projectEnvs} returning env_id`,
    cell_members: sql`delete from ${cellMembers} where ${cellMembers.envId} in ${projectEnvs} returning env_id`,
    relationships: sql`delete from ${relationships} where ${relationships.projectId} = ${projectId} returning env_id`,
    entity_metrics: sql`delete from ${entityMetrics} where ${entityMetrics.entityId} in (select ${entities.id} from ${entities} where ${entities.projectId} = ${projectId}) returning ${noEnv}`,
    entity_unique_keys: sql`delete from ${entityUniqueKeys} where ${entityUniqueKeys.envId} in ${projectEnvs} returning env_id`,
    entities: sql`delete from ${entities} where ${entities.projectId} = ${projectId} returning env_id`,
    actions: sql`delete from ${actions} where ${actions.projectId} = ${projectId} returning ${noEnv}`,
    cells: sql`delete from ${cells} where ${cells.projectId} = ${projectId} returning ${noEnv}`,
    relationship_types: sql`delete from ${relationshipTypes} where ${relationshipTypes.projectId} = ${projectId} returning ${noEnv}`,
    entity_types: sql`delete from ${entityTypes} where ${entityTypes.projectId} = ${projectId} returning ${noEnv}`,
  };
}

/** Runs one table's delete; its row count by environment (null: rows without one). */
async function deleteCounting(tx: Tx, statement: SQL): Promise<Map<string | null, number>> {
  const result = await tx.execute(sql`with deleted as (${statement}) select env_id, count(*) as n from deleted group by env_id`);
  const rows = (result as unknown as { rows: { env_id: string | null; n: string | number }[] }).rows;
  return new Map(rows.map((row) => [row.env_id, Number(row.n)]));
}

/**
 * Wipes a project's catalog and runtime rows (SPEC: keeps the project, its
 * members, repository links, tokens and environments; this implementation
 * also keeps secrets and graph views: docs/people/admin.md). One
 * transaction, children first, so every count is the table's own (nothing
 * goes by cascade) and a failure leaves everything as it was. A second
 * call finds nothing: all counts 0.
 *
 * Locks, before anything is read: the project row FOR UPDATE blocks every
 * insert that references it (a new entity type, action, cell, run…) until
 * the nuke commits, and two nukes of one project run one after the other;
 * the project's entity types FOR UPDATE make an entity or action insert
 * already under way finish first (it is then wiped with the rest) or wait
 * and fail on the missing type, instead of failing the nuke on a RESTRICT
 * foreign key.
 *
 * The environments' change_seq is never reset: sequences stay monotonic.
 * Each environment whose entities or change log lost rows advances it by
 * one, with no change at that number: every resume point from before the
 * nuke then reads as pruned (410 resync_required, or a `resync` event), so
 * a reader reloads instead of keeping entities that are gone.
 */
export async function nukeProject(ctx: ServiceContext, projectId: string): Promise<z.infer<typeof NukeResult>> {
  const admin = requireSuperAdmin(ctx);
  const rowCountsDeleted = await ctx.db.transaction(async (tx) => {
    const [project] = await tx
      .select({ id: projects.id, orgId: projects.orgId, slug: projects.slug })
      .from(projects)
      .where(eq(projects.id, projectId))
      .for('update');
    if (!project) throw notFound(`project "${projectId}"`);
    await tx.select({ id: entityTypes.id }).from(entityTypes).where(eq(entityTypes.projectId, project.id)).orderBy(asc(entityTypes.id)).for('update');

    const statements = nukeStatements(project.id);
    const counts = {} as Record<NukedTable, number>;
    const cutEnvironments = new Set<string>();
    for (const table of NUKED_TABLES) {
      const byEnv = await deleteCounting(tx, statements[table]);
      counts[table] = [...byEnv.values()].reduce((sum, n) => sum + n, 0);
      if (table === 'entities' || table === 'entity_changes') {
        for (const envId of byEnv.keys()) if (envId !== null) cutEnvironments.add(envId);
      }
    }
    if (cutEnvironments.size > 0) {
      await tx
        .update(environments)
        .set({ changeSeq: sql`${environments.changeSeq} + 1` })
        .where(and(eq(environments.projectId, project.id), inArray(environments.id, [...cutEnvironments])));
    }
    await recordAudit(tx, {
      action: 'project.nuked',
      actor: superAdminActor(admin),
      orgId: project.orgId,
      target: { type: 'project', id: project.id },
      data: { slug: project.slug, rowCountsDeleted: counts },
    });
    return counts;
  });
  ctx.logger.info('project nuked', { requestId: ctx.requestId, projectId, rowCountsDeleted });
  return { projectId, rowCountsDeleted };
}

// --- code-hosting installations ------------------------------------------------

/**
 * Every code-hosting app installation, across organizations (SPEC: no
 * pagination), deleted ones included, newest first, with the slug of the
 * organization that claimed it.
 */
export async function listGithubInstallations(ctx: ServiceContext): Promise<z.infer<typeof AdminGithubInstallationList>> {
  requireSuperAdmin(ctx);
  const rows = await ctx.db
    .select({ installation: githubInstallations, orgSlug: orgs.slug })
    .from(githubInstallations)
    .innerJoin(orgs, eq(orgs.id, githubInstallations.orgId))
    .orderBy(desc(githubInstallations.createdAt), desc(githubInstallations.id));
  return {
    data: rows.map(({ installation, orgSlug }) => ({
      id: installation.id,
      installationId: installation.installationId,
      orgId: installation.orgId,
      orgSlug,
      accountLogin: installation.accountLogin,
      accountType: installation.accountType,
      status: installation.status,
      repositorySelection: installation.repositorySelection,
      grantedRepos: installation.grantedRepos,
      createdAt: timestamp(installation.createdAt),
      updatedAt: timestamp(installation.updatedAt),
      deletedAt: optionalTimestamp(installation.deletedAt),
    })),
  };
}
