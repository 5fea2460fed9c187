/**
 * The retry schedule of outbound deliveries (SPEC "Outbound webhook
 * trigger"; DECISIONS §4): `maxAttempts` counts every attempt, the first
 * included; 5xx, 408, 429 and network errors (a timeout included) are
 * retried, any other 4xx fails at once. The delay before attempt n+1 is
 * exponential (initial × 2^(n-1)) or fixed, with full jitter (uniform in
 * [0, delay]), capped, and never shorter than a `Retry-After` the receiver
 * sent.
 */

export interface RetryPolicy {
  maxAttempts: number;
  backoff: 'exponential' | 'fixed';
  initialDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 3, backoff: 'exponential', initialDelayMs: 1000 };

/** No single wait beyond this, whatever the policy or the receiver asks. */
export const MAX_RETRY_DELAY_MS = 15 * 60 * 1000;

export type AttemptOutcome = { kind: 'response'; status: number; retryAfter?: string | null } | { kind: 'network-error' };

export const isRetryable = (outcome: AttemptOutcome): boolean =>
  outcome.kind === 'network-error' || outcome.status >= 500 || outcome.status === 408 || outcome.status === 429;

/** `Retry-After` as milliseconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now: Date): number | undefined {
  if (!value) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now.getTime());
}

/**
 * What to do after attempt number `attempt` (1-based) ended with `outcome`:
 * retry after `delayMs`, or stop. `random` returns [0, 1) and is injected so
 * tests control the jitter.
 */
export function nextAttempt(
  attempt: number,
  outcome: AttemptOutcome,
  policy: RetryPolicy,
  options: { now: Date; random: () => number },
): { retry: true; delayMs: number } | { retry: false; reason: 'not-retryable' | 'attempts-exhausted' } {
  if (!isRetryable(outcome)) return { retry: false, reason: 'not-retryable' };
  const retryAfterMs = outcome.kind === 'response' ? parseRetryAfter(outcome.retryAfter, options.now) : undefined;
  return scheduleRetry(attempt, policy, retryAfterMs, options);
}

/**
 * After a retryable failure of attempt number `attempt`, whatever the trigger
 * kind: the delay before the next attempt, or `attempts-exhausted`.
 * `retryAfterMs` is the least wait the other side asked for (HTTP
 * `Retry-After`, a rate limit's reset), if any.
 */
export function scheduleRetry(
  attempt: number,
  policy: RetryPolicy,
  retryAfterMs: number | undefined,
  options: { random: () => number },
): { retry: true; delayMs: number } | { retry: false; reason: 'attempts-exhausted' } {
  if (attempt >= policy.maxAttempts) return { retry: false, reason: 'attempts-exhausted' };
  const base = policy.backoff === 'fixed' ? policy.initialDelayMs : policy.initialDelayMs * 2 ** (attempt - 1);
  const jittered = Math.floor(options.random() * Math.min(base, MAX_RETRY_DELAY_MS));
  return { retry: true, delayMs: Math.min(MAX_RETRY_DELAY_MS, Math.max(jittered, retryAfterMs ?? 0)) };
}
