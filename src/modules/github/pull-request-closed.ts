import type { ServiceContext } from '../../context';
import type { WebhookOutcomeDetail } from './schemas';

/**
 * The seam of SPEC's "pull_request closed" row of the App webhook: the
 * route (service.ts receiveAppWebhook) calls this with every verified
 * `pull_request` delivery whose action is `closed`, and answers
 * `{ ok: true, outcome }` with what it returns. An error it throws is a 500
 * (GitHub retries the delivery).
 *
 * To do (the pull-request trigger's work, issue 12 deliverables 5–6): find
 * the active pull-request run of `payload.repository.full_name` and
 * `payload.pull_request.number` (through project_github_repos, or the run's
 * own repo/prNumber) and complete it: merged → succeeded, closed unmerged →
 * failed, through the run engine's one completion path. Until then no run
 * matches.
 */
export async function onPullRequestClosed(
  _ctx: ServiceContext,
  _event: { payload: Record<string, unknown>; deliveryId: string | undefined },
): Promise<WebhookOutcomeDetail> {
  return { kind: 'no-matching-run' };
}
