import { SIGNATURE_SHAPE, type GitHubDelivery } from './delivery';
import { z } from '@hono/zod-openapi';
import { verify } from '@octokit/webhooks-methods';
import { and, eq, inArray, ne, or, sql } from 'drizzle-orm';
import { authorizeProject, loadOrg, requirePermission, type OrgRow, type ProjectRef } from '../../auth/access';
import { requireUserSession } from '../../auth/memberships';
import { roleAllows } from '../../auth/permissions';
import { CodehostApiError, codehostApp, forgetInstallationTokens, type GitHubInstallation, type GrantedRepositories } from '../../codehost/app';
import { grantingInstallation } from '../../codehost/installations';
import { signInstallState, verifyInstallState, type InstallStateClaims } from '../../codehost/install-state';
import type { ServiceContext } from '../../context';
import { recordAudit, type AuditAction, type AuditActor } from '../../db/audit';
import type { Queryable, Tx } from '../../db/client';
import { notify } from '../../db/notifications';
import { githubInstallations, orgMembers, orgs, projectGithubRepos } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { isUuid } from '../names';
import { onPullRequestClosed } from './pull-request-closed';
import type { Installation, InstallUrl, RepoLink, RepoLinkDeleted, WebhookOutcomeDetail } from './schemas';

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

const deps = (ctx: ServiceContext) => ({ config: ctx.config, clock: ctx.clock, logger: ctx.logger });

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

// --- repository links ------------------------------------------------------------

type RepoRef = { owner: string; repo: string };

/** GitHub compares owners and names case-insensitively; links are kept lowercased. */
const normalized = (ref: RepoRef) => ({ owner: ref.owner.toLowerCase(), name: ref.repo.toLowerCase() });

const toRepoLink = (row: typeof projectGithubRepos.$inferSelect, installationId: number | null): z.infer<typeof RepoLink> => ({
  owner: row.owner,
  name: row.name,
  fullName: `${row.owner}/${row.name}`,
  createdAt: timestamp(row.createdAt),
  installationId,
});

const linkWhere = (projectId: string, owner: string, name: string) =>
  and(eq(projectGithubRepos.projectId, projectId), eq(projectGithubRepos.owner, owner), eq(projectGithubRepos.name, name));

/** GET PROJ/github/repos/{owner}/{repo} (catalog:read). */
export async function getRepoLink(ctx: ServiceContext, ref: ProjectRef, repo: RepoRef): Promise<z.infer<typeof RepoLink>> {
  const { org, project } = await authorizeProject(ctx, ref, 'catalog:read');
  await codehostApp(deps(ctx));
  const { owner, name } = normalized(repo);
  const [row] = await ctx.db.select().from(projectGithubRepos).where(linkWhere(project.id, owner, name)).limit(1);
  if (!row) throw notFound(`repository link "${owner}/${name}"`);
  return toRepoLink(row, await grantingInstallation(ctx.db, org.id, owner, name));
}

/**
 * PUT PROJ/github/repos/{owner}/{repo} (catalog:write): the project calls
 * the repository its own. Only a repository an active installation of the
 * organization grants may be linked (400 invalid_reference otherwise), so a
 * project cannot claim a repository its organization has no access to.
 * Idempotent: 201 when linked now, 200 when it already was.
 */
export async function putRepoLink(ctx: ServiceContext, ref: ProjectRef, repo: RepoRef): Promise<{ link: z.infer<typeof RepoLink>; created: boolean }> {
  const { org, project } = await authorizeProject(ctx, ref, 'catalog:write');
  await codehostApp(deps(ctx));
  const { owner, name } = normalized(repo);
  const installationId = await grantingInstallation(ctx.db, org.id, owner, name);
  if (installationId === null) {
    throw new ApiError(
      'invalid_reference',
      `repository ${owner}/${name} is not granted to an active GitHub App installation of this organization: install the App on it (POST /github/install-url) first`,
    );
  }
  const [inserted] = await ctx.db
    .insert(projectGithubRepos)
    .values({ orgId: org.id, projectId: project.id, owner, name, createdAt: ctx.clock.now() })
    .onConflictDoNothing()
    .returning();
  if (inserted) return { link: toRepoLink(inserted, installationId), created: true };
  const [existing] = await ctx.db.select().from(projectGithubRepos).where(linkWhere(project.id, owner, name)).limit(1);
  if (!existing) throw notFound(`repository link "${owner}/${name}"`);
  return { link: toRepoLink(existing, installationId), created: false };
}

/** DELETE PROJ/github/repos/{owner}/{repo} (catalog:write). */
export async function deleteRepoLink(ctx: ServiceContext, ref: ProjectRef, repo: RepoRef): Promise<z.infer<typeof RepoLinkDeleted>> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  await codehostApp(deps(ctx));
  const { owner, name } = normalized(repo);
  const [deleted] = await ctx.db.delete(projectGithubRepos).where(linkWhere(project.id, owner, name)).returning();
  if (!deleted) throw notFound(`repository link "${owner}/${name}"`);
  return { deleted: true, name: `${owner}/${name}` };
}

