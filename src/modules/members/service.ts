import type { z } from '@hono/zod-openapi';
import { and, asc, count, eq, inArray, isNull } from 'drizzle-orm';
import { loadOrg, requirePermission, type OrgRow } from '../../auth/access';
import { requireUserSession } from '../../auth/memberships';
import { roleAllows, roleCovers, ROLES } from '../../auth/permissions';
import type { UserSessionPrincipal } from '../../auth/principal';
import { authBaseUrl, INVITATION_MARKER } from '../../auth/sessions';
import type { ServiceContext } from '../../context';
import type { Queryable, Tx } from '../../db/client';
import { accounts, graphViews, notifications, orgMembers, orgs, serviceTokens, users, type ORG_ROLES } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { recordAudit } from '../../db/audit';
import { actorOf } from '../../auth/actor';
import { notify } from '../notifications/notify';
import type { Member, MemberProvision, MemberRemoved, OrganizationLeft } from './schemas';

/**
 * Organization membership (SPEC Organizations, DECISIONS §5 and §8;
 * docs/people/members.md).
 *
 * Every change to an organization's members — and its deletion — runs in
 * one transaction that first locks the organization's row
 * (lockOrganization), then reads the acting user's role again under that
 * lock. So the rule "an organization keeps at least one owner" is exact
 * under concurrency: two owners demoting, removing each other or both
 * leaving at once take turns, and the second one sees the first one's result.
 */

type OrgRole = (typeof ORG_ROLES)[number];
type MemberBody = z.infer<typeof Member>;

const memberColumns = {
  userId: orgMembers.userId,
  email: users.email,
  name: users.name,
  role: orgMembers.role,
  joinedAt: orgMembers.joinedAt,
};

type MemberRow = { userId: string; email: string; name: string; role: OrgRole; joinedAt: Date };

const toMember = (row: MemberRow): MemberBody => ({ ...row, joinedAt: timestamp(row.joinedAt) });

/**
 * Locks the organization for a membership change, or 404 when it was
 * deleted meanwhile. NO KEY UPDATE conflicts with itself (and with the
 * UPDATE of a deletion or a suspension) but not with the KEY SHARE locks
 * that inserts into tables referencing the organization take, so the
 * organization's ordinary writes never wait for a membership change.
 */
export async function lockOrganization(tx: Tx, org: OrgRow): Promise<void> {
  const [row] = await tx
    .select({ id: orgs.id })
    .from(orgs)
    .where(and(eq(orgs.id, org.id), isNull(orgs.deletedAt)))
    .for('no key update');
  if (!row) throw notFound(`organization "${org.slug}"`);
}

async function memberRole(db: Queryable, orgId: string, userId: string): Promise<OrgRole | null> {
  const [row] = await db
    .select({ role: orgMembers.role })
    .from(orgMembers)
    .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, userId)));
  return row?.role ?? null;
}

/**
 * The acting user's role, read under the organization's lock: the role
 * loadOrg saw may have changed since, and the decision must rest on the
 * current one. A user removed meanwhile is a non-member (404).
 */
export async function actorRoleUnderLock(tx: Tx, org: OrgRow, actor: UserSessionPrincipal): Promise<OrgRole> {
  const role = await memberRole(tx, org.id, actor.userId);
  if (!role) throw notFound(`organization "${org.slug}"`);
  return role;
}

async function ownerCount(tx: Tx, orgId: string): Promise<number> {
  const [row] = await tx
    .select({ n: count() })
    .from(orgMembers)
    .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.role, 'owner')));
  return Number(row?.n ?? 0);
}

async function memberRow(db: Queryable, orgId: string, userId: string): Promise<MemberRow | undefined> {
  const [row] = await db
    .select(memberColumns)
    .from(orgMembers)
    .innerJoin(users, eq(users.id, orgMembers.userId))
    .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, userId)));
  return row;
}

const lastOwner = (what: string) =>
  new ApiError('last_owner', `${what}: an organization keeps at least one owner; make another member owner first`);

function assertManager(role: OrgRole): void {
  if (!roleAllows(role, 'org:manage')) throw new ApiError('forbidden', `role "${role}" cannot manage members: owner or admin only`);
}

