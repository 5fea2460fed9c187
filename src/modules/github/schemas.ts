import { z } from '@hono/zod-openapi';
import { INSTALLATION_STATUSES } from '../../db/schema';
import { Timestamp } from '../../http/openapi';

/** The code-hosting app integration's shapes (SPEC "Code-hosting app integration"; choices: docs/codehost.md). */

/** GitHub's installation ids are positive integers (int64 in its API; far below 2^53 in practice). */
const GitHubInstallationId = z.coerce
  .number()
  .int()
  .positive()
  .max(Number.MAX_SAFE_INTEGER)
  .openapi({ description: "GitHub's installation id", example: 12345678 });

const OrgRef = z.string().min(1).max(200).openapi({ description: 'Organization id or slug', example: 'acme' });

export const Installation = z
  .object({
    id: z.uuid().openapi({ description: "The service's id of the installation record" }),
    installationId: z.number().int().openapi({ description: "GitHub's installation id", example: 12345678 }),
    orgId: z.uuid().openapi({ description: 'The organization that claimed it' }),
    accountLogin: z.string().openapi({ description: 'The GitHub account the App is installed on', example: 'acme' }),
    accountType: z.string().openapi({ description: '`Organization` or `User`', example: 'Organization' }),
    status: z.enum(INSTALLATION_STATUSES),
    repositorySelection: z.enum(['all', 'selected']).openapi({ description: "GitHub's repository selection" }),
    grantedRepos: z.array(z.string()).openapi({ description: 'The repositories granted, `owner/name` lowercased', example: ['acme/infra'] }),
    createdAt: Timestamp,
    updatedAt: Timestamp,
    deletedAt: Timestamp.nullable(),
  })
  .openapi('GitHubInstallation');

export const InstallationEnvelope = z.object({ installation: Installation }).openapi('GitHubInstallationResult');

export const InstallUrlRequest = z
  .strictObject({ orgId: OrgRef })
  .openapi('GitHubInstallUrlRequest');

export const InstallUrl = z
  .object({
    url: z.url().openapi({
      description: "GitHub's install page of the App, with a signed `state` (valid 10 minutes) naming the organization and the user",
      example: 'https://github.com/apps/cellplane/installations/new?state=eyJ…',
    }),
  })
  .openapi('GitHubInstallUrl');

export const InstallCallbackQuery = z.object({
  installation_id: GitHubInstallationId,
  state: z.string().min(1).max(4096).openapi({ description: 'The signed state of the install URL' }),
  setup_action: z.enum(['install', 'update', 'request']).optional().openapi({ description: 'As GitHub sends it; not used' }),
});

export const RecoverRequest = z
  .strictObject({
    orgId: OrgRef,
    installationId: z.number().int().positive().max(Number.MAX_SAFE_INTEGER).openapi({ description: "GitHub's installation id", example: 12345678 }),
  })
  .openapi('GitHubInstallationRecoverRequest');

export const InstallationParams = z.object({
  id: z
    .string()
    .regex(/^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[1-9][0-9]{0,15})$/, {
      message: "must be the installation record's id (a UUID) or GitHub's installation id (digits)",
    })
    .openapi({ description: "The installation record's id, or GitHub's installation id", example: '12345678' }),
});

/**
 * GitHub's rules: an owner (user or organization login) is 1–39 letters,
 * digits or single hyphens; a repository name 1–100 letters, digits, `.`,
 * `_`, `-`, never `.` or `..`.
 */
export const RepoLinkParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
  owner: z
    .string()
    .regex(/^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/, { message: 'must be a GitHub login: letters, digits and single hyphens, at most 39' })
    .openapi({ description: 'Repository owner (GitHub login)', example: 'acme' }),
  repo: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,100}$/, { message: 'must be a GitHub repository name: letters, digits, . _ -, at most 100' })
    .refine((name) => name !== '.' && name !== '..', { message: 'cannot be . or ..' })
    .openapi({ description: 'Repository name', example: 'infra' }),
});

export const RepoLink = z
  .object({
    owner: z.string().openapi({ example: 'acme' }),
    name: z.string().openapi({ example: 'infra' }),
    fullName: z.string().openapi({ example: 'acme/infra' }),
    createdAt: Timestamp,
    installationId: z
      .number()
      .int()
      .nullable()
      .openapi({ description: "GitHub's id of the organization's active installation that grants the repository now; null when none does" }),
  })
  .openapi('GitHubRepoLink');

export const RepoLinkDeleted = z.object({ deleted: z.literal(true), name: z.string().openapi({ example: 'acme/infra' }) }).openapi('GitHubRepoLinkDeleted');

/** What the App webhook did with an event (GitHubWebhookOutcome's `outcome`). */
export const WebhookOutcomeDetail = z
  .object({
    kind: z.string().openapi({
      description:
        '`installation-created`, `installation-deleted`, `installation-suspended`, `installation-unsuspended`, `installation-unchanged`, `installation-unknown`, `repositories-updated`, `event-reserved`, `event-ignored`, or a pull-request outcome (`run-succeeded`, `run-failed`, `no-matching-run`, …)',
      example: 'event-ignored',
    }),
  })
  .catchall(z.unknown())
  .openapi('GitHubWebhookOutcomeDetail');

export type WebhookOutcomeDetail = z.infer<typeof WebhookOutcomeDetail>;

export const GitHubWebhookOutcome = z.object({ ok: z.literal(true), outcome: WebhookOutcomeDetail }).openapi('GitHubWebhookOutcome');

export const WebhookHeaders = z.object({
  'x-github-event': z.string().optional().openapi({ description: 'The event name, e.g. `installation`' }),
  'x-github-delivery': z.string().optional().openapi({ description: "GitHub's delivery id (recorded as the audit actor)" }),
  'x-hub-signature-256': z.string().optional().openapi({ description: '`sha256=` HMAC-SHA256 of the body with CODEHOST_APP_WEBHOOK_SECRET' }),
});
