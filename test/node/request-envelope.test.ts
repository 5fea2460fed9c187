import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import type { AppEnv } from '../../src/context';
import { loadConfig } from '../../src/config';
import { ApiError } from '../../src/http/errors';
import { handleError } from '../../src/http/error-handler';
import { answerText, requestEnvelope } from '../../src/http/request-envelope';
import { createLogger } from '../../src/logger';
import { systemClock, type Platform, type RateLimitStanding } from '../../src/platform';
import { TEST_SECRETS } from '../support/node-app';

/**
 * The envelope (src/http/request-envelope.ts) on a Hono app of its own, so
 * every kind of response a route can give is reachable: one it builds with
 * the request's headers, one from `c.json`, one whose headers are immutable,
 * a stream, an error, a refusal by the limit.
 */
function envelopedApp(options: { limit?: number } = {}) {
  const logs: Record<string, unknown>[] = [];
  let hits = 0;
  const limit = options.limit ?? 100;
  const platform = {
    config: { ...loadConfig(TEST_SECRETS), rateLimitPerMinute: limit },
    logger: createLogger({ sink: (line) => logs.push(JSON.parse(line) as Record<string, unknown>) }),
    clock: systemClock,
    executionContext: false,
    rateLimits: {
      clientAddress: () => '127.0.0.1',
      hit: (): RateLimitStanding => ({ allowed: ++hits <= limit, remaining: Math.max(0, limit - hits), resetAt: Date.now() + 30_000 }),
      peek: () => undefined,
    },
  } as unknown as Platform;
  const app = new Hono<AppEnv>();
  app.use('*', requestEnvelope(platform));
  app.onError(handleError(platform.logger));
  app.get('/built', (c) => answerText(c, '{"built":true}', 200, 'application/json'));
  app.get('/json', (c) => c.json({ plain: true }, 201));
  app.get('/header-first', (c) => {
    c.header('X-Own', 'kept');
    return c.json({ ok: true });
  });
  app.get('/immutable', () => Response.redirect('http://127.0.0.1/elsewhere', 302));
  app.get('/stream', () => new Response(new ReadableStream({ start: (controller) => controller.close() }), { headers: { 'content-type': 'text/event-stream' } }));
  app.get('/refused', () => {
    throw new ApiError('forbidden', 'not yours');
  });
  return { app, logs };
}

const requestIdOf = (response: Response) => response.headers.get('x-request-id');

describe('the request envelope', () => {
  it('gives every kind of response the request id and the rate limit headers, once', async () => {
    const { app, logs } = envelopedApp();
    const paths = ['/built', '/json', '/header-first', '/immutable', '/stream', '/refused', '/nowhere'];
    const responses = [];
    for (const path of paths) responses.push(await app.request(path));
    expect(responses.map((r) => r.status)).toEqual([200, 201, 200, 302, 200, 403, 404]);
    for (const [i, response] of responses.entries()) {
      expect(requestIdOf(response), paths[i]).toMatch(/^[0-9a-f-]{36}$/);
      expect(response.headers.get('ratelimit-policy'), paths[i]).toBe('"default";q=100;w=60');
      expect(response.headers.get('ratelimit'), paths[i]).toMatch(new RegExp(`^"default";r=${99 - i};t=(29|30)$`));
    }
    expect(responses[0]!.headers.get('content-type')).toBe('application/json');
    expect(await responses[0]!.json()).toEqual({ built: true });
    expect(responses[2]!.headers.get('x-own')).toBe('kept');
    expect(responses[3]!.headers.get('location')).toBe('http://127.0.0.1/elsewhere');
    expect(responses[4]!.headers.get('content-type')).toBe('text/event-stream');
    expect(await responses[5]!.json()).toEqual({ error: 'not yours', code: 'forbidden' });

    // one line each, under the id the client saw
    const lines = logs.filter((line) => line.msg === 'request');
    expect(lines.map((line) => [line.path, line.status, line.requestId])).toEqual(
      responses.map((response, i) => [paths[i], response.status, requestIdOf(response)]),
    );
    expect(new Set(lines.map((line) => line.requestId)).size).toBe(paths.length);
  });

  it("keeps a client's well-formed X-Request-Id and replaces any other", async () => {
    const { app } = envelopedApp();
    const sent = ['trace-abc_123=', 'x'.repeat(255), 'x'.repeat(256), 'has space', 'semi;colon', ''];
    const answered = [];
    for (const id of sent) answered.push(requestIdOf(await app.request('/built', { headers: { 'x-request-id': id } })));
    expect(answered.slice(0, 2)).toEqual(sent.slice(0, 2));
    for (const id of answered.slice(2)) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  });

  it('refuses past the limit before the route runs, with Retry-After and a log line', async () => {
    const { app, logs } = envelopedApp({ limit: 1 });
    expect((await app.request('/built')).status).toBe(200);
    const refused = await app.request('/built');
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ code: 'rate_limited' });
    expect(refused.headers.get('ratelimit')).toMatch(/^"default";r=0;t=(29|30)$/);
    expect(refused.headers.get('retry-after')).toMatch(/^(29|30)$/);
    expect(requestIdOf(refused)).toMatch(/^[0-9a-f-]{36}$/);
    expect(logs.filter((line) => line.msg === 'request').map((line) => line.status)).toEqual([200, 429]);
  });
});
