import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createApp } from '../../src/app';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { systemClock } from '../../src/platform';
import { createTestApi, TEST_SECRETS, type TestApi } from '../support/node-app';
import { expectError } from '../support/fixtures';

describe('HTTP layer', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi();
  });
  afterAll(() => api.close());

  it('answers /healthz after checking the database', async () => {
    const response = await api.call('GET', '/healthz');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ status: 'ok', version: '0.1.0' });
  });

  it('puts X-Request-Id on every response, errors included, and honours a client-sent one', async () => {
    for (const response of [
      await api.call('GET', '/healthz'),
      await api.call('GET', '/no/such/route/here'),
      await api.call('POST', '/orgs', { rawBody: '{' }),
    ]) {
      expect(response.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    }
    const echoed = await api.call('GET', '/healthz', { headers: { 'x-request-id': 'trace-abc-123' } });
    expect(echoed.headers.get('x-request-id')).toBe('trace-abc-123');
  });

  it('answers unknown routes with 404 not_found', async () => {
    expectError(await api.call('GET', '/definitely/not/a/route/x'), 404, 'not_found');
    expectError(await api.call('PATCH', '/orgs'), 404, 'not_found');
  });

  it('refuses malformed JSON with 400 invalid_json', async () => {
    expectError(await api.call('POST', '/orgs', { rawBody: '{"name": "x", ' }), 400, 'invalid_json');
    expectError(await api.call('POST', '/orgs', { rawBody: '   ', headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
  });

  it('takes an empty body as no body, whatever its content type: the schema of the route decides', async () => {
    for (const contentType of ['application/json', 'text/plain']) {
      const response = await api.call('POST', '/orgs', { rawBody: '', headers: { 'content-type': contentType } });
      expectError(response, 400, 'validation_failed');
    }
  });

  it('refuses a non-JSON body with 415', async () => {
    const response = await api.call('POST', '/orgs', {
      rawBody: 'name=x&slug=y',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectError(response, 415, 'unsupported_media_type');
  });

  it('reports schema violations as 400 validation_failed with details', async () => {
    const response = await api.call('POST', '/orgs', { body: { name: '', slug: 'Bad Slug!', extra: true } });
    expectError(response, 400, 'validation_failed');
    const paths = response.body.details.map((d: { path: string }) => d.path);
    expect(paths).toEqual(expect.arrayContaining(['name', 'slug']));
    expect(response.body.details.some((d: { message: string }) => d.message.includes('extra'))).toBe(true);
  });

  it('refuses bodies over 1 MiB with 413 payload_too_large, and accepts one just under', async () => {
    const big = JSON.stringify({ name: 'x'.repeat(1024 * 1024), slug: 'big' });
    expectError(await api.call('POST', '/orgs', { rawBody: big }), 413, 'payload_too_large');
    // a body streamed without Content-Length is counted too
    const stream = new ReadableStream({
      start(controller) {
        for (let i = 0; i < 17; i++) controller.enqueue(new TextEncoder().encode('x'.repeat(64 * 1024)));
        controller.close();
      },
    });
    const streamed = await api.app.request('/orgs', {
      method: 'POST',
      body: stream,
      headers: { 'content-type': 'application/json' },
      // @ts-expect-error Node's fetch needs duplex for a streamed body
      duplex: 'half',
    });
    expect(streamed.status).toBe(413);
    expect(((await streamed.json()) as { code: string }).code).toBe('payload_too_large');
    // whitespace is valid JSON: a body a few bytes under the limit is read and accepted
    const payload = JSON.stringify({ name: 'Under', slug: 'under-limit' });
    const justUnder = payload + ' '.repeat(1024 * 1024 - payload.length - 8);
    expect((await api.call('POST', '/orgs', { rawBody: justUnder })).status).toBe(201);
  });

  it('takes a client that leaves mid-upload as gone, not as a server fault: nothing written, no error logged, the server serves on', async () => {
    const base = new URL(await api.listen());
    const before = api.logs.length;
    await new Promise<void>((resolve) => {
      const socket = connect(Number(base.port), base.hostname, () => {
        socket.write(
          `POST /orgs HTTP/1.1\r\nHost: ${base.host}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"name":"Half","slug":"half"`,
        );
        setTimeout(() => socket.destroy(), 100);
      });
      socket.on('close', () => resolve());
    });
    const logged = () => api.logs.slice(before).map((line) => JSON.parse(line) as { level: string; msg: string; path?: string });
    await vi.waitFor(() => expect(logged().some((line) => line.msg === 'client closed the request before it was read')).toBe(true));
    expect(logged().filter((line) => line.level === 'error')).toEqual([]);
    expect((await api.call('GET', '/orgs/half')).status).toBe(404);
    expect((await fetch(`${base.origin}/healthz`)).status).toBe(200);
  });

  it('serves the OpenAPI 3.1 document generated from the routes', async () => {
    const response = await api.call('GET', '/openapi.json');
    expect(response.status).toBe(200);
    expect(response.body.openapi).toBe('3.1.0');
    expect(response.body.info).toMatchObject({ title: 'Cellplane', version: '0.1.0' });
    expect(Object.keys(response.body.paths)).toEqual(
      expect.arrayContaining([
        '/orgs',
        '/orgs/{id}',
        '/orgs/{o}/projects',
        '/{o}/{p}/envs',
        '/{o}/{p}/envs/{name}',
        '/orgs/{orgId}/projects/{projectId}/tokens',
        '/orgs/{orgId}/projects/{projectId}/tokens/{id}',
      ]),
    );
    expect(response.body.components.schemas).toHaveProperty('Error');
    expect(response.body.components.schemas).toHaveProperty('MintedServiceToken');
    expect(response.body.paths['/orgs'].post.responses).toHaveProperty('409');
  });

  it('serves a readable docs page without external assets', async () => {
    const response = await api.app.request('/docs');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/html');
    const html = await response.text();
    expect(html).toContain('/orgs/{orgId}/projects/{projectId}/tokens');
    expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+href="http/);
  });
});

describe('unexpected errors', () => {
  it('become an opaque 500 with the request id, logged once without secrets', async () => {
    const logs: string[] = [];
    const config = loadConfig(TEST_SECRETS);
    const leak = `SELECT secret FROM vault WHERE key = '${TEST_SECRETS.AUTH_SECRET}'`;
    const app = createApp({
      config,
      logger: createLogger({ secrets: [config.authSecret, config.encryptionKey], sink: (line) => logs.push(line) }),
      clock: systemClock,
      openDatabase: () => {
        throw new Error(leak);
      },
      bootstrap: { closed: false },
      namedStatements: false,
      mailer: { send: async () => {} },
      deliveries: { schedule: async () => {} },
      changes: { publish: async () => {}, open: async () => new Response(null) },
      executionContext: false,
    });
    const response = await app.request('/orgs/acme');
    expect(response.status).toBe(500);
    const body = await response.json();
    const requestId = response.headers.get('x-request-id')!;
    expect(body).toEqual({ error: `internal error (request id ${requestId})`, code: 'internal' });
    expect(JSON.stringify(body)).not.toContain('SELECT');
    const errors = logs.filter((line) => JSON.parse(line).level === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(requestId);
    expect(logs.join('\n')).not.toContain(TEST_SECRETS.AUTH_SECRET);
  });
});
