import { z } from '@hono/zod-openapi';
import { ApiError } from '../../http/errors';
import { attemptSignal } from '../attempt-signal';
import { interpolate, interpolateText, InterpolationError, referencedSecrets, type InterpolationContext } from '../interpolation';
import { checkOutboundUrl } from '../outbound-guard';
import { buildOutboundRequest, WebhookAuth, type OutboundRequest } from '../outbound-request';
import { DEFAULT_RETRY, isRetryable, parseRetryAfter, type AttemptOutcome } from '../retry';
import { Undeliverable, type Attempt, type Sent, type TriggerKind, type TriggerTime, type Verdict } from '../trigger-kind';
import { HeaderName, REDACTED, redactCredential, SecretReference, TemplateString } from '../trigger-fields';

/**
 * The webhook trigger (SPEC "Outbound webhook trigger"; DECISIONS §4): each
 * attempt is one HTTP request to the interpolated URL, past the outbound
 * guard, with a timeout and no redirects; a 2xx delivers the run; 5xx, 408,
 * 429 and network errors are retried (honouring `Retry-After`); any other
 * answer fails the run. The external workflow completes it through its
 * callback.
 */

export const RetryPolicy = z
  .strictObject({
    maxAttempts: z.number().int().min(1).max(20).default(DEFAULT_RETRY.maxAttempts).openapi({ description: 'Every attempt, the first included' }),
    backoff: z.enum(['exponential', 'fixed']).default(DEFAULT_RETRY.backoff),
    initialDelayMs: z.number().int().min(0).max(3_600_000).default(DEFAULT_RETRY.initialDelayMs),
  })
  .openapi('ActionRetryPolicy');

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
export type WebhookTrigger = z.output<typeof WebhookTrigger>;

/**
 * Every template of a webhook trigger resolved (InterpolationError lists the
 * unknown ones). Values inserted into the URL are percent-encoded.
 */
export function interpolateTrigger(
  trigger: WebhookTrigger,
  context: InterpolationContext,
): { trigger: WebhookTrigger; signingSecret?: string } {
  const { url, signingSecret, ...rest } = trigger;
  try {
    return {
      trigger: { ...interpolate(rest, context), url: interpolateText(url, context, { encode: encodeURIComponent }) },
      signingSecret: signingSecret === undefined ? undefined : interpolateText(signingSecret, context),
    };
  } catch (error) {
    if (!(error instanceof InterpolationError)) throw error;
  }
  // every unknown reference at once, not the first field's: only a trigger that refers to something unknown pays for the second pass
  const unknown = [url, signingSecret ?? '', rest].flatMap((part) => {
    try {
      interpolate(part, context);
      return [];
    } catch (error) {
      if (error instanceof InterpolationError) return error.unknownReferences;
      throw error;
    }
  });
  throw new InterpolationError([...new Set(unknown)]);
}

// --- definition --------------------------------------------------------------

/**
 * A stored URL with `user:password@` shows `[redacted]@` in its place. Such
 * URLs are refused at definition, but rows written before that may hold one
 * (their deliveries are refused by the outbound guard). The text is kept as
 * written, templates included; should the replacement not leave exactly the
 * marker as userinfo (a URL the pattern misreads), the whole URL is redacted.
 */
