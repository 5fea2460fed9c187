import { z } from '@hono/zod-openapi';
import { and, eq, ne, or, sql } from 'drizzle-orm';
import { loadOrg, requirePermission, type OrgRow } from '../../auth/access';
import { requireUserSession } from '../../auth/memberships';
import { roleAllows } from '../../auth/permissions';
import { CodehostApiError, codehostApp, forgetInstallationTokens, type GitHubInstallation, type GrantedRepositories } from '../../codehost/app';
import { signInstallState, verifyInstallState, type InstallStateClaims } from '../../codehost/install-state';
import type { ServiceContext } from '../../context';
import { recordAudit, type AuditAction, type AuditActor } from '../../db/audit';
import type { Queryable, Tx } from '../../db/client';
import { githubInstallations, orgMembers, orgs } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { isUuid } from '../names';
import type { Installation, InstallUrl } from './schemas';

/**
 * The code-hosting app integration (SPEC "Code-hosting app integration",
 * "Inbound code-hosting webhook events"; DECISIONS §8). Every choice SPEC
 * leaves open is in docs/codehost.md.
 *
 * Order of checks, on every route: the caller's own credential first (a
 * session or token: 401, 403, 404 as anywhere else; the install state: 401),
 * then the App's configuration (503 codehost_not_configured), then the
 * request. The App webhook is the exception: its credential is an HMAC with
 * CODEHOST_APP_WEBHOOK_SECRET, which cannot be checked before the App is
 * configured, so 503 comes first there.
 */

type InstallationRow = typeof githubInstallations.$inferSelect;
type InstallationBody = z.infer<typeof Installation>;

export const deps = (ctx: ServiceContext) => ({ config: ctx.config, clock: ctx.clock, logger: ctx.logger });

export const toInstallation = (row: InstallationRow): InstallationBody => ({
  id: row.id,
  installationId: row.installationId,
  orgId: row.orgId,
  accountLogin: row.accountLogin,
  accountType: row.accountType,
  status: row.status,
  repositorySelection: row.repositorySelection === 'all' ? 'all' : 'selected',
  grantedRepos: row.grantedRepos,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
  deletedAt: optionalTimestamp(row.deletedAt),
});

// --- install flow ----------------------------------------------------------------

/**
 * The App's install page: github.com's, or a GitHub Enterprise Server's when
 * CODEHOST_API_URL is one (`https://host/api/v3` → `https://host/github-apps/…`).
 */
function installPage(apiUrl: string, appName: string): string {
  const slug = encodeURIComponent(appName);
  const enterprise = /^(https?:\/\/[^/]+)\/api\/v3$/.exec(apiUrl);
  return enterprise ? `${enterprise[1]}/github-apps/${slug}/installations/new` : `https://github.com/apps/${slug}/installations/new`;
}

/** POST /github/install-url: a user who is owner or admin of the organization. */
export async function createInstallUrl(ctx: ServiceContext, input: { orgId: string }): Promise<z.infer<typeof InstallUrl>> {
  const user = requireUserSession(ctx);
  const org = await loadOrg(ctx, input.orgId);
  requirePermission(ctx.caller, 'org:manage');
  const app = await codehostApp(deps(ctx));
  const state = await signInstallState(ctx.config.authSecret, { orgId: org.id, userId: user.userId }, ctx.clock.now());
  return { url: `${installPage(ctx.config.codehostApiUrl, app.appName)}?state=${encodeURIComponent(state)}` };
}

/** The install state of a callback, or 401: it is the callback's only credential. */
export async function authenticateInstallState(ctx: ServiceContext, state: string | undefined): Promise<InstallStateClaims> {
  if (!state) throw new ApiError('unauthorized', 'the install callback needs the `state` GitHub passes back: start again from POST /github/install-url');
  const verdict = await verifyInstallState(ctx.config.authSecret, state, ctx.clock.now());
  if (!verdict.ok) {
    throw new ApiError(
      'unauthorized',
      verdict.reason === 'expired'
        ? 'the install state has expired (it is valid 10 minutes): start again from POST /github/install-url'
        : 'the install state is not valid: start again from POST /github/install-url',
    );
  }
  return verdict.claims;
}

