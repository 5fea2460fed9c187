import { exports } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { users } from '../../src/db/schema';
import { withDb } from './worker-database';

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

  it('adds a colleague by email, gives roles, and tells the colleague', async () => {
    const colleague = `colleague-${suffix}@example.com`;
    const added = await call('POST', `/orgs/${slug}/users`, { token, body: { email: colleague, name: 'Col', role: 'member' } });
    expect(added.status).toBe(201);
    const { userId: colleagueId } = (await added.json()) as { userId: string };
    const changed = await call('PATCH', `/orgs/${slug}/users/${colleagueId}`, { token, body: { role: 'admin' } });
    expect(changed.status).toBe(200);
    expect(((await changed.json()) as { role: string }).role).toBe('admin');
    const members = (await (await call('GET', `/orgs/${slug}/users`, { token })).json()) as { email: string; role: string }[];
    expect(members.map((m) => [m.email, m.role]).sort()).toEqual([
      [colleague, 'admin'],
      [email, 'owner'],
    ]);
    // the only owner cannot be removed
    await expectError(await call('DELETE', `/orgs/${slug}/users/${userId}`, { token }), 400, 'last_owner');
  });

  it('saves graph views and preferences, and reads notifications', async () => {
    const view = await call('POST', `/${slug}/p/graph-views`, { token, body: { name: 'Mine', scope: 'user', config: { depth: 2 } } });
    expect(view.status).toBe(201);
    const { id } = (await view.json()) as { id: string };
    expect((await call('PATCH', `/${slug}/p/graph-views/${id}/default`, { token })).status).toBe(200);
    const fallback = (await (await call('GET', `/${slug}/p/graph-views/default`, { token })).json()) as { id: string; name: string };
    expect(fallback).toMatchObject({ id, name: 'Mine' });
    const put = await call('PUT', '/user/preferences/theme', { token, body: { value: { mode: 'dark' } } });
    expect(put.status).toBe(200);
    expect(await (await call('GET', '/user/preferences/theme', { token })).json()).toEqual({ value: { mode: 'dark' } });
    expect((await call('DELETE', '/user/preferences/theme', { token })).status).toBe(204);
    const notifications = (await (await call('GET', '/notifications', { token })).json()) as { items: unknown[]; unreadCount: number };
    expect(notifications).toMatchObject({ items: expect.any(Array), unreadCount: expect.any(Number) });
  });

  it('serves the super-admin plane to a verified listed address only, and suspends with it', async () => {
    const signedUp = await call('POST', '/api/auth/sign-up/email', { body: { email: 'root@worker.example', password, name: 'Root' } });
    expect(signedUp.status).toBe(200);
    const root = signedUp.headers.get('set-auth-token')!;
    // unverified: not yet a super-admin (the Worker logs its mail; the Node suites follow the real link)
    await expectError(await call('GET', '/admin/orgs', { token: root }), 403, 'forbidden');
    await withDb((db) => db.update(users).set({ emailVerified: true }).where(eq(users.email, 'root@worker.example')));
    expect((await call('GET', '/admin/orgs', { token: root })).status).toBe(200);
    expect((await call('POST', `/admin/orgs/${slug}/suspend`, { token: root })).status).toBe(200);
    await expectError(await call('GET', `/orgs/${slug}`, { token }), 403, 'org_suspended');
    expect((await call('POST', `/admin/orgs/${slug}/unsuspend`, { token: root })).status).toBe(200);
    expect((await call('GET', `/orgs/${slug}`, { token })).status).toBe(200);
    const audit = (await (await call('GET', `/admin/audit?action=org.suspended`, { token: root })).json()) as { total: number };
    expect(audit.total).toBeGreaterThanOrEqual(1);
    await expectError(await call('GET', '/admin/orgs', { token }), 403, 'forbidden');
  });

  it('refuses a forged session token, and a signed-out one', async () => {
    const forged = `${token.slice(0, 32)}.${'A'.repeat(43)}=`;
    await expectError(await call('GET', `/orgs/${slug}`, { token: forged }), 401, 'unauthorized');
    expect((await call('POST', '/api/auth/sign-out', { token, origin: BASE })).status).toBe(200);
    await expectError(await call('GET', `/orgs/${slug}`, { token }), 401, 'unauthorized');
  });
});
