import { SIGNATURE_SHAPE, type GitHubDelivery } from './delivery';
import { z } from '@hono/zod-openapi';
import { verify } from '@octokit/webhooks-methods';
import { and, eq, inArray, isNull, or } from 'drizzle-orm';
import type { ServiceContext } from '../../context';
import { orgs, projectGithubRepos, projects } from '../../db/schema';
import { ApiError } from '../../http/errors';
import { isUuid } from '../names';
import {
  applyPullRequestClosed,
  runsOfPullRequest,
  type PullRequestClosed,
  type PullRequestEventDeps,
  type PullRequestRunOutcome,
} from '../../runs/pull-request-events';
import type { PullRequestTrigger } from '../../runs/trigger-kinds/pull-request-trigger';
import type { RunRow } from '../../runs/run-context';
import { runPorts } from '../action-runs/run-ports';
import { resolveSecrets } from '../secrets/service';
import type { WebhookOutcomeDetail } from './schemas';

/**
 * `pull_request` closed, from GitHub, to the run whose pull request it is
 * (SPEC "ActionRun status", "Inbound webhooks", "Inbound code-hosting
 * webhook events"), through either endpoint:
 *
 * - the App webhook (`POST /webhooks/github`, verified by service.ts
 *   receiveAppWebhook with CODEHOST_APP_WEBHOOK_SECRET): onPullRequestClosed;
 * - the project webhook (`POST /{o}/{p}/webhooks/github`, verified here with
 *   the secret the run's action names): receiveProjectWebhook.
 *
 * A run is found by its pull request: the repository and the number it
 * recorded when the pull request was opened. What the event does to it
 * (merged → succeeded, closed → failed, a post-merge dispatch) is
 * src/runs/pull-request-events.ts. Choices: docs/pull-request-runs.md.
 */

const FullName = z.string().regex(/^[A-Za-z0-9._-]{1,100}\/[A-Za-z0-9._-]{1,100}$/, { message: 'must be owner/name' });

const ClosedPullRequest = z.object({
  repository: z.object({ full_name: FullName }),
  pull_request: z.object({
    number: z.number().int().positive().max(2_147_483_647),
    merged: z.boolean(),
    html_url: z.string().max(2048).optional(),
    merge_commit_sha: z.string().max(100).nullable().optional(),
  }),
});