/**
 * GET /github/install-callback: the state says which organization and
 * which user; the user must still be an owner or admin of it. The
 * installation and its repositories are read from GitHub as the App, and
 * the row is upserted (claimInstallation).
 */
export async function completeInstallCallback(
  ctx: ServiceContext,
  claims: InstallStateClaims,
  installationId: number,
): Promise<{ installation: InstallationBody; orgSlug: string }> {
  const app = await codehostApp(deps(ctx));
  const [org] = await ctx.db.select().from(orgs).where(eq(orgs.id, claims.orgId)).limit(1);
  if (!org || org.deletedAt) throw notFound('the organization of this install state');
  if (org.suspendedAt) throw new ApiError('org_suspended', `organization "${org.slug}" is suspended`);
  const [membership] = await ctx.db
    .select({ role: orgMembers.role })
    .from(orgMembers)
    .where(and(eq(orgMembers.orgId, org.id), eq(orgMembers.userId, claims.userId)))
    .limit(1);
  if (!membership || !roleAllows(membership.role, 'org:manage')) {
    throw new ApiError('forbidden', 'the user who asked for this install URL is no longer an owner or admin of the organization');
  }
  const { installation, repositories } = await readInstallation(ctx, app, installationId);
  const row = await ctx.db.transaction((tx) =>
    claimInstallation(ctx, tx, { org, userId: claims.userId, installation, repositories, action: 'github.installation_claimed', actor: { type: 'user', id: claims.userId } }),
  );
  return { installation: toInstallation(row), orgSlug: org.slug };
}

/** POST /github/installations/recover: claims an installation the callback did not record (owner or admin). */
export async function recoverInstallation(ctx: ServiceContext, input: { orgId: string; installationId: number }): Promise<InstallationBody> {
  const user = requireUserSession(ctx);
  const org = await loadOrg(ctx, input.orgId);
  requirePermission(ctx.caller, 'org:manage');
  const app = await codehostApp(deps(ctx));
  const { installation, repositories } = await readInstallation(ctx, app, input.installationId);
  const row = await ctx.db.transaction((tx) =>
    claimInstallation(ctx, tx, { org, userId: user.userId, installation, repositories, action: 'github.installation_recovered', actor: { type: 'user', id: user.userId } }),
  );
  return toInstallation(row);
}

/**
 * The installation as GitHub has it, and its granted repositories. A
 * suspended installation cannot mint a token, so its repositories are not
 * read (the row keeps the list it had).
 */
/**
 * A GitHub call a request depends on: GitHub failing or out of reach is
 * 502 codehost_unavailable, saying which call and what GitHub answered (never
 * a token), not an opaque 500. The request changed nothing; it can be retried.
 */
async function fromGitHub<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof CodehostApiError) {
      throw new ApiError('codehost_unavailable', `${error.message}: nothing was changed; try again${error.retryAt ? ` after ${error.retryAt.toISOString()}` : ''}`);
    }
    throw error;
  }
}

async function readInstallation(
  ctx: ServiceContext,
  app: Awaited<ReturnType<typeof codehostApp>>,
  installationId: number,
): Promise<{ installation: GitHubInstallation; repositories: GrantedRepositories | undefined }> {
  const installation = await fromGitHub(() => app.getInstallation(installationId));
  if (!installation) throw notFound(`installation ${installationId} of the GitHub App "${app.appName}"`);
  const repositories = installation.suspendedAt ? undefined : await fromGitHub(() => app.grantedRepositories(installationId));
  ctx.logger.info('read GitHub installation', { requestId: ctx.requestId, installationId, suspended: installation.suspendedAt !== null });
  return { installation, repositories };
}

/**
 * Inserts or refreshes the row of an installation for `org`, in one
 * statement: a row of another organization is left alone unless it was
 * deleted (released), and then nothing is returned: 409
 * installation_claimed, whose message never names the other organization.
 * Audited in the same transaction.
 */
