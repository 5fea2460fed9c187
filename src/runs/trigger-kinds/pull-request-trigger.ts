import { z } from '@hono/zod-openapi';
import { type ErrorDetail } from '../../http/errors';
import { interpolate, interpolateText, InterpolationError, type InterpolationContext } from '../interpolation';
import type { RetryPolicy } from '../retry';
import { Undeliverable } from '../trigger-kind';
import { Credential, SecretReference, TemplateString } from '../trigger-fields';

/**
 * The pull-request trigger's definition (DECISIONS §4) and the values a run
 * resolves from it: repository, branch, files, title and body, the
 * post-merge dispatch. The kind itself (prepare, send, classify) is
 * ./pull-request.ts.
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

/**
 * Five attempts, the first included, 2 s apart and doubling (with jitter),
 * never sooner than GitHub's `retry-after` or rate-limit reset: opening a
 * pull request is a handful of calls, and a short GitHub outage should not
 * fail the run. The trigger has no `retry` of its own (DECISIONS §4).
 */
export const PULL_REQUEST_RETRY: RetryPolicy = { maxAttempts: 5, backoff: 'exponential', initialDelayMs: 2000 };

/** GitHub's limit on `event_type` and on the top-level properties of `client_payload`. */
const EVENT_TYPE_MAX = 100;
const CLIENT_PAYLOAD_MAX_PROPERTIES = 10;

/** The branch a run's pull request comes from when the trigger names none: one per run, so every attempt finds its own. */
export const defaultBranch = (runId: string) => `cellplane/run-${runId}`;

// --- the trigger's values ---------------------------------------------------------

/** A value of the trigger that cannot be sent (a bad repository, branch or path), found when it is interpolated. */
export class TriggerValueError extends Error {
  constructor(readonly details: ErrorDetail[]) {
    super(details.map((detail) => `${detail.path} ${detail.message}`).join('; '));
    this.name = 'TriggerValueError';
  }
}

export interface RepoRef {
  owner: string;
  name: string;
  /** `owner/name`, lowercased: how the run keeps it (GitHub compares names case-insensitively). */
  fullName: string;
}

const LOGIN = /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/;
const REPOSITORY = /^[A-Za-z0-9._-]{1,100}$/;

/** `owner/name` by GitHub's rules, or the reason it is not. */
function parseRepo(text: string): RepoRef | string {
  const [owner, name, ...rest] = text.trim().split('/');
  if (owner === undefined || name === undefined || rest.length > 0) return `must be owner/name (got "${text.slice(0, 200)}")`;
  if (!LOGIN.test(owner)) return `owner "${owner.slice(0, 100)}" is not a GitHub login (letters, digits and single hyphens, at most 39)`;
  if (!REPOSITORY.test(name) || name === '.' || name === '..') return `name "${name.slice(0, 100)}" is not a GitHub repository name (letters, digits, . _ -, at most 100)`;
  return { owner, name, fullName: `${owner}/${name}`.toLowerCase() };
}

