import { Hono } from 'hono';
import { requestId } from 'hono/request-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AppEnv, ServiceContext } from '../../src/context';
import { requestContext } from '../../src/http/middleware';
import type { Platform } from '../../src/platform';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * The request middleware's ServiceContext (src/http/middleware.ts), seen
 * from a route behind it: built per request, the database leased only when
 * used and given back once, and without accessors of its own. An own
 * accessor (an object literal's `get db()`) is an accessor pair V8 makes in
 * its old generation, pointing at the request's closures: every request's
 * objects then outlived the young generation (15 % of what a GET allocated
 * was promoted; bench/http-results.md, "2026-11-27").
 */
describe('request context', () => {
  let api: TestApi;
  let tenant: Tenant;
  let token: string;
  let opened = 0;
  let released = 0;
  const seen: ServiceContext[] = [];
  let probe: Hono<AppEnv>;

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    token = await mintToken(api, tenant, { role: 'owner' });
    const counting: Platform = {
      ...api.platform,
      openDatabase: () => {
        opened++;
        const lease = api.platform.openDatabase();
        return {
          db: lease.db,
          release: () => {
            released++;
            return lease.release();
          },
        };
      },
    };
    probe = new Hono<AppEnv>();
    probe.use('*', requestId(), requestContext(counting));
    probe.get('/idle', (c) => {
      seen.push(c.get('services'));
      return c.text('ok');
    });
    probe.get('/query', async (c) => {
      const services = c.get('services');
      seen.push(services);
      await services.db.execute('select 1');
      await services.db.execute('select 1');
      return c.text('ok');
    });
  });
  afterAll(() => api.close());

  const call = (path: string) => probe.request(path, { headers: { authorization: `Bearer ${token}` } });

  it('leases the database on first use, once per request, and gives it back when the request ends', async () => {
    opened = released = 0;
    expect((await call('/idle')).status).toBe(200);
    expect([opened, released]).toEqual([0, 0]);
    expect((await call('/query')).status).toBe(200);
    expect([opened, released]).toEqual([1, 1]);
  });

  it('builds a context of its own for each request, with no own accessors', async () => {
    seen.length = 0;
    await call('/idle');
    await call('/idle');
    const [first, second] = seen;
    expect(first).toBeDefined();
    expect(first).not.toBe(second);
    expect(first!.changedEnvironments).not.toBe(second!.changedEnvironments);
    expect(first!.requestId).not.toBe(second!.requestId);
    for (const services of seen) {
      const accessors = Object.entries(Object.getOwnPropertyDescriptors(services))
        .filter(([, descriptor]) => descriptor.get !== undefined || descriptor.set !== undefined)
        .map(([name]) => name);
      expect(accessors).toEqual([]);
    }
  });

  it('holds the pending token until a lookup settles it, and the platform it was built from', async () => {
    seen.length = 0;
    await call('/idle');
    const [services] = seen;
    expect(services!.callerState.resolved).toBe(false);
    expect(services!.callerState.tokenHash).toMatch(/^[0-9a-f]{64}$/);
    expect(() => services!.caller).toThrow(/before it was resolved/);
    expect(services!.config).toBe(api.platform.config);
    expect(services!.clock).toBe(api.platform.clock);
    expect(typeof services!.auth).toBe('function');
  });
});
