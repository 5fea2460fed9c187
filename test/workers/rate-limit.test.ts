import { env, exports } from 'cloudflare:workers';
import { createExecutionContext, runInDurableObject, waitOnExecutionContext } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { createApp } from '../../src/app';
import { generateServiceToken, hashServiceToken } from '../../src/auth/service-token';
import { addressPartition, rateLimitWindow } from '../../src/http/rate-limit';
import { createWorkerPlatform } from '../../src/worker-platform';

/**
 * Rate limits on the Worker host: one RateLimiter Durable Object per key
 * (durable-objects/rate-limiter.ts), so the count is the same for every
 * isolate. The Worker entry runs with the test bindings' high limit; the
 * limited cases build the app the entry builds, on a platform of their own
 * with RATE_LIMIT_PER_MINUTE=3, reaching the same Durable Object namespace.
 * Each case uses addresses and tokens of its own: the objects outlive cases.
 */

const BASE = 'http://cellplane.test';
const LIMIT = 3;
const POLICY = `"default";q=${LIMIT};w=60`;

/** An app as the Worker entry builds it, with its own platform: what another isolate would hold. */
function limitedIsolate() {
  const app = createApp(createWorkerPlatform({ ...env, RATE_LIMIT_PER_MINUTE: String(LIMIT) }));
  return async (path: string, options: { address: string; token?: string }) => {
    const headers: Record<string, string> = { 'cf-connecting-ip': options.address };
    if (options.token) headers.authorization = `Bearer ${options.token}`;
    const ctx = createExecutionContext();
    const response = await app.fetch(new Request(`${BASE}${path}`, { headers }), env, ctx);
    const text = await response.text();
    // what the request left to waitUntil (counting a failed credential, releasing its pool) is done before the next
    await waitOnExecutionContext(ctx);
    return { status: response.status, headers: response.headers, text };
  };
}

type Answer = { status: number; headers: Headers; text: string };

function standing(response: Answer | Response): { r: number; t: number } {
  expect(response.headers.get('ratelimit-policy')).toBe(POLICY);
  const match = /^"default";r=(\d+);t=(\d+)$/.exec(response.headers.get('ratelimit') ?? '');
  expect(match, `RateLimit: ${response.headers.get('ratelimit')}`).not.toBeNull();
  return { r: Number(match![1]), t: Number(match![2]) };
}

function expectRateLimited(response: Answer) {
  expect(response.status).toBe(429);
  expect(JSON.parse(response.text)).toEqual({ error: expect.any(String), code: 'rate_limited' });
  const { r, t } = standing(response);
  expect(r).toBe(0);
  expect(t).toBeGreaterThanOrEqual(1);
  expect(t).toBeLessThanOrEqual(60);
  expect(response.headers.get('retry-after')).toBe(String(t));
}

/**
 * The Worker counts on the wall clock. A case picks keys whose windows have
 * at least half a minute left, so no window ends while it runs.
 */
const farFromWindowEnd = (...keys: string[]) => keys.every((key) => rateLimitWindow(key, Date.now()).end - Date.now() > 30_000);

let addresses = 0;
/** A documentation address (RFC 3849) no other case uses, each its own /64. */
function freshAddress(): string {
  for (;;) {
    const address = `2001:db8:${(++addresses).toString(16)}::1`;
    const partition = addressPartition(address);
    if (farFromWindowEnd(`ip:${partition}`, `fail:${partition}`)) return address;
  }
}

/** A token of valid shape and checksum that no database holds. */
function forgedToken(): string {
  for (;;) {
    const { token } = generateServiceToken();
    if (farFromWindowEnd(`tok:${hashServiceToken(token).slice(0, 32)}`)) return token;
  }
}