/** Owners are managed by owners only: an admin can neither change an owner nor make one. */
function assertMayChangeRole(actorRole: OrgRole, from: OrgRole, to: OrgRole): void {
  if (actorRole === 'owner') return;
  if (from === 'owner') throw new ApiError('forbidden', "only an owner can change an owner's role");
  if (to === 'owner') throw new ApiError('forbidden', 'only an owner can make owners');
}

/** Session, organization (404 for non-members) and the owner-or-admin gate, before any lock is taken. */
async function managerScene(ctx: ServiceContext, orgRef: string): Promise<{ actor: UserSessionPrincipal; org: OrgRow }> {
  const actor = requireUserSession(ctx);
  const org = await loadOrg(ctx, orgRef);
  requirePermission(ctx.caller, 'org:manage');
  return { actor, org };
}

/** Roles a personal token may not keep once its user holds `role` (DECISIONS §8). */
const rolesAbove = (role: OrgRole) => ROLES.filter((other) => !roleCovers(role, other));

/**
 * Sets a member's role, in the caller's transaction: the personal tokens
 * the member minted in this organization come down to the new role where
 * they were above it (a promotion does not raise them again), the member is
 * told (unless they changed their own role), and the change is audited.
 */
async function applyRoleChange(
  tx: Tx,
  ctx: ServiceContext,
  scene: { org: OrgRow; actor: UserSessionPrincipal },
  target: { userId: string; from: OrgRole; to: OrgRole },
): Promise<void> {
  const { org, actor } = scene;
  await tx
    .update(orgMembers)
    .set({ role: target.to })
    .where(and(eq(orgMembers.orgId, org.id), eq(orgMembers.userId, target.userId)));
  const clamped = await tx
    .update(serviceTokens)
    .set({ role: target.to })
    .where(
      and(
        eq(serviceTokens.orgId, org.id),
        eq(serviceTokens.createdByUserId, target.userId),
        eq(serviceTokens.personal, true),
        isNull(serviceTokens.revokedAt),
        inArray(serviceTokens.role, rolesAbove(target.to)),
      ),
    )
    .returning({ id: serviceTokens.id });
  if (target.userId !== actor.userId) {
    await notify(tx, {
      userId: target.userId,
      orgId: org.id,
      kind: 'org.role_changed',
      title: `Your role in ${org.name} is now ${target.to}`,
      body: `${actor.name} changed your role in ${org.name} from ${target.from} to ${target.to}.`,
      data: { orgId: org.id, orgSlug: org.slug, from: target.from, to: target.to },
    });
  }
  await recordAudit(tx, {
    action: 'member.role_changed',
    actor: actorOf(actor),
    orgId: org.id,
    target: { type: 'user', id: target.userId },
    data: { from: target.from, to: target.to, personalTokensLowered: clamped.map((token) => token.id) },
  });
}

/**
 * What leaving takes along, in the caller's transaction: the member's
 * personal graph views in the organization's projects, its notifications
 * about the organization, and the personal tokens it minted there (revoked,
 * so the audit log still names them). Non-personal tokens it minted stay:
 * they belong to the project, not to the person.
 */
async function dropMembership(tx: Tx, ctx: ServiceContext, orgId: string, userId: string): Promise<{ revokedTokens: string[] }> {
  await tx
    .delete(graphViews)
    .where(and(eq(graphViews.orgId, orgId), eq(graphViews.scope, 'user'), eq(graphViews.ownerUserId, userId)));
  await tx.delete(notifications).where(and(eq(notifications.userId, userId), eq(notifications.orgId, orgId)));
  const revoked = await tx
    .update(serviceTokens)
    .set({ revokedAt: ctx.clock.now() })
    .where(
      and(
        eq(serviceTokens.orgId, orgId),
        eq(serviceTokens.createdByUserId, userId),
        eq(serviceTokens.personal, true),
        isNull(serviceTokens.revokedAt),
      ),
    )
    .returning({ id: serviceTokens.id });
  await tx.delete(orgMembers).where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, userId)));
  return { revokedTokens: revoked.map((token) => token.id) };
}

export async function listMembers(ctx: ServiceContext, orgRef: string): Promise<MemberBody[]> {
  requireUserSession(ctx);
  const org = await loadOrg(ctx, orgRef);
  const rows = await ctx.db
    .select(memberColumns)
    .from(orgMembers)
    .innerJoin(users, eq(users.id, orgMembers.userId))
    .where(eq(orgMembers.orgId, org.id))
    .orderBy(asc(orgMembers.joinedAt), asc(users.email));
  return rows.map(toMember);
}

