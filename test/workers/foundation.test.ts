import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config';
import { createWorkerPlatform } from '../../src/worker-platform';

/**
 * The foundation routes through the real Worker entry (src/worker.ts), in
 * workerd, against the fresh database of the global setup, reached through
 * the Neon driver. One database for the whole file and bootstrap mode
 * closes once, so the steps run in order and later ones build on earlier
 * ones (the org, the project, the token).
 */

const BASE = 'http://cellplane.test';

function call(method: string, path: string, options: { token?: string; body?: unknown; raw?: string } = {}) {
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  let body: string | undefined;
  if (options.raw !== undefined || options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = options.raw ?? JSON.stringify(options.body);
  }
  return exports.default.fetch(`${BASE}${path}`, { method, headers, body });
}

async function json<T = Record<string, unknown>>(response: Response): Promise<T> {
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
  return (await response.json()) as T;
}

/** Every error is `{ error, code }` (plus `details` for validation), with the status of its code. */
async function expectError(response: Response, status: number, code: string) {
  const body = await json<{ error: unknown; code: unknown; details?: unknown }>(response);
  expect({ status: response.status, code: body.code }).toEqual({ status, code });
  expect(typeof body.error).toBe('string');
  expect((body.error as string).length).toBeGreaterThan(0);
  expect(Object.keys(body).filter((key) => !['error', 'code', 'details'].includes(key))).toEqual([]);
  return body;
}