function redactUserinfo(url: string): string {
  const userinfoOf = (text: string) => {
    try {
      const parsed = new URL(text);
      return parsed.username || parsed.password ? `${parsed.username}:${parsed.password}` : undefined;
    } catch {
      return undefined;
    }
  };
  if (userinfoOf(url) === undefined) return url;
  // the authority ends at the first / ? # or \ (http and https); its last @ ends the userinfo
  const replaced = url.replace(/^(\s*[A-Za-z][A-Za-z0-9+.-]*:[/\\]*)[^/?#\\]*@/, `$1${REDACTED}@`);
  return userinfoOf(replaced) === `${encodeURIComponent(REDACTED)}:` ? replaced : REDACTED;
}

function redact(stored: WebhookTrigger): WebhookTrigger {
  const trigger = { ...stored, url: redactUserinfo(stored.url) };
  if (!trigger.auth) return trigger;
  const auth = trigger.auth;
  switch (auth.type) {
    case 'bearer':
      return { ...trigger, auth: { ...auth, token: redactCredential(auth.token) } };
    case 'basic':
      return { ...trigger, auth: { ...auth, password: redactCredential(auth.password) } };
    case 'header':
      return { ...trigger, auth: { ...auth, value: redactCredential(auth.value) } };
    case 'jwt':
      return { ...trigger, auth: { ...auth, secret: redactCredential(auth.secret) } };
  }
}

// --- trigger time ----------------------------------------------------------------

/**
 * A dry run of the delivery's interpolation (an unknown reference is the
 * caller's 400 now, not a failed run later), and the URL's form and literal
 * addresses; names are resolved and checked again at every delivery.
 */
async function prepare(time: TriggerTime, trigger: WebhookTrigger): Promise<Record<string, never>> {
  const context = await time.templateContext(referencedSecrets(trigger));
  let url: string;
  try {
    url = interpolateTrigger(trigger, context).trigger.url;
  } catch (error) {
    if (!(error instanceof InterpolationError)) throw error;
    throw new ApiError(
      'unknown_reference',
      `the action's trigger refers to what this run does not have: ${error.unknownReferences.join(', ')}`,
      error.unknownReferences.map((reference) => ({
        path: reference,
        message: reference.startsWith('secrets.') ? 'no such secret in this environment' : 'unknown reference',
      })),
    );
  }
  const verdict = await checkOutboundUrl(url, { allowedHosts: time.config.outboundAllowedHosts });
  if (!verdict.ok) throw new ApiError('outbound_url_refused', `the webhook URL is refused: ${verdict.reason}`);
  return {};
}

// --- delivery ------------------------------------------------------------------

interface WebhookSent extends Sent {
  outcome: AttemptOutcome;
  /** What went wrong, when something did. */
  problem: string | null;
  retryAfterMs?: number;
}

function networkErrorText(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) {
    return `no response within ${timeoutMs / 1000} s`;
  }
  const cause = error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
  const detail = cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
  return `network error (${detail})`;
}

/** Why buildOutboundRequest threw, in words that never include the values it was given. */
function unbuildableReason(error: unknown): string {
  const message = error instanceof Error ? error.message : '';
  if (/invalid header (value|name)/i.test(message)) {
    return 'a header value (configured, or from the auth) holds a line break or another character HTTP headers cannot carry';
  }
  return `the trigger's values were refused (${error instanceof Error ? error.name : 'unknown error'})`;
}

/**
 * The run's trigger with every template resolved (secrets decrypted for this
 * run's environment only, the callback token signed for this run), then one
 * request, under the same `webhook-id` (the run's id) on every attempt.
 */
async function send({ trigger: stored, run, engine, signal, templateContext }: Attempt<WebhookTrigger>): Promise<WebhookSent> {
  const context = await templateContext(referencedSecrets(stored));
  let prepared: { trigger: WebhookTrigger; signingSecret?: string };
  try {
    prepared = interpolateTrigger(stored, context);
  } catch (error) {
    // a secret deleted since the trigger was accepted
    if (error instanceof InterpolationError) throw new Undeliverable(error.message);
    throw error;
  }
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const verdict = await checkOutboundUrl(prepared.trigger.url, {
    allowedHosts: engine.config.outboundAllowedHosts,
    resolve: engine.resolveHost,
  });
  if (!verdict.ok && verdict.transient) {
    // DNS may answer later: retried like any network error
    return { outcome: { kind: 'network-error' }, httpStatus: null, problem: `network error (${verdict.reason})`, latencyMs: elapsed() };
  }
  if (!verdict.ok) throw new Undeliverable(`refused to call the webhook URL: ${verdict.reason}`);
  let request: OutboundRequest;
  try {
    request = await buildOutboundRequest(prepared.trigger, { webhookId: run.id, now: engine.clock.now(), signingSecret: prepared.signingSecret, hmacSha256: engine.hmacSha256 });
  } catch (error) {
    // The same inputs fail the same way on every attempt, so the run fails now
    // rather than the job looping until the reaper. The cause's message is not
    // used: the HTTP client quotes the offending header value, often a secret.
    throw new Undeliverable(`the request could not be built: ${unbuildableReason(error)}`);
  }
  const deadline = attemptSignal(engine.attemptTimeoutMs, signal);
  try {
    const response = await engine.fetch(request.url, {
      method: request.method,
      headers: request.headers,
      body: request.body,
      redirect: 'manual',
      signal: deadline.signal,
    });
    // the body is not read: only the status counts, and a receiver may echo what it was sent
    await response.body?.cancel().catch(() => {});
    const status = response.status;
    const retryAfter = response.headers.get('retry-after');
    const outcome: AttemptOutcome = { kind: 'response', status, retryAfter };
    let problem: string | null = null;
    if (status >= 300 && status < 400) problem = `the receiver answered HTTP ${status} (redirects are not followed)`;
    else if (status >= 400) problem = `the receiver answered HTTP ${status}`;
    return { outcome, httpStatus: status, problem, latencyMs: elapsed(), retryAfterMs: parseRetryAfter(retryAfter, engine.clock.now()) };
  } catch (error) {
    // the host is stopping: the engine hands the attempt back unrecorded
    if (signal?.aborted) throw error;
    // the host's connection-time guard (src/node/outbound-fetch.ts) refused the address the name resolved to now
    const cause = error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
    if (cause?.code === 'EADDRNOTPUBLIC') throw new Undeliverable(`refused to call the webhook URL: ${cause.message}`);
    return { outcome: { kind: 'network-error' }, httpStatus: null, problem: networkErrorText(error, engine.attemptTimeoutMs), latencyMs: elapsed() };
  } finally {
    deadline.release();
  }
}

function classify(sent: WebhookSent): Verdict {
  if (sent.problem === null) return { kind: 'delivered' };
  if (isRetryable(sent.outcome)) return { kind: 'retryable', problem: sent.problem, retryAfterMs: sent.retryAfterMs };
  return { kind: 'rejected', problem: sent.problem };
}

export const webhookTriggerKind: TriggerKind<WebhookTrigger, WebhookSent> = {
  type: 'webhook',
  schema: WebhookTrigger,
  redact,
  prepare,
  send,
  classify,
  // the schema fills `retry` in on every trigger the API takes; a stored one without it (or with part
  // of it, written by hand) gets the defaults for what it lacks, not an attempt that throws at each lease
  retryPolicy: (trigger) => ({ ...DEFAULT_RETRY, ...trigger.retry }),
};