function closedEvent(payload: unknown): PullRequestClosed {
  const result = ClosedPullRequest.safeParse(payload);
  if (!result.success) {
    const details = result.error.issues.slice(0, 20).map((issue) => ({ path: issue.path.map(String).join('.') || '(root)', message: issue.message }));
    throw new ApiError('validation_failed', `invalid pull_request payload: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details);
  }
  const { repository, pull_request: pull } = result.data;
  return { repo: repository.full_name, number: pull.number, merged: pull.merged, url: pull.html_url, mergeCommitSha: pull.merge_commit_sha ?? null };
}

const eventDeps = (ctx: ServiceContext): PullRequestEventDeps => ({
  db: ctx.db,
  config: ctx.config,
  logger: ctx.logger,
  clock: ctx.clock,
  changes: ctx.changedEnvironments,
  ports: runPorts,
  signHs256: ctx.signHs256,
});

// --- the App webhook ------------------------------------------------------------------

/** How a run was found: its project links the repository (project_github_repos), or only the run's own repo and number say so. */
type MatchedBy = 'project-link' | 'run-metadata';

async function matchedBy(ctx: ServiceContext, run: RunRow): Promise<MatchedBy> {
  const [owner, name] = (run.repo ?? '').split('/');
  const [link] = await ctx.db
    .select({ owner: projectGithubRepos.owner })
    .from(projectGithubRepos)
    .where(and(eq(projectGithubRepos.projectId, run.projectId), eq(projectGithubRepos.owner, owner ?? ''), eq(projectGithubRepos.name, name ?? '')))
    .limit(1);
  return link ? 'project-link' : 'run-metadata';
}

/** Whether each run's organization is deleted or suspended (those of neither are left out). */
async function orgStanding(ctx: ServiceContext, runs: RunRow[]): Promise<Map<string, 'deleted' | 'suspended'>> {
  const ids = [...new Set(runs.map((run) => run.orgId))];
  if (ids.length === 0) return new Map();
  const rows = await ctx.db.select({ id: orgs.id, deletedAt: orgs.deletedAt, suspendedAt: orgs.suspendedAt }).from(orgs).where(inArray(orgs.id, ids));
  const standing = new Map<string, 'deleted' | 'suspended'>();
  for (const row of rows) {
    if (row.deletedAt) standing.set(row.id, 'deleted');
    else if (row.suspendedAt) standing.set(row.id, 'suspended');
  }
  return standing;
}

/**
 * The seam of SPEC's "pull_request closed" row of the App webhook: the
 * route calls this with every verified `pull_request` delivery whose action
 * is `closed`, and answers `{ ok: true, outcome }` with what it returns. An
 * error it throws is a 500 (GitHub shows the delivery failed).
 *
 * Every active pull-request run of `repository.full_name` and
 * `pull_request.number` is moved (normally one): whether its project links
 * the repository (project_github_repos) or only the run's own repo and
 * number name it (runs whose repository no project links, e.g. opened with
 * a static token). The event is GitHub's, verified with the App's secret,
 * so it says what happened to that pull request whichever credential
 * opened it. Runs of a deleted organization are not matched; those of a
 * suspended one are not moved (`org-suspended`), and when no other run
 * matches the delivery is refused with 403 org_suspended, as the run
 * callback is, so that GitHub's redelivery can apply it later.
 */
export async function onPullRequestClosed(
  ctx: ServiceContext,
  event: { payload: Record<string, unknown>; deliveryId: string | undefined },
): Promise<WebhookOutcomeDetail> {
  const closed = closedEvent(event.payload);
  const found = await runsOfPullRequest(ctx.db, closed);
  const standing = await orgStanding(ctx, found);
  const runs = found.filter((run) => standing.get(run.orgId) !== 'deleted');
  if (runs.length === 0) return { kind: 'no-matching-run' };
  // as the run callback: a suspended organization's runs are not moved; GitHub can redeliver once it is unsuspended
  if (runs.every((run) => standing.get(run.orgId) === 'suspended')) {
    throw new ApiError('org_suspended', 'the organization of the run this pull request belongs to is suspended');
  }
  const outcomes: (WebhookOutcomeDetail & { runId: string; matchedBy: MatchedBy })[] = [];
  for (const run of runs) {
    const how = await matchedBy(ctx, run);
    if (standing.get(run.orgId) === 'suspended') outcomes.push({ runId: run.id, kind: 'org-suspended', matchedBy: how });
    else outcomes.push({ ...(await applyPullRequestClosed(eventDeps(ctx), run, closed)), matchedBy: how });
  }
  ctx.logger.info('pull request closed', {
    requestId: ctx.requestId,
    deliveryId: event.deliveryId ?? null,
    repo: closed.repo,
    prNumber: closed.number,
    merged: closed.merged,
    outcomes: outcomes.map((outcome) => `${outcome.runId}:${outcome.kind}`),
  });
  return outcomes.length === 1 ? outcomes[0]! : { kind: 'runs-matched', runs: outcomes };
}

// --- the project webhook --------------------------------------------------------------

/** A delivery to a project's webhook: GitHub's, plus the organization and project (slug or id) of the path. */
export interface ProjectWebhookDelivery extends GitHubDelivery {
  org: string;
  project: string;
}

/** SPEC: `action` (string) and `repository` (object) are required, `pull_request` (object) is optional. */
const ProjectWebhookPayload = z.object({
  action: z.string().min(1).max(100),
  repository: z.object({ full_name: FullName }).passthrough(),
  pull_request: z.object({}).passthrough().optional(),
});

function parsePayload(delivery: ProjectWebhookDelivery): unknown {
  const text = (delivery.contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded')
    ? new URLSearchParams(delivery.body).get('payload') ?? ''
    : delivery.body;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'the delivery is not valid JSON (register the webhook with content type application/json)');
  }
}

/** The project of the path, unless its organization is deleted: by slug or id. */
async function projectOf(ctx: ServiceContext, org: string, project: string) {
  const [found] = await ctx.db
    .select({ id: projects.id, orgId: orgs.id, orgSlug: orgs.slug, suspendedAt: orgs.suspendedAt })
    .from(projects)
    .innerJoin(orgs, eq(orgs.id, projects.orgId))
    .where(
      and(
        isNull(orgs.deletedAt),
        isUuid(org) ? or(eq(orgs.id, org), eq(orgs.slug, org)) : eq(orgs.slug, org),
        isUuid(project) ? or(eq(projects.id, project), eq(projects.slug, project)) : eq(projects.slug, project),
      ),
    )
    .limit(1);
  return found;
}

/** The name of `{{ secrets.<name> }}`. */
const secretName = (reference: string) => /^\{\{\s*secrets\.(.+?)\s*\}\}$/.exec(reference)?.[1];

/**
 * POST /{o}/{p}/webhooks/github (SPEC "Inbound webhooks", its five rules):
 *
 *   1. only `closed` is significant; any other action is acknowledged;
 *   2. the active run of this project whose repository is
 *      `repository.full_name` (and whose pull request is
 *      `pull_request.number`) is looked for; none: acknowledged silently;
 *   3. its secret is the one its action's `webhookSecret` names, in the
 *      run's own environment (two environments may hold two values under one
 *      name);
 *   4. a secret exists and the signature does not verify: 401; no secret:
 *      acknowledged, and nothing happens;
 *   5. a verified merge ends the run succeeded, a close without merge failed.
 *
 * 400 for a body that is not JSON, or not the shape SPEC gives it. Answers
 * nothing but `{ ok: true }` otherwise; what was done is logged.
 */
export async function receiveProjectWebhook(ctx: ServiceContext, delivery: ProjectWebhookDelivery): Promise<void> {
  const event = delivery.event?.toLowerCase();
  const log = (outcome: string, fields: Record<string, unknown> = {}) =>
    ctx.logger.info('GitHub project webhook', { requestId: ctx.requestId, deliveryId: delivery.deliveryId ?? null, event: event ?? null, outcome, ...fields });
  // GitHub pings a new webhook, and may send other events it was subscribed to: nothing for a run
  if (event !== undefined && event !== 'pull_request') return log('event-ignored');
  const payload = parsePayload(delivery);
  const shape = ProjectWebhookPayload.safeParse(payload);
  if (!shape.success) {
    const details = shape.error.issues.slice(0, 20).map((issue) => ({ path: issue.path.map(String).join('.') || '(root)', message: issue.message }));
    throw new ApiError('validation_failed', `invalid pull_request payload: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details);
  }
  // rule 1
  if (shape.data.action !== 'closed') return log('action-ignored', { action: shape.data.action });
  const closed = closedEvent(payload);
  // rule 2
  const project = await projectOf(ctx, delivery.org, delivery.project);
  const runs = project ? await runsOfPullRequest(ctx.db, closed, { projectId: project.id }) : [];
  if (!project || runs.length === 0) return log('no-matching-run', { repo: closed.repo, prNumber: closed.number });
  // rule 3: each run's secret, from its own environment
  const secured: { run: RunRow; secret: string }[] = [];
  for (const run of runs) {
    const name = secretName((run.trigger as PullRequestTrigger).webhookSecret ?? '');
    if (name === undefined) continue;
    const values = await resolveSecrets(ctx.db, ctx.config.encryptionKey, { orgId: run.orgId, projectId: run.projectId, envId: run.envId }, [name]);
    const secret = values.get(name);
    if (secret !== undefined) secured.push({ run, secret });
  }
  // rule 4
  if (secured.length === 0) return log('no-webhook-secret', { repo: closed.repo, prNumber: closed.number, runIds: runs.map((run) => run.id) });
  const signature = delivery.signature ?? '';
  const verified: RunRow[] = [];
  if (SIGNATURE_SHAPE.test(signature)) {
    for (const { run, secret } of secured) {
      if (await verify(secret, delivery.body, signature).catch(() => false)) verified.push(run);
    }
  }
  if (verified.length === 0) {
    ctx.logger.warn('GitHub project webhook refused: invalid signature', {
      requestId: ctx.requestId,
      projectId: project.id,
      repo: closed.repo,
      prNumber: closed.number,
    });
    throw new ApiError('invalid_signature', "the X-Hub-Signature-256 of this delivery does not match the run's webhook secret (the action's webhookSecret)");
  }
  // as the run callback: a suspended organization's runs are not moved; GitHub can redeliver once it is unsuspended
  if (project.suspendedAt) throw new ApiError('org_suspended', `organization "${project.orgSlug}" is suspended`);
  // rule 5
  const outcomes: PullRequestRunOutcome[] = [];
  for (const run of verified) outcomes.push(await applyPullRequestClosed(eventDeps(ctx), run, closed));
  log('runs-matched', { repo: closed.repo, prNumber: closed.number, merged: closed.merged, outcomes: outcomes.map((outcome) => `${outcome.runId}:${outcome.kind}`) });
}
