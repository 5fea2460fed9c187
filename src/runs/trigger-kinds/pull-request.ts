import { z } from '@hono/zod-openapi';
import type { UnavailableTriggerKind } from '../trigger-kind';
import { Credential, redactCredential, SecretReference, TemplateString } from '../trigger-fields';

/**
 * The pull-request trigger (DECISIONS §4): the service opens a pull request
 * through the code-hosting app and observes its merge or close.
 *
 * THE SLOT FOR ISSUE 12: actions may already define it; it is registered as
 * unavailable, so triggering one answers 501 not_implemented through the
 * registry. Landing it means replacing `unavailable` below with `prepare`,
 * `send`, `classify`, `retryPolicy` (and `complete` for a post-merge
 * dispatch): the TriggerKind contract of src/runs/trigger-kind.ts.
 */

/** owner/name, or a template that yields it when the run is triggered. */
const RepoName = z
  .string()
  .min(1)
  .max(200)
  .refine((repo) => /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/.test(repo) || repo.includes('{{'), {
    message: 'must be owner/name',
  })
  .openapi({ example: 'acme/infra' });

export const PullRequestTrigger = z
  .strictObject({
    type: z.literal('pull-request'),
    repo: RepoName,
    base: TemplateString.min(1).optional().openapi({ description: "Defaults to the repository's default branch" }),
    branch: TemplateString.min(1).optional(),
    title: TemplateString.min(1),
    body: TemplateString.optional(),
    files: z
      .array(z.strictObject({ path: TemplateString.min(1), content: z.string().max(1_000_000) }))
      .min(1)
      .max(100),
    webhookSecret: SecretReference.optional(),
    auth: z.strictObject({ token: Credential }).optional(),
    postMergeDispatch: z
      .strictObject({ eventType: TemplateString.min(1), repo: RepoName.optional(), payload: z.unknown().optional() })
      .optional(),
  })
  .openapi('ActionPullRequestTrigger');
export type PullRequestTrigger = z.output<typeof PullRequestTrigger>;

export const pullRequestTriggerKind: UnavailableTriggerKind<PullRequestTrigger> = {
  type: 'pull-request',
  schema: PullRequestTrigger,
  redact: (trigger) => (trigger.auth ? { ...trigger, auth: { token: redactCredential(trigger.auth.token) } } : trigger),
  unavailable: 'pull-request triggers are not available on this server yet; only webhook triggers run',
};
