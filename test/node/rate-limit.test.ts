import { request as httpRequest } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { signCallbackToken } from '../../src/auth/callback-token';
import { generateServiceToken, hashServiceToken } from '../../src/auth/service-token';
import { rateLimitCounters } from '../../src/db/schema';
import { addressPartition } from '../../src/http/rate-limit';
import { createNodePlatform } from '../../src/node/platform';
import { NodeRateLimits } from '../../src/node/rate-limit-store';
import { createApp } from '../../src/app';
import type { RateLimits } from '../../src/platform';
import { createTestApi, manualClock, TEST_SECRETS, type ApiResponse, type TestApi } from '../support/node-app';
import { createTestDatabase, usingPostgres } from '../support/node-database';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';

/**
 * Rate limits on the Node host (docs/decisions.md, Rate limits): a fixed
 * window of 60 s per key, the IETF headers on every response, 429 with
 * Retry-After, keys per token, per run (the callback) and per client address.
 */

const LIMIT = 5;
const POLICY = `"default";q=${LIMIT};w=60`;

/** `RateLimit: "default";r=<remaining>;t=<seconds>` taken apart. */
function standing(response: ApiResponse): { r: number; t: number } {
  expect(response.headers.get('ratelimit-policy')).toBe(POLICY);
  const match = /^"default";r=(\d+);t=(\d+)$/.exec(response.headers.get('ratelimit') ?? '');
  expect(match, `RateLimit header: ${response.headers.get('ratelimit')}`).not.toBeNull();
  return { r: Number(match![1]), t: Number(match![2]) };
}

function expectRateLimited(response: ApiResponse): number {
  expectError(response, 429, 'rate_limited');
  const { r, t } = standing(response);
  expect(r).toBe(0);
  expect(response.headers.get('retry-after')).toBe(String(t));
  expect(t).toBeGreaterThanOrEqual(1);
  expect(t).toBeLessThanOrEqual(60);
  return t;
}

const apis: TestApi[] = [];
afterEach(async () => {
  // the instance owning the database last: the others share it
  for (const api of apis.splice(0).reverse()) await api.close();
});

/** An instance with the small limit, on a clock only the test moves: no window ends while a case runs. */
async function limitedApi(options: Parameters<typeof createTestApi>[0] = {}): Promise<TestApi> {
  const api = await createTestApi({
    clock: manualClock(),
    ...options,
    env: { RATE_LIMIT_PER_MINUTE: String(LIMIT), ...options.env },
  });
  apis.push(api);
  return api;
}

/**
 * A tenant and an owner token, made in bootstrap mode with a high limit on
 * another instance of the same database, so the limited instance starts with
 * every budget whole.
 */
async function tenantWithToken(): Promise<{ database: TestApi['testDatabase']; tenant: Tenant; token: string }> {
  const setup = await createTestApi({ env: { RATE_LIMIT_PER_MINUTE: '1000' } });
  apis.push(setup);
  const tenant = await createTenant(setup);
  const token = await mintToken(setup, tenant, { role: 'owner' });
  return { database: setup.testDatabase, tenant, token };
}