describe('rate limits on the Worker host', () => {
  it('the Worker entry answers with the policy of RATE_LIMIT_PER_MINUTE and the standing of the caller', async () => {
    const response = await exports.default.fetch(`${BASE}/healthz`, { headers: { 'cf-connecting-ip': freshAddress() } });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    expect(response.headers.get('ratelimit-policy')).toBe(`"default";q=${env.RATE_LIMIT_PER_MINUTE};w=60`);
    expect(response.headers.get('ratelimit')).toMatch(new RegExp(`^"default";r=${Number(env.RATE_LIMIT_PER_MINUTE) - 1};t=\\d+$`));
  });

  it('counts an address across requests: 429 rate_limited with Retry-After after the limit, another address unaffected', async () => {
    const call = limitedIsolate();
    const address = freshAddress();
    const admitted = [await call('/healthz', { address }), await call('/nowhere', { address }), await call('/openapi.json', { address })];
    expect(admitted.map((response) => response.status)).toEqual([200, 404, 200]);
    expect(admitted.map((response) => standing(response).r)).toEqual([2, 1, 0]);

    const refused = await call('/healthz', { address });
    expectRateLimited(refused);

    const other = await call('/healthz', { address: freshAddress() });
    expect(other.status).toBe(200);
    expect(standing(other).r).toBe(LIMIT - 1);
  });

  it('holds the count across isolates: each platform reaches the same Durable Object', async () => {
    const first = limitedIsolate();
    const second = limitedIsolate();
    const address = freshAddress();
    expect(standing(await first('/nowhere', { address })).r).toBe(2);
    expect(standing(await second('/nowhere', { address })).r).toBe(1);
    expect(standing(await first('/nowhere', { address })).r).toBe(0);
    expectRateLimited(await second('/nowhere', { address }));
    expectRateLimited(await first('/nowhere', { address }));
  });

  it('keeps the count in the object\'s storage, so an object evicted within the window resumes it', async () => {
    const call = limitedIsolate();
    const address = freshAddress();
    await call('/nowhere', { address });
    await call('/nowhere', { address });
    const stub = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`ip:${addressPartition(address)}`));
    const stored = await runInDurableObject(stub, (_instance, state) => state.storage.kv.get<{ count: number; end: number }>('window'));
    expect(stored?.count).toBe(2);
    expect(stored!.end).toBeGreaterThan(Date.now());
    expect(await runInDurableObject(stub, (_instance, state) => state.storage.getAlarm())).toBe(stored!.end);
  });

  it('counts a token by its hash, whatever address it comes from', async () => {
    const call = limitedIsolate();
    // checksum-valid but unknown: 401 from the database, counted against the token's key
    const token = forgedToken();
    let address = '';
    for (let i = 0; i < LIMIT; i++) {
      address = freshAddress();
      const response = await call('/seeded/lifecycle/envs', { address, token });
      expect(response.status).toBe(401);
      expect(standing(response).r).toBe(LIMIT - 1 - i);
    }
    expectRateLimited(await call('/seeded/lifecycle/envs', { address: freshAddress(), token }));
    // another token, from one of those addresses: a budget of its own
    const another = await call('/seeded/lifecycle/envs', { address, token: forgedToken() });
    expect(another.status).toBe(401);
    expect(standing(another).r).toBe(LIMIT - 1);
  });

  it('counts tokens the database turns away against their address: forging new ones does not escape the limit', async () => {
    const call = limitedIsolate();
    const address = freshAddress();
    for (let i = 0; i < LIMIT; i++) {
      const response = await call('/seeded/lifecycle/envs', { address, token: forgedToken() });
      expect(response.status).toBe(401);
      expect(standing(response).r).toBe(LIMIT - 1);
    }
    expectRateLimited(await call('/seeded/lifecycle/envs', { address, token: forgedToken() }));
    // another isolate learns it from the address's object at its own first failure there
    const other = limitedIsolate();
    expect((await other('/seeded/lifecycle/envs', { address, token: forgedToken() })).status).toBe(401);
    expectRateLimited(await other('/seeded/lifecycle/envs', { address, token: forgedToken() }));
    // without credentials the address has its own budget, untouched
    expect(standing(await call('/nowhere', { address })).r).toBe(LIMIT - 1);
  });
});