/**
 * The user of an address, created without a password when there is none
 * (it sets one through its invitation). Written with the membership in one
 * transaction rather than through Better Auth's adapter, which would write
 * on another connection: a failed request leaves no user without its
 * membership. A concurrent provisioning of the same address waits on the
 * unique index and then finds the row.
 */
async function findOrCreateUser(tx: Tx, email: string, name: string): Promise<{ id: string; created: boolean }> {
  const byEmail = () => tx.select({ id: users.id }).from(users).where(eq(users.email, email));
  const [existing] = await byEmail();
  if (existing) return { id: existing.id, created: false };
  const [inserted] = await tx
    .insert(users)
    .values({ email, name, emailVerified: false })
    .onConflictDoNothing({ target: users.email })
    .returning({ id: users.id });
  if (inserted) return { id: inserted.id, created: true };
  const [raced] = await byEmail();
  return { id: raced!.id, created: false };
}

/** A user who never signed in any way (no password, no SSO account) is sent an invitation. */
async function hasAnyAccount(tx: Tx, userId: string): Promise<boolean> {
  const [row] = await tx.select({ id: accounts.id }).from(accounts).where(eq(accounts.userId, userId)).limit(1);
  return row !== undefined;
}

/**
 * POST /orgs/{id}/users: provision-or-upsert by address. A new address
 * becomes a user without a password and is invited; an existing user is
 * added, or, when already a member, gets the requested role (the rules of
 * a role change apply). Owners only make owners.
 */
export async function provisionMember(
  ctx: ServiceContext,
  orgRef: string,
  input: z.infer<typeof MemberProvision>,
): Promise<MemberBody> {
  const { actor, org } = await managerScene(ctx, orgRef);
  const { grants } = ctx.caller;
  if (input.role === 'owner' && grants.scope === 'organization' && grants.role !== 'owner') {
    throw new ApiError('forbidden', 'only an owner can make owners');
  }
  // Better Auth keeps addresses lowercased; so does the users.email index
  const email = input.email.trim().toLowerCase();
  const { member, invite } = await ctx.db.transaction(async (tx) => {
    await lockOrganization(tx, org);
    const actorRole = await actorRoleUnderLock(tx, org, actor);
    assertManager(actorRole);
    if (input.role === 'owner') assertMayChangeRole(actorRole, 'member', 'owner');
    const user = await findOrCreateUser(tx, email, input.name);
    const current = await memberRole(tx, org.id, user.id);
    if (current === null) {
      await tx.insert(orgMembers).values({ orgId: org.id, userId: user.id, role: input.role });
      await notify(tx, {
        userId: user.id,
        orgId: org.id,
        kind: 'org.member_added',
        title: `You were added to ${org.name}`,
        body: `${actor.name} added you to ${org.name} as ${input.role}.`,
        data: { orgId: org.id, orgSlug: org.slug, role: input.role },
      });
      await recordAudit(tx, {
        action: 'member.added',
        actor: actorOf(actor),
        orgId: org.id,
        target: { type: 'user', id: user.id },
        data: { role: input.role, userCreated: user.created },
      });
    } else if (current !== input.role) {
      assertMayChangeRole(actorRole, current, input.role);
      if (current === 'owner' && (await ownerCount(tx, org.id)) <= 1) throw lastOwner('cannot demote the last owner');
      await applyRoleChange(tx, ctx, { org, actor }, { userId: user.id, from: current, to: input.role });
    }
    return { member: (await memberRow(tx, org.id, user.id))!, invite: !(await hasAnyAccount(tx, user.id)) };
  });
  if (invite) await sendInvitation(ctx, email, org);
  return toMember(member);
}

/**
 * The invitation is Better Auth's password-reset mail whose callback URL
 * carries `invitation=<slug>`: src/auth/sessions.ts sends the invitation
 * text for such links, and following one sets the first password. Sent
 * after the commit (Better Auth writes its verification row on its own
 * connection). Like every mail, a failure is logged and not the request's:
 * provisioning the same address again sends a new invitation.
 */