describe.sequential('the Worker host, foundation routes', () => {
  let token = '';

  it('answers GET /healthz from the database, with an X-Request-Id', async () => {
    const response = await call('GET', '/healthz');
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({ status: 'ok', version: expect.any(String) });
    expect(response.headers.get('x-request-id')).toMatch(/^\S{8,}$/);
  });

  it('gives every response its own request id', async () => {
    const [a, b] = await Promise.all([call('GET', '/healthz'), call('GET', '/nowhere')]);
    expect(a.headers.get('x-request-id')).toBeTruthy();
    expect(b.headers.get('x-request-id')).toBeTruthy();
    expect(a.headers.get('x-request-id')).not.toBe(b.headers.get('x-request-id'));
  });

  it('answers an unknown route with 404 not_found', async () => {
    const response = await call('GET', '/no/such/route/here');
    await expectError(response, 404, 'not_found');
  });

  it('serves the OpenAPI 3.1 document', async () => {
    const response = await call('GET', '/openapi.json');
    expect(response.status).toBe(200);
    const document = await json<{ openapi: string; paths: Record<string, unknown> }>(response);
    expect(document.openapi).toBe('3.1.0');
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining(['/orgs', '/orgs/{o}/projects', '/{o}/{p}/envs', '/orgs/{orgId}/projects/{projectId}/tokens']),
    );
  });

  it('is in bootstrap mode on a fresh database: POST /orgs needs no token', async () => {
    const response = await call('POST', '/orgs', { body: { name: 'Acme', slug: 'acme' } });
    expect(response.status).toBe(201);
    expect(await json(response)).toMatchObject({ id: expect.any(String), name: 'Acme', slug: 'acme' });

    const other = await call('POST', '/orgs', { body: { name: 'Beta', slug: 'beta' } });
    expect(other.status).toBe(201);
  });

  it('refuses a taken org slug with 409 already_exists', async () => {
    await expectError(await call('POST', '/orgs', { body: { name: 'Acme again', slug: 'acme' } }), 409, 'already_exists');
  });

  it('creates a project with its `default` environment', async () => {
    const response = await call('POST', '/orgs/acme/projects', { body: { name: 'P', slug: 'p' } });
    expect(response.status).toBe(201);
    expect(await json(response)).toMatchObject({ name: 'P', slug: 'p', orgId: expect.any(String) });
    // the other org gets a project of the same slug, for the tenancy check below
    expect((await call('POST', '/orgs/beta/projects', { body: { name: 'P', slug: 'p' } })).status).toBe(201);

    const envs = await call('GET', '/acme/p/envs');
    expect(envs.status).toBe(200);
    expect((await json<{ name: string }[]>(envs)).map((e) => e.name)).toEqual(['default']);
  });

  it('creates an environment once (201, then 409) and never deletes `default`', async () => {
    const created = await call('POST', '/acme/p/envs', { body: { name: 'staging' } });
    expect(created.status).toBe(201);
    expect(await json(created)).toMatchObject({ name: 'staging' });
    await expectError(await call('POST', '/acme/p/envs', { body: { name: 'staging' } }), 409, 'already_exists');
    await expectError(await call('DELETE', '/acme/p/envs/default'), 400, 'default_environment_protected');

    const envs = await json<{ name: string }[]>(await call('GET', '/acme/p/envs'));
    expect(envs.map((e) => e.name).sort()).toEqual(['default', 'staging']);
  });

  it('refuses malformed JSON with 400 invalid_json', async () => {
    await expectError(await call('POST', '/orgs', { raw: '{"name": "Broken",' }), 400, 'invalid_json');
  });

  it('refuses an unknown field with 400 validation_failed and a detail naming it', async () => {
    const response = await call('POST', '/orgs', { body: { name: 'Gamma', slug: 'gamma', colour: 'red' } });
    const body = await expectError(response, 400, 'validation_failed');
    expect(body.details).toEqual(expect.arrayContaining([{ path: expect.any(String), message: expect.stringContaining('colour') }]));
  });

  it('refuses a body over 1 MiB with 413 payload_too_large', async () => {
    const huge = JSON.stringify({ name: 'x'.repeat(1024 * 1024), slug: 'huge' });
    await expectError(await call('POST', '/orgs', { raw: huge }), 413, 'payload_too_large');
    // nothing was created
    await expectError(await call('GET', '/orgs/huge'), 404, 'not_found');
  });

  it('mints the first token (201, `cpl_...`), which closes bootstrap mode', async () => {
    const response = await call('POST', '/orgs/acme/projects/p/tokens', { body: { name: 't', role: 'owner' } });
    expect(response.status).toBe(201);
    const minted = await json<{ token: string; role: string; prefix: string }>(response);
    expect(minted.token).toMatch(/^cpl_[0-9A-Za-z]{36}$/);
    expect(minted.role).toBe('owner');
    expect(minted.token.startsWith(minted.prefix)).toBe(true);
    token = minted.token;
  });

  it('then needs a token: none is 401 unauthorized', async () => {
    await expectError(await call('GET', '/orgs/acme'), 401, 'unauthorized');
    await expectError(await call('POST', '/orgs', { body: { name: 'Late', slug: 'late' } }), 401, 'unauthorized');
  });

  it('refuses a malformed token with 401', async () => {
    await expectError(await call('GET', '/orgs/acme', { token: 'not-a-token' }), 401, 'unauthorized');
    // right shape, wrong checksum
    await expectError(await call('GET', '/orgs/acme', { token: `cpl_${'A'.repeat(36)}` }), 401, 'unauthorized');
  });

  it('accepts the minted token', async () => {
    const response = await call('GET', '/orgs/acme', { token });
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject({ slug: 'acme', name: 'Acme' });
  });

  it('serves concurrent requests, each on its own connection', async () => {
    const responses = await Promise.all(Array.from({ length: 24 }, () => call('GET', '/acme/p/envs', { token })));
    const bodies = await Promise.all(responses.map((response) => response.json()));
    expect(responses.map((response) => response.status)).toEqual(responses.map(() => 200));
    for (const body of bodies) expect((body as { name: string }[]).map((e) => e.name).sort()).toEqual(['default', 'staging']);
  });

  it("answers 404 for another org's project of the same slug", async () => {
    await expectError(await call('GET', '/beta/p/envs', { token }), 404, 'not_found');
    await expectError(await call('GET', '/orgs/beta', { token }), 404, 'not_found');
  });

  it('lists tokens without their values', async () => {
    const response = await call('GET', '/orgs/acme/projects/p/tokens', { token });
    expect(response.status).toBe(200);
    const tokens = await json<Record<string, unknown>[]>(response);
    expect(tokens).toHaveLength(1);
    expect(tokens[0]).toMatchObject({ name: 't', role: 'owner', prefix: token.slice(0, 12) });
    expect(tokens[0]).not.toHaveProperty('token');
    expect(JSON.stringify(tokens)).not.toContain(token);
  });

  it('revokes a token, effective on the very next request', async () => {
    const minted = await json<{ id: string; token: string }>(
      await call('POST', '/orgs/acme/projects/p/tokens', { token, body: { name: 'short-lived', role: 'member' } }),
    );
    expect((await call('GET', '/orgs/acme', { token: minted.token })).status).toBe(200);

    const revoked = await call('DELETE', `/orgs/acme/projects/p/tokens/${minted.id}`, { token });
    expect(revoked.status).toBe(200);
    expect(await json(revoked)).toEqual({ revoked: true, id: minted.id });

    await expectError(await call('GET', '/orgs/acme', { token: minted.token }), 401, 'unauthorized');
    // the revoking token is untouched
    expect((await call('GET', '/orgs/acme', { token })).status).toBe(200);
  });
});

describe('the Worker host, its other parts', () => {
  it('binds the environment stream Durable Object, which answers only its own routes', async () => {
    const stub = env.ENVIRONMENT_STREAM.get(env.ENVIRONMENT_STREAM.idFromName('any-environment'));
    const response = await stub.fetch('http://stream/changes');
    expect(response.status).toBe(404);
    expect(await response.json()).toEqual({ error: 'no route for GET /changes', code: 'not_found' });
  });

  it('refuses to start without DATABASE_URL, naming it', () => {
    const { DATABASE_URL: _omitted, ...withoutDatabase } = env;
    let thrown: unknown;
    try {
      createWorkerPlatform(withoutDatabase as typeof env);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).problems.map((p) => p.variable)).toEqual(['DATABASE_URL']);
    expect((thrown as ConfigError).message).not.toContain(env.ENCRYPTION_KEY as string);
  });

  it('refuses to start with a QUEUE_DRIVER other than cloudflare', () => {
    expect(() => createWorkerPlatform({ ...env, QUEUE_DRIVER: 'pg' })).toThrow(/QUEUE_DRIVER: must be "cloudflare"/);
  });
});
