import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { CellConstraint } from '../catalog-items';
import { DisplayName, ResourceName } from '../names';
import { PropertyDefinition, PropertyDefinitions } from '../properties';

/**
 * Action definitions (DECISIONS §4). Strings inside a trigger may carry
 * `{{ ... }}` templates; their references are checked by the run engine when
 * it interpolates, not here, because the context (parameters, secrets, the
 * entity) only exists then.
 */

/** `{{ secrets.<name> }}`, and nothing else. */
export const SECRET_REFERENCE = /^\{\{\s*secrets\.[A-Za-z0-9][A-Za-z0-9._:/-]*\s*\}\}$/;

/** What a response shows in place of a literal credential (docs/decisions.md, Actions). */
export const REDACTED = '[redacted]';

/**
 * A credential: a literal or a template. Sending back the redaction marker a
 * GET showed would store the marker as the credential, so it is refused.
 */
const Credential = z
  .string()
  .min(1)
  .max(8192)
  .refine((value) => value !== REDACTED, {
    message: `"${REDACTED}" is what a response shows for a literal credential: send the credential itself, or a {{ secrets.<name> }} reference`,
  })
  .openapi({ description: 'A literal, or a `{{ secrets.<name> }}` reference (recommended)', example: '{{ secrets.deploy-token }}' });

const SecretReference = z
  .string()
  .regex(SECRET_REFERENCE, { message: 'must be a secret reference: {{ secrets.<name> }}' })
  .openapi({ example: '{{ secrets.webhook-signing }}' });

/** An HTTP header name (RFC 9110 token). */
const HeaderName = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: 'must be an HTTP header name' });

const TemplateString = z.string().max(8192);

/** owner/name, or a template that yields it when the run is triggered. */
const RepoName = z
  .string()
  .min(1)
  .max(200)
  .refine((repo) => /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/.test(repo) || repo.includes('{{'), {
    message: 'must be owner/name',
  })
  .openapi({ example: 'acme/infra' });

export const WebhookAuth = z
  .discriminatedUnion('type', [
    z.strictObject({ type: z.literal('bearer'), token: Credential }),
    z.strictObject({ type: z.literal('basic'), username: TemplateString.min(1), password: Credential }),
    z.strictObject({ type: z.literal('header'), name: HeaderName, value: Credential }),
    z.strictObject({
      type: z.literal('jwt'),
      secret: Credential,
      algorithm: z.literal('HS256').default('HS256'),
      claims: z.record(z.string(), z.unknown()).optional(),
      expiresInSeconds: z.number().int().positive().max(86_400).default(300),
    }),
  ])
  .openapi('ActionWebhookAuth', {
    description: 'bearer, basic, header, or jwt (an HS256 JWT sent as `Authorization: Bearer`)',
  });

export const RetryPolicy = z
  .strictObject({
    maxAttempts: z.number().int().min(1).max(20).default(3).openapi({ description: 'Every attempt, the first included' }),
    backoff: z.enum(['exponential', 'fixed']).default('exponential'),
    initialDelayMs: z.number().int().min(0).max(3_600_000).default(1000),
  })
  .openapi('ActionRetryPolicy');

const DEFAULT_RETRY = { maxAttempts: 3, backoff: 'exponential', initialDelayMs: 1000 } as const;

/**
 * The webhook URL, as written (templates unresolved): an absolute http(s) URL
 * whose host is fixed. Templates may sit in the path and query only — a value
 * interpolated into the host could name any address — and credentials belong
 * in `auth`, where responses redact them, never in `user:password@`
 * (docs/decisions.md, Outbound URLs).
 */
const WebhookUrl = z
  .url({ protocol: /^https?$/, message: 'must be an absolute http(s) URL' })
  .max(4096)
  .superRefine((value, ctx) => {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      return; // the URL check above has said so
    }
    if (url.username || url.password) {
      ctx.addIssue({
        code: 'custom',
        message:
          "may not carry credentials (user:password@host): send them in the trigger's auth (basic, bearer, header or jwt), preferably as {{ secrets.<name> }} references",
      });
    }
    if (/[{}]/.test(url.host)) {
      ctx.addIssue({
        code: 'custom',
        message: 'may not have a template in its host: the host is fixed when the action is defined; templates may sit in the path and query',
      });
    }
  })
  .openapi({ example: 'https://ci.example.com/hooks/deploy?entity={{ entity.name }}' });

export const WebhookTrigger = z
  .strictObject({
    type: z.literal('webhook'),
    url: WebhookUrl,
    method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']).default('POST'),
    auth: WebhookAuth.optional(),
    headers: z.record(HeaderName, TemplateString).optional(),
    payload: z.unknown().optional().openapi({ description: 'JSON body; its strings are interpolated' }),
    retry: RetryPolicy.default(DEFAULT_RETRY),
    signingSecret: SecretReference.optional().openapi({ description: 'Signs each request (Standard Webhooks)' }),
  })
  .openapi('ActionWebhookTrigger');

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

export const ActionTrigger = z.discriminatedUnion('type', [WebhookTrigger, PullRequestTrigger]).openapi('ActionTrigger');
export type ActionTrigger = z.infer<typeof ActionTrigger>;

/** Create and update body. onSuccess/onFailure are checked against the type's states by the service. */
export const ActionRequest = z
  .strictObject({
    kind: z.literal('Action'),
    name: ResourceName.openapi({ example: 'restart' }),
    displayName: DisplayName.optional().openapi({ example: 'Restart' }),
    description: z.string().max(2000).optional(),
    entityType: ResourceName.openapi({ description: 'An entity type of the project', example: 'vm' }),
    conditions: z.array(CellConstraint).max(100).optional().openapi({ description: 'All must hold for the action to be offered' }),
    parameters: PropertyDefinitions.optional(),
    trigger: ActionTrigger,
    onSuccess: z.string().min(1).optional().openapi({ description: 'A state of the entity type' }),
    onFailure: z.string().min(1).optional().openapi({ description: 'A state of the entity type' }),
    timeoutMinutes: z.number().int().min(1).max(10_080).optional().openapi({ description: 'Defaults to 60' }),
  })
  .openapi('ActionRequest');
export type ActionRequest = z.infer<typeof ActionRequest>;

/** The stored definition; unset optional scalars are null, literal credentials redacted. */
export const Action = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    description: z.string().nullable(),
    entityType: z.string(),
    conditions: z.array(CellConstraint),
    parameters: z.array(PropertyDefinition),
    trigger: ActionTrigger,
    onSuccess: z.string().nullable(),
    onFailure: z.string().nullable(),
    timeoutMinutes: z.number().int(),
    orgId: z.uuid(),
    projectId: z.uuid(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('Action');
export type Action = z.infer<typeof Action>;

export const ActionDeleted = z.object({ deleted: z.literal(true), name: z.string() }).openapi('ActionDeleted');

/** An action offered for one entity (`GET ENV/entities/{name}/actions`). */
export const AvailableAction = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    description: z.string().nullable(),
    parameters: z.array(PropertyDefinition),
    triggerType: z.enum(['webhook', 'pull-request']),
  })
  .openapi('AvailableAction');
export type AvailableAction = z.infer<typeof AvailableAction>;

export const ProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
});

export const ActionParams = ProjectParams.extend({
  name: z.string().min(1).openapi({ description: 'Action name (URL-encode / and :)', example: 'restart' }),
});
