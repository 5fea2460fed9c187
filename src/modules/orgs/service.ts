import type { z } from '@hono/zod-openapi';
import { and, asc, eq, isNull } from 'drizzle-orm';
import { loadOrg, requirePermission, type OrgRow } from '../../auth/access';
import { callerPrincipal } from '../../auth/caller';
import { isLocalOperator, requireUserSession } from '../../auth/memberships';
import { roleAllows } from '../../auth/permissions';
import type { ServiceContext } from '../../context';
import { orgMembers, orgs } from '../../db/schema';
import { recordAudit } from '../../db/audit';
import { actorOf } from '../../auth/actor';
import { ApiError } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { actorRoleUnderLock, lockOrganization } from '../members/service';
import type { Organization, OrganizationCreate, OrganizationDeleted, OrganizationMembership } from './schemas';

export const toOrganization = (org: OrgRow): z.infer<typeof Organization> => ({
  id: org.id,
  name: org.name,
  slug: org.slug,
  createdAt: timestamp(org.createdAt),
});

export async function createOrg(
  ctx: ServiceContext,
  input: z.infer<typeof OrganizationCreate>,
): Promise<z.infer<typeof Organization>> {
  // Service tokens belong to one project of one organization: creating
  // another organization is outside any token's scope (docs/decisions.md).
  const principal = await callerPrincipal(ctx.callerState, ctx.db, ctx.clock);
  if (principal.kind === 'service-token') {
    throw new ApiError(
      'forbidden',
      'service tokens are scoped to one project; creating an organization needs bootstrap mode or a user session',
    );
  }
  const org = await ctx.db.transaction(async (tx) => {
    const [created] = await tx
      .insert(orgs)
      .values({ name: input.name, slug: input.slug })
      .onConflictDoNothing({ target: orgs.slug })
      .returning();
    if (!created) throw new ApiError('already_exists', `organization slug "${input.slug}" is taken`);
    // a user creating an organization is its first owner
    if (principal.kind === 'user-session') {
      await tx.insert(orgMembers).values({ orgId: created.id, userId: principal.userId, role: 'owner' });
    }
    await recordAudit(tx, {
      action: 'org.created',
      actor: actorOf(principal),
      orgId: created.id,
      target: { type: 'org', id: created.id },
      data: { slug: created.slug, name: created.name },
    });
    return created;
  });
  return toOrganization(org);
}

export async function getOrg(ctx: ServiceContext, ref: string): Promise<z.infer<typeof Organization>> {
  return toOrganization(await loadOrg(ctx, ref));
}

/**
 * GET /orgs: the organizations the signed-in user belongs to, with its role
 * (for the CLI's organization picker). Suspended ones are listed too — the
 * membership is the user's to know; their resources answer 403 — deleted
 * ones are not. Session only (docs/people/members.md).
 */
export async function listMyOrgs(ctx: ServiceContext): Promise<z.infer<typeof OrganizationMembership>[]> {
  if (isLocalOperator(ctx)) {
    // the local-first CLI owns its embedded database: every organization in it is its own
    const all = await ctx.db.select().from(orgs).where(isNull(orgs.deletedAt)).orderBy(asc(orgs.slug));
    return all.map((org) => ({ ...toOrganization(org), role: 'owner' as const }));
  }
  const user = requireUserSession(ctx);
  const rows = await ctx.db
    .select({ org: orgs, role: orgMembers.role })
    .from(orgMembers)
    .innerJoin(orgs, eq(orgs.id, orgMembers.orgId))
    .where(and(eq(orgMembers.userId, user.userId), isNull(orgs.deletedAt)))
    .orderBy(asc(orgs.slug));
  return rows.map((row) => ({ ...toOrganization(row.org), role: row.role }));
}

/**
 * DELETE /orgs/{id}: owners only, a soft delete (orgs.deleted_at). Every
 * lookup skips deleted organizations, so from the commit on it is 404 to
 * everyone, its tokens included; its slug stays taken (the unique index
 * covers deleted rows), so POST /orgs with it is 409. Takes the membership
 * lock, so it cannot interleave with a role change or a removal.
 */
export async function deleteOrg(ctx: ServiceContext, ref: string): Promise<z.infer<typeof OrganizationDeleted>> {
  const actor = requireUserSession(ctx);
  const org = await loadOrg(ctx, ref);
  requirePermission(ctx.caller, 'org:delete');
  await ctx.db.transaction(async (tx) => {
    await lockOrganization(tx, org);
    const role = await actorRoleUnderLock(tx, org, actor);
    if (!roleAllows(role, 'org:delete')) throw new ApiError('forbidden', 'only an owner can delete the organization');
    await tx.update(orgs).set({ deletedAt: ctx.clock.now() }).where(eq(orgs.id, org.id));
    await recordAudit(tx, {
      action: 'org.deleted',
      actor: actorOf(actor),
      orgId: org.id,
      target: { type: 'org', id: org.id },
      data: { slug: org.slug, name: org.name },
    });
  });
  return { deleted: true, id: org.id };
}
