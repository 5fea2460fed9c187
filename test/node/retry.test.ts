import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY, MAX_RETRY_DELAY_MS, nextAttempt, parseRetryAfter, type AttemptOutcome } from '../../src/runs/retry';

const now = new Date('2026-11-21T10:00:00.000Z');
const status = (code: number, retryAfter?: string): AttemptOutcome => ({ kind: 'response', status: code, retryAfter });
const at = (random: number) => ({ now, random: () => random });

describe('delivery retry schedule', () => {
  it.each([500, 502, 503, 599, 408, 429])('retries %i', (code) => {
    expect(nextAttempt(1, status(code), DEFAULT_RETRY, at(0.5)).retry).toBe(true);
  });

  it('retries network errors', () => {
    expect(nextAttempt(1, { kind: 'network-error' }, DEFAULT_RETRY, at(0.5)).retry).toBe(true);
  });

  it.each([400, 401, 403, 404, 409, 410, 422])('fails %i at once', (code) => {
    expect(nextAttempt(1, status(code), DEFAULT_RETRY, at(0.5))).toEqual({ retry: false, reason: 'not-retryable' });
  });

  it('counts every attempt in maxAttempts, the first included', () => {
    expect(nextAttempt(2, status(503), DEFAULT_RETRY, at(0.5)).retry).toBe(true);
    expect(nextAttempt(3, status(503), DEFAULT_RETRY, at(0.5))).toEqual({ retry: false, reason: 'attempts-exhausted' });
    expect(nextAttempt(1, status(503), { ...DEFAULT_RETRY, maxAttempts: 1 }, at(0.5))).toEqual({ retry: false, reason: 'attempts-exhausted' });
  });

  it('backs off exponentially with full jitter', () => {
    const policy = { maxAttempts: 10, backoff: 'exponential' as const, initialDelayMs: 1000 };
    // the upper bound doubles: 1 s, 2 s, 4 s, 8 s
    expect([1, 2, 3, 4].map((n) => nextAttempt(n, status(500), policy, at(0.999999)))).toEqual(
      [999, 1999, 3999, 7999].map((delayMs) => ({ retry: true, delayMs })),
    );
    // full jitter: anywhere from 0
    expect(nextAttempt(4, status(500), policy, at(0))).toEqual({ retry: true, delayMs: 0 });
    expect(nextAttempt(4, status(500), policy, at(0.5))).toEqual({ retry: true, delayMs: 4000 });
  });

  it('keeps a fixed delay when asked', () => {
    const policy = { maxAttempts: 5, backoff: 'fixed' as const, initialDelayMs: 250 };
    expect(nextAttempt(4, status(500), policy, at(0.999999))).toEqual({ retry: true, delayMs: 249 });
  });

  it('waits at least what Retry-After asks, in seconds or as a date, and no longer than the cap', () => {
    expect(nextAttempt(1, status(429, '7'), DEFAULT_RETRY, at(0.1))).toEqual({ retry: true, delayMs: 7000 });
    expect(nextAttempt(1, status(503, 'Sat, 21 Nov 2026 10:00:30 GMT'), DEFAULT_RETRY, at(0.1))).toEqual({ retry: true, delayMs: 30_000 });
    expect(nextAttempt(1, status(429, '999999'), DEFAULT_RETRY, at(0.1))).toEqual({ retry: true, delayMs: MAX_RETRY_DELAY_MS });
    // a shorter Retry-After does not cut the backoff
    expect(nextAttempt(2, status(429, '0'), DEFAULT_RETRY, at(0.999999))).toEqual({ retry: true, delayMs: 1999 });
  });

  it('reads Retry-After leniently', () => {
    expect(parseRetryAfter(null, now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(' 3 ', now)).toBe(3000);
    expect(parseRetryAfter('Sat, 21 Nov 2026 09:59:00 GMT', now)).toBe(0);
  });
});