// --- the App webhook -------------------------------------------------------------

export type AppWebhookDelivery = GitHubDelivery;

/** The installation id of an unverified body, for the log line of a refused delivery (nothing else of it is read). */
function claimedInstallationId(body: string): number | undefined {
  try {
    const id = (JSON.parse(body) as { installation?: { id?: unknown } } | null)?.installation?.id;
    return typeof id === 'number' && Number.isSafeInteger(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

/** The JSON of a delivery: GitHub sends it as the body, or as the `payload` field of a form when the App says so. */
function payloadText(delivery: AppWebhookDelivery): string | undefined {
  if ((delivery.contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded')) {
    return new URLSearchParams(delivery.body).get('payload') ?? undefined;
  }
  return delivery.body;
}

const GitHubLogin = z.string().min(1).max(100);
const RepositoryItem = z.object({ full_name: z.string().regex(/^[A-Za-z0-9._-]{1,100}\/[A-Za-z0-9._-]{1,100}$/) });
const InstallationPayload = z.object({
  action: z.string().max(100),
  installation: z.object({ id: z.number().int().positive().max(Number.MAX_SAFE_INTEGER), account: z.object({ login: GitHubLogin }).optional() }),
});
const RepositoriesPayload = InstallationPayload.extend({
  repository_selection: z.enum(['all', 'selected']).optional(),
  repositories_added: z.array(RepositoryItem).max(100_000).default([]),
  repositories_removed: z.array(RepositoryItem).max(100_000).default([]),
});

function parsed<T extends z.ZodType>(schema: T, payload: unknown, event: string): z.output<T> {
  const result = schema.safeParse(payload);
  if (!result.success) {
    const details = result.error.issues.slice(0, 20).map((issue) => ({ path: issue.path.map(String).join('.') || '(root)', message: issue.message }));
    throw new ApiError('validation_failed', `invalid ${event} payload: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details);
  }
  return result.data;
}

/**
 * POST /webhooks/github: verifies the delivery (constant time, by
 * @octokit/webhooks-methods) and applies the row of SPEC's table for its
 * event. A refused signature is logged with the event name and the
 * installation id only; a payload is never logged.
 */
export async function receiveAppWebhook(ctx: ServiceContext, delivery: AppWebhookDelivery): Promise<WebhookOutcomeDetail> {
  const app = await codehostApp(deps(ctx));
  const secret = ctx.config.codehostApp!.webhookSecret.reveal();
  let valid = false;
  if (delivery.signature && SIGNATURE_SHAPE.test(delivery.signature) && delivery.body.length > 0) {
    valid = await verify(secret, delivery.body, delivery.signature).catch(() => false);
  }
  if (!valid) {
    ctx.logger.warn('GitHub App webhook refused: invalid signature', {
      requestId: ctx.requestId,
      event: delivery.event ?? null,
      installationId: claimedInstallationId(delivery.body) ?? null,
    });
    throw new ApiError('invalid_signature', 'the X-Hub-Signature-256 of this delivery does not match CODEHOST_APP_WEBHOOK_SECRET');
  }
  const text = payloadText(delivery);
  let payload: unknown;
  try {
    payload = JSON.parse(text ?? '');
  } catch {
    throw new ApiError('invalid_json', 'the delivery is not valid JSON');
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
    throw new ApiError('validation_failed', 'the delivery is not a JSON object');
  }
  const event = delivery.event ?? '';
  const actor: AuditActor = { type: 'codehost', id: delivery.deliveryId?.slice(0, 200) ?? null };
  let outcome: WebhookOutcomeDetail;
  switch (event) {
    case 'installation':
      outcome = await installationChanged(ctx, parsed(InstallationPayload, payload, event), (id) => app.forgetInstallationTokens(id));
      break;
    case 'installation_repositories':
      outcome = await repositoriesChanged(ctx, parsed(RepositoriesPayload, payload, event), actor);
      break;
    case 'pull_request':
      outcome =
        (payload as { action?: unknown }).action === 'closed'
          ? await onPullRequestClosed(ctx, { payload: payload as Record<string, unknown>, deliveryId: delivery.deliveryId })
          : { kind: 'event-ignored', event, action: String((payload as { action?: unknown }).action ?? '') };
      break;
    case 'pull_request_review':
    case 'workflow_job':
    case 'workflow_run':
      // subscribed (SPEC Authentication 14), reserved: no effect yet
      outcome = { kind: 'event-reserved', event };
      break;
    default:
      outcome = { kind: 'event-ignored', event };
  }
  ctx.logger.info('GitHub App webhook', { requestId: ctx.requestId, event, outcome: outcome.kind });
  return outcome;
}

const STATUS_OF_ACTION = { deleted: 'deleted', suspend: 'suspended', unsuspend: 'active' } as const;

/**
 * installation deleted / suspend / unsuspend (SPEC "Code-hosting
 * installation status"): the row changes, and the installation's cached
 * tokens are cleared whatever the row says. A deleted row stays deleted;
 * unsuspend moves only a suspended one. `created` is acknowledged: the
 * install callback makes the row.
 */
async function installationChanged(
  ctx: ServiceContext,
  payload: z.output<typeof InstallationPayload>,
  forgetTokens: (installationId: number) => void,
): Promise<WebhookOutcomeDetail> {
  const installationId = payload.installation.id;
  if (payload.action === 'created') return { kind: 'installation-created', installationId };
  if (!(payload.action in STATUS_OF_ACTION)) return { kind: 'event-ignored', event: 'installation', action: payload.action };
  const action = payload.action as keyof typeof STATUS_OF_ACTION;
  const status = STATUS_OF_ACTION[action];
  const now = ctx.clock.now();
  const from = action === 'unsuspend' ? eq(githubInstallations.status, 'suspended') : action === 'suspend' ? eq(githubInstallations.status, 'active') : ne(githubInstallations.status, 'deleted');
  const [changed] = await ctx.db
    .update(githubInstallations)
    .set({ status, updatedAt: now, ...(status === 'deleted' ? { deletedAt: now } : {}) })
    .where(and(eq(githubInstallations.installationId, installationId), from))
    .returning({ orgId: githubInstallations.orgId });
  forgetTokens(installationId);
  const kind = { deleted: 'installation-deleted', suspend: 'installation-suspended', unsuspend: 'installation-unsuspended' }[action];
  if (changed) return { kind, installationId, status };
  const [row] = await ctx.db.select({ status: githubInstallations.status }).from(githubInstallations).where(eq(githubInstallations.installationId, installationId));
  return row ? { kind: 'installation-unchanged', installationId, status: row.status } : { kind: 'installation-unknown', installationId };
}

/** How many repository names an audit event or a notification lists; the counts are always whole. */
const LISTED_REPOSITORIES = 50;

/**
 * installation_repositories added / removed: granted_repos is updated, and
 * an audit event and a notification to each owner and admin of the
 * organization are written in the same transaction. If either insert
 * throws, nothing is kept and the route answers 500, so GitHub retries.
 */
async function repositoriesChanged(
  ctx: ServiceContext,
  payload: z.output<typeof RepositoriesPayload>,
  actor: AuditActor,
): Promise<WebhookOutcomeDetail> {
  const installationId = payload.installation.id;
  const added = payload.repositories_added.map((repository) => repository.full_name.toLowerCase());
  const removed = payload.repositories_removed.map((repository) => repository.full_name.toLowerCase());
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx.select().from(githubInstallations).where(eq(githubInstallations.installationId, installationId)).for('update');
    if (!row) return { kind: 'installation-unknown', installationId };
    if (row.status === 'deleted') return { kind: 'installation-unchanged', installationId, status: row.status };
    const granted = new Set(row.grantedRepos);
    for (const name of added) granted.add(name);
    for (const name of removed) granted.delete(name);
    const grantedRepos = [...granted].sort();
    const now = ctx.clock.now();
    await tx
      .update(githubInstallations)
      .set({ grantedRepos, repositorySelection: payload.repository_selection ?? row.repositorySelection, updatedAt: now })
      .where(eq(githubInstallations.id, row.id));
    const summary = {
      installationId,
      accountLogin: row.accountLogin,
      action: payload.action,
      added: added.slice(0, LISTED_REPOSITORIES),
      removed: removed.slice(0, LISTED_REPOSITORIES),
      addedCount: added.length,
      removedCount: removed.length,
      grantedCount: grantedRepos.length,
    };
    await recordAudit(tx, {
      action: 'github.installation_repositories',
      actor,
      orgId: row.orgId,
      target: { type: 'github-installation', id: row.id },
      data: summary,
    });
    const managers = await tx
      .select({ userId: orgMembers.userId })
      .from(orgMembers)
      .where(and(eq(orgMembers.orgId, row.orgId), inArray(orgMembers.role, ['owner', 'admin'])));
    const changes = [
      added.length > 0 ? `added ${added.length} (${listed(added)})` : undefined,
      removed.length > 0 ? `removed ${removed.length} (${listed(removed)})` : undefined,
    ].filter((part): part is string => part !== undefined);
    await notify(
      tx,
      ...managers.map(({ userId }) => ({
        userId,
        orgId: row.orgId,
        kind: 'github.repositories_changed' as const,
        title: `Repositories of the GitHub App installation on ${row.accountLogin} changed`,
        body: changes.length > 0 ? `Repositories ${changes.join('; ')}.` : 'The repository selection changed.',
        data: summary,
        createdAt: now,
      })),
    );
    return { kind: 'repositories-updated', installationId, added: added.length, removed: removed.length, granted: grantedRepos.length };
  });
}

const listed = (names: string[]) =>
  names.length > 5 ? `${names.slice(0, 5).join(', ')}, …` : names.join(', ');