async function claimInstallation(
  ctx: ServiceContext,
  tx: Tx,
  claim: {
    org: OrgRow;
    userId: string;
    installation: GitHubInstallation;
    repositories: GrantedRepositories | undefined;
    action: Extract<AuditAction, 'github.installation_claimed' | 'github.installation_recovered'>;
    actor: AuditActor;
  },
): Promise<InstallationRow> {
  const { org, installation, repositories } = claim;
  const now = ctx.clock.now();
  const status = installation.suspendedAt ? 'suspended' : 'active';
  const selection = repositories?.repositorySelection ?? installation.repositorySelection;
  const [row] = await tx
    .insert(githubInstallations)
    .values({
      installationId: installation.id,
      orgId: org.id,
      accountLogin: installation.accountLogin,
      accountType: installation.accountType,
      status,
      grantedRepos: repositories?.fullNames ?? [],
      repositorySelection: selection,
      claimedByUserId: claim.userId,
      createdAt: now,
      updatedAt: now,
    })
    .onConflictDoUpdate({
      target: githubInstallations.installationId,
      set: {
        orgId: org.id,
        accountLogin: installation.accountLogin,
        accountType: installation.accountType,
        status,
        // a suspended installation's repositories could not be read: keep the list a deleted row of another organization never passes on
        grantedRepos: repositories
          ? repositories.fullNames
          : sql`case when ${githubInstallations.orgId} = ${org.id} then ${githubInstallations.grantedRepos} else '[]'::jsonb end`,
        repositorySelection: selection,
        claimedByUserId: claim.userId,
        updatedAt: now,
        deletedAt: null,
      },
      setWhere: or(eq(githubInstallations.orgId, org.id), eq(githubInstallations.status, 'deleted')),
    })
    .returning();
  if (!row) throw new ApiError('installation_claimed', `installation ${installation.id} is already claimed by another organization`);
  await recordAudit(tx, {
    action: claim.action,
    actor: claim.actor,
    orgId: org.id,
    target: { type: 'github-installation', id: row.id },
    data: { installationId: row.installationId, accountLogin: row.accountLogin, status: row.status, repositoryCount: row.grantedRepos.length },
  });
  ctx.logger.info(claim.action === 'github.installation_claimed' ? 'GitHub installation claimed' : 'GitHub installation recovered', {
    requestId: ctx.requestId,
    orgId: org.id,
    installationId: row.installationId,
  });
  return row;
}

/** An installation row by the service's id (a UUID) or GitHub's id (digits). */
async function findInstallation(db: Queryable, ref: string): Promise<InstallationRow | undefined> {
  const [row] = await db
    .select()
    .from(githubInstallations)
    .where(isUuid(ref) ? eq(githubInstallations.id, ref) : eq(githubInstallations.installationId, Number(ref)))
    .limit(1);
  return row;
}

/**
 * DELETE /github/installations/{id}: soft delete (SPEC), by an owner or
 * admin of the organization that claimed it; nothing is uninstalled on
 * GitHub. Another organization's installation is 404, as a missing one.
 * Deleting a deleted one answers it again, unchanged and not audited again.
 */
export async function deleteInstallation(ctx: ServiceContext, ref: string): Promise<InstallationBody> {
  const user = requireUserSession(ctx);
  const found = await findInstallation(ctx.db, ref);
  const hidden = () => notFound(`installation "${ref}"`);
  if (!found) throw hidden();
  try {
    await loadOrg(ctx, found.orgId);
  } catch (error) {
    // the organization's id must not leak through its not-found message
    if (error instanceof ApiError && error.code === 'not_found') throw hidden();
    throw error;
  }
  requirePermission(ctx.caller, 'org:manage');
  await codehostApp(deps(ctx));
  const row = await ctx.db.transaction(async (tx) => {
    const now = ctx.clock.now();
    const [deleted] = await tx
      .update(githubInstallations)
      .set({ status: 'deleted', deletedAt: now, updatedAt: now })
      .where(and(eq(githubInstallations.id, found.id), eq(githubInstallations.orgId, found.orgId), ne(githubInstallations.status, 'deleted')))
      .returning();
    if (!deleted) {
      const [current] = await tx.select().from(githubInstallations).where(eq(githubInstallations.id, found.id));
      if (!current || current.orgId !== found.orgId) throw hidden();
      return current;
    }
    await recordAudit(tx, {
      action: 'github.installation_deleted',
      actor: { type: 'user', id: user.userId },
      orgId: deleted.orgId,
      target: { type: 'github-installation', id: deleted.id },
      data: { installationId: deleted.installationId, accountLogin: deleted.accountLogin },
    });
    return deleted;
  });
  await forgetInstallationTokens(ctx.config, row.installationId);
  return toInstallation(row);
}
