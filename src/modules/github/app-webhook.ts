import { SIGNATURE_SHAPE, type GitHubDelivery } from './delivery';
import { z } from '@hono/zod-openapi';
import { verify } from '@octokit/webhooks-methods';
import { and, eq, inArray, ne } from 'drizzle-orm';
import { codehostApp } from '../../codehost/app';
import type { ServiceContext } from '../../context';
import { recordAudit, type AuditActor } from '../../db/audit';
import { notify } from '../../db/notifications';
import { githubInstallations, orgMembers } from '../../db/schema';
import { ApiError } from '../../http/errors';
import { onPullRequestClosed } from './pull-request-closed';
import type { WebhookOutcomeDetail } from './schemas';
import { deps } from './service';

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
