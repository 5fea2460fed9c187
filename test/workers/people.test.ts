import { exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';

/**
 * User sessions through the real Worker entry (src/worker.ts) in workerd:
 * Better Auth on the request's Neon pool, the session as a cookie and as a
 * Bearer value, organizations owned by users, and the CSRF rule. The steps
 * run in order and build on each other (the user, the organization).
 */

const BASE = 'http://cellplane.test';

function call(method: string, path: string, options: { token?: string; cookie?: string; origin?: string; body?: unknown } = {}) {
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.cookie !== undefined) headers.cookie = options.cookie;
  if (options.origin !== undefined) headers.origin = options.origin;
  let body: string | undefined;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  return exports.default.fetch(`${BASE}${path}`, { method, headers, body, redirect: 'manual' });
}

async function expectError(response: Response, status: number, code: string) {
  const body = (await response.json()) as { error: unknown; code: unknown };
  expect({ status: response.status, code: body.code }).toEqual({ status, code });
  expect(typeof body.error).toBe('string');
}

const suffix = Math.random().toString(36).slice(2, 8);
const email = `worker-${suffix}@example.com`;
const password = 'correct horse battery staple';

describe.sequential('the Worker host, user sessions', () => {
  let token = '';
  let cookie = '';
  let userId = '';
  const slug = `w-${suffix}`;

  it('signs a user up through /api/auth, returning the session as a cookie and as set-auth-token', async () => {
    const response = await call('POST', '/api/auth/sign-up/email', { body: { email, password, name: 'Worker User' } });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { user: { id: string; email: string } };
    expect(body.user.email).toBe(email);
    userId = body.user.id;
    token = response.headers.get('set-auth-token') ?? '';
    cookie = (response.headers.get('set-cookie') ?? '').split(';')[0]!;
    expect(token).toMatch(/^[0-9A-Za-z]{32}\./);
    expect(cookie).toMatch(/^cellplane\.session_token=/);
  });

  it('reads the session back with the Bearer value and with the cookie', async () => {
    for (const options of [{ token }, { cookie }]) {
      const response = await call('GET', '/api/auth/get-session', options);
      expect(response.status).toBe(200);
      expect(((await response.json()) as { user: { id: string } }).user.id).toBe(userId);
    }
  });

  it('refuses a wrong password with 401 in the API error shape', async () => {
    await expectError(await call('POST', '/api/auth/sign-in/email', { body: { email, password: 'not the password' } }), 401, 'invalid_email_or_password');
  });

  it('lets the user create an organization it then owns', async () => {
    const created = await call('POST', '/orgs', { token, body: { name: 'Worker Org', slug } });
    expect(created.status).toBe(201);
    const project = await call('POST', `/orgs/${slug}/projects`, { token, body: { name: 'P', slug: 'p' } });
    expect(project.status).toBe(201);
    const envs = await call('GET', `/${slug}/p/envs`, { token });
    expect(envs.status).toBe(200);
    expect(((await envs.json()) as { name: string }[]).map((env) => env.name)).toEqual(['default']);
  });

  it('refuses a cookie write from an untrusted origin, and takes it from the API origin', async () => {
    await expectError(
      await call('POST', `/orgs/${slug}/projects`, { cookie, origin: 'https://evil.example', body: { name: 'Q', slug: 'q' } }),
      403,
      'origin_not_trusted',
    );
    await expectError(await call('POST', `/orgs/${slug}/projects`, { cookie, body: { name: 'Q', slug: 'q' } }), 403, 'origin_not_trusted');
    const accepted = await call('POST', `/orgs/${slug}/projects`, { cookie, origin: BASE, body: { name: 'Q', slug: 'q' } });
    expect(accepted.status).toBe(201);
  });

  it('hides an organization the user is not a member of', async () => {
    const other = await call('POST', '/api/auth/sign-up/email', { body: { email: `other-${email}`, password, name: 'Other' } });
    const otherToken = other.headers.get('set-auth-token')!;
    await expectError(await call('GET', `/orgs/${slug}`, { token: otherToken }), 404, 'not_found');
    await expectError(await call('GET', `/${slug}/p/envs`, { token: otherToken }), 404, 'not_found');
  });

  it('refuses a forged session token, and a signed-out one', async () => {
    const forged = `${token.slice(0, 32)}.${'A'.repeat(43)}=`;
    await expectError(await call('GET', `/orgs/${slug}`, { token: forged }), 401, 'unauthorized');
    expect((await call('POST', '/api/auth/sign-out', { token, origin: BASE })).status).toBe(200);
    await expectError(await call('GET', `/orgs/${slug}`, { token }), 401, 'unauthorized');
  });
});