describe('rate limits on the Node host', () => {
  it('admits RATE_LIMIT_PER_MINUTE requests of a token, then answers 429 rate_limited with Retry-After, without a database lookup', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const api = await limitedApi({ database });
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;

    const remaining: number[] = [];
    for (let i = 0; i < LIMIT; i++) {
      const response = await api.call('GET', envs, { token });
      expect(response.status).toBe(200);
      remaining.push(standing(response).r);
    }
    expect(remaining).toEqual([4, 3, 2, 1, 0]);

    const leases = api.databaseLeases();
    const refused = await api.call('GET', envs, { token });
    expectRateLimited(refused);
    expect(api.databaseLeases()).toBe(leases);
    // refusals are not counted: still refused, still nothing leased
    expectRateLimited(await api.call('POST', envs, { token, body: { name: 'staging' } }));
    expect(api.databaseLeases()).toBe(leases);
  });

  it('starts a new window when the old one ends: t counts down to it', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const clock = manualClock();
    const api = await limitedApi({ database, clock });
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
    for (let i = 0; i < LIMIT; i++) expect((await api.call('GET', envs, { token })).status).toBe(200);
    const t = expectRateLimited(await api.call('GET', envs, { token }));

    clock.advance((t - 1) * 1000);
    expect(expectRateLimited(await api.call('GET', envs, { token }))).toBe(1);

    clock.advance(1000);
    const again = await api.call('GET', envs, { token });
    expect(again.status).toBe(200);
    expect(standing(again)).toEqual({ r: LIMIT - 1, t: 60 });
  });

  it('gives each token its own budget, and unauthenticated requests one per client address', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const other = await mintToken(apis[0]!, tenant, { role: 'viewer', as: token });
    const api = await limitedApi({ database });
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
    for (let i = 0; i < LIMIT; i++) await api.call('GET', envs, { token });
    expectRateLimited(await api.call('GET', envs, { token }));

    const second = await api.call('GET', envs, { token: other });
    expect(second.status).toBe(200);
    expect(standing(second).r).toBe(LIMIT - 1);
    // no credentials: the address's budget (in-process requests have no socket: one shared "unknown" address)
    const anonymous = await api.call('GET', '/healthz');
    expect(anonymous.status).toBe(200);
    expect(standing(anonymous).r).toBe(LIMIT - 1);
  });

  it('puts the headers on every response: public routes, unknown routes, 400, 401, 403', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const viewer = await mintToken(apis[0]!, tenant, { role: 'viewer', as: token });
    const api = await limitedApi({ database });
    const responses = [
      await api.call('GET', '/healthz'),
      await api.call('GET', '/openapi.json'),
      await api.call('GET', '/docs'),
      await api.call('GET', '/no/such/route/here'),
      await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs`),
    ];
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 404, 401]);
    expect(responses.map((r) => standing(r).r)).toEqual([4, 3, 2, 1, 0]);

    const invalid = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token, body: { name: 7 } });
    expectError(invalid, 400, 'validation_failed');
    expect(standing(invalid).r).toBe(LIMIT - 1);
    const forbidden = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token: viewer, body: { name: 'x' } });
    expectError(forbidden, 403, 'forbidden');
    expect(standing(forbidden).r).toBe(LIMIT - 1);
  });

  it('puts the headers on the entity read too, whose response is built with them rather than given them afterwards', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const setup = apis[0]!;
    const project = `/${tenant.org.slug}/${tenant.project.slug}`;
    expect((await setup.call('POST', `${project}/entity-types`, { token, body: { kind: 'EntityType', name: 'service', states: ['active'], initialState: 'active' } })).status).toBe(201);
    expect((await setup.call('POST', `${project}/envs/default/entities`, { token, body: { kind: 'Entity', entityType: 'service', name: 'checkout' } })).status).toBe(201);
    const api = await limitedApi({ database });
    // twice: the second read is answered for a caller remembered from the first (src/auth/plain-callers.ts)
    for (const [i, requestId] of ['trace-read-1', 'trace-read-2'].entries()) {
      const read = await api.call('GET', `${project}/envs/default/entities/checkout`, { token, headers: { 'x-request-id': requestId } });
      expect(read.status).toBe(200);
      expect((read.body as { name: string }).name).toBe('checkout');
      expect(read.headers.get('content-type')).toBe('application/json');
      expect(read.headers.get('x-request-id')).toBe(requestId);
      expect(standing(read).r).toBe(LIMIT - 1 - i);
    }
    const missing = await api.call('GET', `${project}/envs/default/entities/nowhere`, { token });
    expectError(missing, 404, 'not_found');
    expect(standing(missing).r).toBe(LIMIT - 3);
    expect(missing.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('counts malformed credentials against the address, and tokens the database turns away against it too', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const api = await limitedApi({ database });
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;

    // malformed: no lookup, so simply the address's budget
    const malformed = await api.call('GET', envs, { token: 'cpl_not-a-real-token' });
    expectError(malformed, 401, 'unauthorized');
    expect(standing(malformed).r).toBe(LIMIT - 1);

    // checksum-valid forgeries are free to make: each is its own key, but each 401 is counted against the address
    for (let i = 0; i < LIMIT; i++) {
      const forged = await api.call('GET', envs, { token: generateServiceToken().token });
      expectError(forged, 401, 'unauthorized');
      expect(standing(forged).r).toBe(LIMIT - 1);
    }
    const leases = api.databaseLeases();
    expectRateLimited(await api.call('GET', envs, { token: generateServiceToken().token }));
    expect(api.databaseLeases()).toBe(leases);
    // the address's failures are spent: from it, a real token waits for the window too (documented)
    expectRateLimited(await api.call('GET', envs, { token }));
  });

  it('counts the run callback by its run, not by the caller', async () => {
    const { database } = await tenantWithToken();
    const api = await limitedApi({ database });
    const callback = async (runId: string) => {
      const now = api.platform.clock.now();
      const credential = await signCallbackToken(
        api.platform.config.authSecret,
        { runId, orgId: randomUUID(), projectId: randomUUID(), envId: randomUUID() },
        new Date(now.getTime() + 60_000),
        now,
      );
      return api.call('POST', `/acme/p/envs/default/action-runs/${runId}/callback`, {
        token: credential,
        body: { status: 'succeeded' },
      });
    };
    const runA = randomUUID();
    const runB = randomUUID();
    for (let i = 0; i < LIMIT; i++) {
      const response = await callback(runA);
      // a verified token for a run that does not exist: past the credential check, so not a failure of the address
      expectError(response, 404, 'not_found');
      expect(standing(response).r).toBe(LIMIT - 1 - i);
    }
    expectRateLimited(await callback(runA));
    expect(standing(await callback(runB)).r).toBe(LIMIT - 1);
    expect(standing(await api.call('GET', '/healthz')).r).toBe(LIMIT - 1);
  });

  it('counts unauthenticated requests per client address on a real socket', async () => {
    const api = await limitedApi();
    const base = new URL(await api.listen());
    const get = (localAddress: string) =>
      new Promise<{ status: number; ratelimit: string | undefined }>((resolve, reject) => {
        const req = httpRequest({ host: base.hostname, port: base.port, path: '/healthz', localAddress }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, ratelimit: res.headers.ratelimit as string | undefined }));
        });
        req.on('error', reject);
        req.end();
      });
    for (let i = 0; i < LIMIT; i++) expect((await get('127.0.0.1')).status).toBe(200);
    const refused = await get('127.0.0.1');
    expect(refused.status).toBe(429);
    const elsewhere = await get('127.0.0.2');
    expect(elsewhere.status).toBe(200);
    expect(elsewhere.ratelimit).toMatch(/^"default";r=4;t=\d+$/);
  });

  it('puts the headers on the change stream too, which the Node server writes straight to its socket', async () => {
    const api = await limitedApi();
    const tenant = await createTenant(api);
    const token = await mintToken(api, tenant, { role: 'viewer' });
    const base = await api.listen();
    const response = await fetch(`${base}/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities/stream`, {
      headers: { authorization: `Bearer ${token}` },
    });
    try {
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      expect(response.headers.get('ratelimit-policy')).toBe(POLICY);
      expect(response.headers.get('ratelimit')).toMatch(/^"default";r=\d+;t=\d+$/);
    } finally {
      await response.body?.cancel();
    }
  });

  it('admits a request uncounted, with a warning, when the store cannot count: thrown at once or rejected later', async () => {
    const api = await limitedApi();
    for (const failure of ['throws', 'rejects'] as const) {
      const store: RateLimits = {
        clientAddress: () => undefined,
        peek: () => undefined,
        hit: () => {
          if (failure === 'throws') throw new Error('store unreachable');
          return Promise.reject(new Error('store unreachable'));
        },
      };
      const app = createApp({ ...api.platform, rateLimits: store });
      const logged = api.logs.length;
      const response = await app.request('/healthz');
      expect(response.status).toBe(200);
      expect(response.headers.get('ratelimit-policy')).toBe(POLICY);
      expect(response.headers.get('ratelimit')).toMatch(new RegExp(`^"default";r=${LIMIT};t=\\d+$`));
      const warnings = api.logs.slice(logged).map((line) => JSON.parse(line) as { level: string; msg: string });
      expect(warnings).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'rate limit store unavailable; request admitted uncounted' }));
    }
  });

  it('partitions addresses: IPv4 as is, IPv4-mapped IPv6 as IPv4, IPv6 by its /64', () => {
    expect(addressPartition('203.0.113.9')).toBe('203.0.113.9');
    expect(addressPartition('::ffff:203.0.113.9')).toBe('203.0.113.9');
    expect(addressPartition('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(addressPartition('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(addressPartition('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(addressPartition(undefined)).toBe('unknown');
    expect(addressPartition('not an address')).toBe('unknown');
  });
});

describe('rate limits shared through Postgres', () => {
  it('two instances on one database add up to one count, stored without the token', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const one = await limitedApi({ database, sharedRateLimits: true });
    const two = await limitedApi({ database, sharedRateLimits: true });
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;

    for (let i = 0; i < 3; i++) expect((await one.call('GET', envs, { token })).status).toBe(200);
    await one.rateLimits.sync();
    // two has not synced yet: it decides on its own count (the bounded overshoot of docs/decisions.md)
    expect(standing(await two.call('GET', envs, { token })).r).toBe(LIMIT - 1);
    await two.rateLimits.sync();
    // now it knows the 4 of both
    expect(standing(await two.call('GET', envs, { token })).r).toBe(0);
    expectRateLimited(await two.call('GET', envs, { token }));

    // one learns of two's requests at its next sync, which its next admitted request makes due: 6 admitted in all
    expect(standing(await one.call('GET', envs, { token })).r).toBe(1);
    await one.rateLimits.sync();
    expectRateLimited(await one.call('GET', envs, { token }));

    await two.rateLimits.sync();
    const rows = await one.db.select().from(rateLimitCounters);
    const tokenKey = `tok:${hashServiceToken(token).slice(0, 32)}`;
    expect(rows.filter((row) => row.key === tokenKey).map((row) => row.count)).toEqual([6]);
    expect(rows.some((row) => row.key.includes(token) || row.key.includes(token.slice(4)))).toBe(false);
  });

  it('forgets ended windows: a new window starts from zero on every instance, and old rows are deleted', async () => {
    const { database, tenant, token } = await tenantWithToken();
    const clock = manualClock();
    const one = await limitedApi({ database, clock, sharedRateLimits: true });
    const two = await limitedApi({ database, clock, sharedRateLimits: true });
    const envs = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
    for (let i = 0; i < LIMIT; i++) await one.call('GET', envs, { token });
    await one.rateLimits.sync();
    await two.call('GET', envs, { token });
    await two.rateLimits.sync();
    const t = expectRateLimited(await two.call('GET', envs, { token }));

    clock.advance(t * 1000);
    expect(standing(await two.call('GET', envs, { token })).r).toBe(LIMIT - 1);
    expect(standing(await one.call('GET', envs, { token })).r).toBe(LIMIT - 1);
    clock.advance(3 * 60_000);
    await one.call('GET', envs, { token });
    await one.rateLimits.sync();
    const starts = (await one.db.select().from(rateLimitCounters)).map((row) => row.windowStart.getTime());
    expect(starts.every((start) => start > clock.now().getTime() - 2 * 60_000)).toBe(true);
  });

  it('is what the Node host uses on Postgres; on the embedded PGlite it counts in process only', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cellplane-rate-limit-'));
    const postgres = usingPostgres() ? await createTestDatabase() : undefined;
    try {
      const node = await createNodePlatform(
        postgres ? { ...TEST_SECRETS, DATABASE_URL: postgres.url! } : { ...TEST_SECRETS, CELLPLANE_DATA_DIR: dataDir },
        { logSink: () => {} },
      );
      try {
        expect(node.platform.rateLimits).toBeInstanceOf(NodeRateLimits);
        expect((node.platform.rateLimits as NodeRateLimits).shared).toBe(usingPostgres());
      } finally {
        await node.close();
      }
    } finally {
      await postgres?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