async function sendInvitation(ctx: ServiceContext, email: string, org: OrgRow): Promise<void> {
  try {
    await ctx.auth().api.requestPasswordReset({ body: { email, redirectTo: invitationLanding(ctx, org) } });
  } catch (error) {
    ctx.logger.error('could not create the invitation', { requestId: ctx.requestId, orgId: org.id, error });
  }
}

/**
 * Where the invitation link lands once its token is checked, with `token`
 * added to the query: the hosted UI's page when SERVICE_UI_BASE_URL is set
 * (its origin must be in TRUSTED_ORIGINS, as for any browser sign-in),
 * else the API's own origin — there the token is read off the link and sent
 * to POST /api/auth/reset-password (docs/people/members.md).
 */
function invitationLanding(ctx: ServiceContext, org: OrgRow): string {
  const query = `?${INVITATION_MARKER}=${encodeURIComponent(org.slug)}`;
  const ui = ctx.config.uiBaseUrl;
  if (ui) return `${ui.replace(/\/+$/, '')}/accept-invitation${query}`;
  const base = authBaseUrl(ctx.config);
  return base ? new URL(`/${query}`, base).href : `/${query}`;
}

/** PATCH /orgs/{id}/users/{userId}. */
export async function changeMemberRole(ctx: ServiceContext, orgRef: string, userId: string, to: OrgRole): Promise<MemberBody> {
  const { actor, org } = await managerScene(ctx, orgRef);
  const member = await ctx.db.transaction(async (tx) => {
    await lockOrganization(tx, org);
    const actorRole = await actorRoleUnderLock(tx, org, actor);
    assertManager(actorRole);
    const from = await memberRole(tx, org.id, userId);
    if (from === null) throw notFound(`member "${userId}"`);
    assertMayChangeRole(actorRole, from, to);
    if (from !== to) {
      if (from === 'owner' && (await ownerCount(tx, org.id)) <= 1) throw lastOwner('cannot demote the last owner');
      await applyRoleChange(tx, ctx, { org, actor }, { userId, from, to });
    }
    return (await memberRow(tx, org.id, userId))!;
  });
  return toMember(member);
}

/** DELETE /orgs/{id}/users/{userId}. */
export async function removeMember(ctx: ServiceContext, orgRef: string, userId: string): Promise<z.infer<typeof MemberRemoved>> {
  const { actor, org } = await managerScene(ctx, orgRef);
  await ctx.db.transaction(async (tx) => {
    await lockOrganization(tx, org);
    const actorRole = await actorRoleUnderLock(tx, org, actor);
    assertManager(actorRole);
    const role = await memberRole(tx, org.id, userId);
    if (role === null) throw notFound(`member "${userId}"`);
    if (role === 'owner' && actorRole !== 'owner') throw new ApiError('forbidden', 'only an owner can remove an owner');
    if (role === 'owner' && (await ownerCount(tx, org.id)) <= 1) throw lastOwner('cannot remove the last owner');
    const { revokedTokens } = await dropMembership(tx, ctx, org.id, userId);
    await recordAudit(tx, {
      action: 'member.removed',
      actor: actorOf(actor),
      orgId: org.id,
      target: { type: 'user', id: userId },
      data: { role, personalTokensRevoked: revokedTokens },
    });
  });
  return { removed: true, userId };
}

/** POST /orgs/{id}/leave: the signed-in user leaves; any member may, except the last owner. */
export async function leaveOrg(ctx: ServiceContext, orgRef: string): Promise<z.infer<typeof OrganizationLeft>> {
  const actor = requireUserSession(ctx);
  const org = await loadOrg(ctx, orgRef);
  await ctx.db.transaction(async (tx) => {
    await lockOrganization(tx, org);
    const role = await actorRoleUnderLock(tx, org, actor);
    if (role === 'owner' && (await ownerCount(tx, org.id)) <= 1) throw lastOwner('the last owner cannot leave');
    const { revokedTokens } = await dropMembership(tx, ctx, org.id, actor.userId);
    await recordAudit(tx, {
      action: 'member.left',
      actor: actorOf(actor),
      orgId: org.id,
      target: { type: 'user', id: actor.userId },
      data: { role, personalTokensRevoked: revokedTokens },
    });
  });
  return { left: true, orgId: org.id };
}