/** git check-ref-format's rules for a branch name, or the reason it breaks one. */
function branchProblem(name: string): string | undefined {
  if (name.length === 0 || name.length > 255) return 'must be 1 to 255 characters';
  if (/[\x00-\x20\x7f~^:?*[\\]/.test(name)) return 'may not contain spaces, control characters or any of ~ ^ : ? * [ \\';
  if (name.includes('..') || name.includes('@{') || name === '@') return 'may not contain "..", "@{" or be "@"';
  if (name.startsWith('/') || name.endsWith('/') || name.includes('//')) return 'may not begin or end with "/" or contain "//"';
  if (name.endsWith('.')) return 'may not end with "."';
  if (name.split('/').some((part) => part.startsWith('.') || part.endsWith('.lock'))) return 'no part may begin with "." or end with ".lock"';
  return undefined;
}

/** A path in the repository, relative, without `.`/`..` segments or control characters, or the reason it is not one. */
function pathProblem(path: string): string | undefined {
  if (path.length === 0 || path.length > 1024) return 'must be 1 to 1024 characters';
  if (/[\x00-\x1f\x7f]/.test(path)) return 'may not contain control characters';
  if (path.startsWith('/') || path.endsWith('/') || path.includes('//')) return 'must be relative (no leading "/"), without empty segments or a trailing "/"';
  if (path.split('/').some((part) => part === '.' || part === '..' || part.toLowerCase() === '.git')) return 'may not have "." , ".." or ".git" segments';
  return undefined;
}

/** The trigger's values for one run, every template resolved. */
export interface PullRequestValues {
  repo: RepoRef;
  base: string | undefined;
  branch: string;
  title: string;
  body: string | undefined;
  files: { path: string; content: string }[];
}

/**
 * Resolves every template of what the delivery sends (InterpolationError
 * lists all the unknown references at once) and checks the results
 * (TriggerValueError lists every bad value). `auth` and `postMergeDispatch`
 * are resolved where they are used.
 */
export function resolveValues(trigger: PullRequestTrigger, context: InterpolationContext, runId: string): PullRequestValues {
  const unknown: string[] = [];
  const text = (template: string): string => {
    try {
      return interpolateText(template, context);
    } catch (error) {
      if (!(error instanceof InterpolationError)) throw error;
      unknown.push(...error.unknownReferences);
      return '';
    }
  };
  const repoText = text(trigger.repo);
  const base = trigger.base === undefined ? undefined : text(trigger.base);
  const branch = trigger.branch === undefined ? defaultBranch(runId) : text(trigger.branch);
  const title = text(trigger.title);
  const body = trigger.body === undefined ? undefined : text(trigger.body);
  const files = trigger.files.map((file) => ({ path: text(file.path), content: text(file.content) }));
  if (unknown.length > 0) throw new InterpolationError([...new Set(unknown)]);

  const problems: ErrorDetail[] = [];
  const repo = parseRepo(repoText);
  if (typeof repo === 'string') problems.push({ path: 'trigger.repo', message: repo });
  if (base !== undefined) {
    const problem = branchProblem(base);
    if (problem) problems.push({ path: 'trigger.base', message: `"${base.slice(0, 100)}" ${problem}` });
  }
  const branchIssue = branchProblem(branch);
  if (branchIssue) problems.push({ path: 'trigger.branch', message: `"${branch.slice(0, 100)}" ${branchIssue}` });
  if (base !== undefined && base === branch) problems.push({ path: 'trigger.branch', message: 'must differ from the base branch' });
  if (title.trim().length === 0) problems.push({ path: 'trigger.title', message: 'is empty once interpolated' });
  const seen = new Set<string>();
  files.forEach((file, index) => {
    const problem = pathProblem(file.path);
    if (problem) problems.push({ path: `trigger.files.${index}.path`, message: `"${file.path.slice(0, 100)}" ${problem}` });
    else if (seen.has(file.path)) problems.push({ path: `trigger.files.${index}.path`, message: `"${file.path.slice(0, 100)}" is listed twice` });
    seen.add(file.path);
  });
  if (problems.length > 0) throw new TriggerValueError(problems);
  return { repo: repo as RepoRef, base, branch, title, body, files };
}

/** The post-merge repository_dispatch of a run, resolved (src/runs/pull-request-events.ts sends it). */
export interface DispatchValues {
  repo: RepoRef;
  eventType: string;
  clientPayload: Record<string, unknown>;
}

/**
 * `postMergeDispatch` for one run: the event type, the repository (the
 * trigger's own by default) and the payload, interpolated. Without a
 * `payload`, the pipeline gets the run's id and its callback:
 * `{ runId, callbackUrl, callbackToken }`.
 */
export function resolveDispatch(trigger: PullRequestTrigger, context: InterpolationContext): DispatchValues {
  const dispatch = trigger.postMergeDispatch!;
  const unknown: string[] = [];
  const attempt = <T>(resolve: () => T, fallback: T): T => {
    try {
      return resolve();
    } catch (error) {
      if (!(error instanceof InterpolationError)) throw error;
      unknown.push(...error.unknownReferences);
      return fallback;
    }
  };
  const eventType = attempt(() => interpolateText(dispatch.eventType, context), '');
  const repoText = attempt(() => interpolateText(dispatch.repo ?? trigger.repo, context), '');
  const payload =
    dispatch.payload === undefined
      ? { runId: context.run.id, callbackUrl: context.run.callbackUrl, callbackToken: context.run.callbackToken }
      : attempt(() => interpolate(dispatch.payload, context), {});
  if (unknown.length > 0) throw new InterpolationError([...new Set(unknown)]);

  const problems: ErrorDetail[] = [];
  if (eventType.trim().length === 0 || eventType.length > EVENT_TYPE_MAX) {
    problems.push({ path: 'trigger.postMergeDispatch.eventType', message: `must be 1 to ${EVENT_TYPE_MAX} characters once interpolated` });
  }
  const repo = parseRepo(repoText);
  if (typeof repo === 'string') problems.push({ path: 'trigger.postMergeDispatch.repo', message: repo });
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
    problems.push({ path: 'trigger.postMergeDispatch.payload', message: "must be a JSON object (GitHub's client_payload)" });
  } else if (Object.keys(payload).length > CLIENT_PAYLOAD_MAX_PROPERTIES) {
    problems.push({ path: 'trigger.postMergeDispatch.payload', message: `may have at most ${CLIENT_PAYLOAD_MAX_PROPERTIES} top-level properties (GitHub's limit)` });
  }
  if (problems.length > 0) throw new TriggerValueError(problems);
  return { repo: repo as RepoRef, eventType, clientPayload: payload as Record<string, unknown> };
}

/** Why a template or value cannot be sent (a secret deleted since the trigger, a parameter that makes a bad name); undefined for any other error. */
export const unsendableReason = (error: unknown): string | undefined =>
  error instanceof InterpolationError || error instanceof TriggerValueError ? error.message : undefined;

/** Undeliverable for what unsendableReason names; any other error as it is. */
export function asUndeliverable(error: unknown, prefix = ''): never {
  const reason = unsendableReason(error);
  if (reason !== undefined) throw new Undeliverable(`${prefix}${reason}`);
  throw error;
}

/** The part of the trigger a delivery interpolates (`auth` only when no installation applies; the post-merge dispatch after the merge; the webhook secret by the webhook). */
export const deliveryPart = ({ postMergeDispatch: _dispatch, auth: _auth, webhookSecret: _secret, ...rest }: PullRequestTrigger) => rest;
