import { expect } from 'vitest';
import type { TestApi } from './node-app';
import { uniqueSlug } from './fixtures';

/** A signed-in user: its Bearer session token (for `api.call`'s `token`) and its cookie (browser flows). */
export interface TestUser {
  id: string;
  email: string;
  name: string;
  password: string;
  /** The `set-auth-token` value: `Authorization: Bearer <token>` (Better Auth's bearer plugin). */
  token: string;
  /** `name=value` of the session cookie, for a `cookie` header. */
  cookie: string;
}

export const TEST_PASSWORD = 'correct horse battery staple';

/** Signs a new user up through POST /api/auth/sign-up/email. */
export async function signUp(api: TestApi, options: { email?: string; name?: string; password?: string } = {}): Promise<TestUser> {
  const email = options.email ?? `${uniqueSlug('user')}@example.com`;
  const name = options.name ?? 'Test User';
  const password = options.password ?? TEST_PASSWORD;
  const response = await api.call('POST', '/api/auth/sign-up/email', { body: { email, name, password } });
  expect(response.status, JSON.stringify(response.body)).toBe(200);
  return sessionOf(response, { email: email.toLowerCase(), name, password });
}

/** Signs an existing user in through POST /api/auth/sign-in/email: a new session. */
export async function signIn(api: TestApi, user: Pick<TestUser, 'email' | 'password' | 'name'>): Promise<TestUser> {
  const response = await api.call('POST', '/api/auth/sign-in/email', { body: { email: user.email, password: user.password } });
  expect(response.status, JSON.stringify(response.body)).toBe(200);
  return sessionOf(response, user);
}

function sessionOf(
  response: { body: any; headers: Headers },
  user: Pick<TestUser, 'email' | 'password' | 'name'>,
): TestUser {
  const token = response.headers.get('set-auth-token');
  const setCookie = response.headers.get('set-cookie') ?? '';
  const cookie = setCookie.split(';')[0]!;
  expect(token, 'set-auth-token header').toBeTruthy();
  expect(cookie).toMatch(/session_token=/);
  return { id: response.body.user.id, email: user.email, name: user.name, password: user.password, token: token!, cookie };
}

/** An organization created by `user` (its owner), with one project. */
export async function createUserTenant(
  api: TestApi,
  user: TestUser,
  options: { org?: string; project?: string } = {},
): Promise<{ org: { id: string; slug: string }; project: { id: string; slug: string } }> {
  const slug = options.org ?? uniqueSlug('org');
  const org = await api.call('POST', '/orgs', { token: user.token, body: { name: `Org ${slug}`, slug } });
  expect(org.status, JSON.stringify(org.body)).toBe(201);
  const project = await api.call('POST', `/orgs/${slug}/projects`, {
    token: user.token,
    body: { name: 'Project', slug: options.project ?? 'platform' },
  });
  expect(project.status, JSON.stringify(project.body)).toBe(201);
  return { org: org.body, project: project.body };
}

/** The first URL in a mail's text. */
export function linkIn(text: string): string {
  const match = /https?:\/\/\S+/.exec(text);
  expect(match, `a link in: ${text}`).not.toBeNull();
  return match![0];
}

/**
 * A signed-up user whose address is verified: signs up, then follows the
 * verification link mailed to it (Better Auth's GET /api/auth/verify-email).
 * The link is absolute (AUTH_URL or API_BASE_URL); its path and query are
 * called on the in-process app. The returned session sees the verified
 * address at once (the session lookup reads the user row).
 */
export async function verifiedUser(api: TestApi, email: string, options: { name?: string; password?: string } = {}): Promise<TestUser> {
  const user = await signUp(api, { email, ...options });
  const mail = api.mails.findLast((message) => message.to.toLowerCase() === user.email);
  expect(mail, `a verification mail to ${user.email}`).toBeDefined();
  const link = new URL(linkIn(mail!.text));
  expect(link.pathname).toBe('/api/auth/verify-email');
  const verified = await api.call('GET', `${link.pathname}${link.search}`);
  expect(verified.status, JSON.stringify(verified.body)).toBeLessThan(400);
  return user;
}
