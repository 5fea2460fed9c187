import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessions, users } from '../../src/db/schema';
import { eq } from 'drizzle-orm';
import { createTestApi, TEST_API_BASE_URL, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createUserTenant, linkIn, signIn, signUp, TEST_PASSWORD } from '../support/people';
import { SmtpSink } from '../support/smtp-sink';

/**
 * User sessions (Better Auth at /api/auth): sign-up, sign-in, the session as
 * a cookie and as a Bearer value, verification mail, sign-out, and the rules
 * around them: forged values refused before any lookup, CSRF for cookie
 * writes, the API's error shape on the auth routes.
 */
describe('user sessions', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi({ env: { TRUSTED_ORIGINS: 'https://ui.example.com' } });
  });
  afterAll(() => api.close());

  it('signs up, then serves the session as a Bearer value and as a cookie', async () => {
    const user = await signUp(api, { email: `Mixed.${uniqueSlug('case')}@Example.com` });
    expect(user.email).toBe(user.email.toLowerCase());
    for (const headers of [{ authorization: `Bearer ${user.token}` }, { cookie: user.cookie }] as Record<string, string>[]) {
      const session = await api.call('GET', '/api/auth/get-session', { headers });
      expect(session.status).toBe(200);
      expect(session.body.user).toMatchObject({ id: user.id, email: user.email, emailVerified: false });
      // the session's own token is never echoed: a script in a page could read it where the cookie is HttpOnly
      expect(session.body.session.token).toBeUndefined();
      expect(JSON.stringify(session.body)).not.toContain(user.token.slice(0, 32));
    }
  });

  it('mails a verification link; following it verifies the address', async () => {
    const user = await signUp(api);
    const mail = api.mails.find((message) => message.to === user.email);
    expect(mail?.subject).toMatch(/verify/i);
    const link = new URL(linkIn(mail!.text));
    expect(link.origin).toBe(TEST_API_BASE_URL);
    const followed = await api.call('GET', `${link.pathname}${link.search}`);
    expect([200, 302]).toContain(followed.status);
    const [row] = await api.db.select({ verified: users.emailVerified }).from(users).where(eq(users.id, user.id));
    expect(row!.verified).toBe(true);
  });

  it("lets a non-browser client (Node or Deno fetch: Sec-Fetch-Mode alone, no Origin) sign up and in; a browser's request is still checked", async () => {
    const email = `${uniqueSlug('script')}@example.com`;
    const nodeFetch = { 'sec-fetch-mode': 'cors' };
    const signedUp = await api.call('POST', '/api/auth/sign-up/email', { headers: nodeFetch, body: { email, password: TEST_PASSWORD, name: 'Script' } });
    expect(signedUp.status, JSON.stringify(signedUp.body)).toBe(200);
    const signedIn = await api.call('POST', '/api/auth/sign-in/email', { headers: nodeFetch, body: { email, password: TEST_PASSWORD } });
    expect(signedIn.status).toBe(200);
    // a browser's request (Sec-Fetch-Site with the others) keeps them: Better Auth then wants its Origin
    const browser = await api.call('POST', '/api/auth/sign-up/email', {
      headers: { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' },
      body: { email: `${uniqueSlug('browser')}@example.com`, password: TEST_PASSWORD, name: 'Browser' },
    });
    expectError(browser, 403, 'missing_or_null_origin');
  });

  it('refuses hostile text in auth bodies at the edge, as everywhere else: NUL, lone surrogates, deep JSON, broken JSON', async () => {
    const sign = (rawBody: string) => api.call('POST', '/api/auth/sign-up/email', { rawBody, headers: { 'content-type': 'application/json' } });
    const errorsBefore = api.logs.filter((line) => line.includes('"level":"error"')).length;
    expectError(await sign(`{"email":"${uniqueSlug('nul')}@example.com","password":"${TEST_PASSWORD}","name":"x\\u0000y"}`), 400, 'validation_failed');
    expectError(await sign(`{"email":"${uniqueSlug('sur')}@example.com","password":"${TEST_PASSWORD}","name":"x\\ud800y"}`), 400, 'validation_failed');
    expectError(await sign(`${'['.repeat(10_000)}${']'.repeat(10_000)}`), 400, 'validation_failed');
    expectError(await sign('{"email":'), 400, 'invalid_json');
    expect(api.logs.filter((line) => line.includes('"level":"error"')).length).toBe(errorsBefore);
  });

  it('answers auth errors in the API shape: a wrong password, a taken address, a short password', async () => {
    const user = await signUp(api);
    expectError(
      await api.call('POST', '/api/auth/sign-in/email', { body: { email: user.email, password: 'not the password at all' } }),
      401,
      'invalid_email_or_password',
    );
    const taken = await api.call('POST', '/api/auth/sign-up/email', { body: { email: user.email, password: TEST_PASSWORD, name: 'Again' } });
    expect(taken.status).toBeGreaterThanOrEqual(400);
    expect(taken.status).toBeLessThan(500);
    expect(typeof taken.body.error).toBe('string');
    expect(typeof taken.body.code).toBe('string');
    const short = await api.call('POST', '/api/auth/sign-up/email', { body: { email: `${uniqueSlug('s')}@example.com`, password: 'short', name: 'S' } });
    expect(short.status).toBe(400);
    expect(short.body.code).toBe('password_too_short');
  });

  it('gives each sign-in its own session; signing out ends only that one', async () => {
    const first = await signUp(api);
    const second = await signIn(api, first);
    expect(second.token).not.toBe(first.token);
    const tenant = await createUserTenant(api, first);
    expect((await api.call('POST', '/api/auth/sign-out', { token: first.token })).status).toBe(200);
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: first.token }), 401, 'unauthorized');
    expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: second.token })).status).toBe(200);
  });

  it('refuses a forged or malformed session value before any lookup', async () => {
    const user = await signUp(api);
    const tenant = await createUserTenant(api, user);
    const before = api.databaseLeases();
    const forged = `${user.token.slice(0, 32)}.${'A'.repeat(43)}=`;
    for (const token of [forged, 'not-a-session', `${user.token}x`, user.token.slice(0, 32)]) {
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token }), 401, 'unauthorized');
    }
    expect(api.databaseLeases()).toBe(before);
  });

  it('refuses an expired session', async () => {
    const user = await signUp(api);
    const tenant = await createUserTenant(api, user);
    await api.db.update(sessions).set({ expiresAt: new Date(Date.now() - 1000) }).where(eq(sessions.userId, user.id));
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: user.token }), 401, 'unauthorized');
  });

  describe('CSRF: cookie-authenticated writes', () => {
    it('refuses a write without Origin or from an untrusted one, with a clear 403', async () => {
      const user = await signUp(api);
      const tenant = await createUserTenant(api, user);
      const write = (headers: Record<string, string>) =>
        api.call('POST', `/orgs/${tenant.org.slug}/projects`, { headers: { cookie: user.cookie, ...headers }, body: { name: 'X', slug: uniqueSlug('x') } });
      const missing = await write({});
      expectError(missing, 403, 'origin_not_trusted');
      expect(missing.body.error).toMatch(/Origin/);
      const evil = await write({ origin: 'https://evil.example' });
      expectError(evil, 403, 'origin_not_trusted');
      expect(evil.body.error).toMatch(/TRUSTED_ORIGINS/);
      // nothing was written by the refused requests
      const projects = await api.call('GET', `/orgs/${tenant.org.slug}/projects`, { token: user.token });
      expect(projects.body).toHaveLength(1);
    });

    it('accepts the API’s own origin and TRUSTED_ORIGINS; reads and Bearer sessions are not checked', async () => {
      const user = await signUp(api);
      const tenant = await createUserTenant(api, user);
      for (const origin of [TEST_API_BASE_URL, 'https://ui.example.com']) {
        const created = await api.call('POST', `/orgs/${tenant.org.slug}/projects`, {
          headers: { cookie: user.cookie, origin },
          body: { name: 'X', slug: uniqueSlug('x') },
        });
        expect(created.status).toBe(201);
      }
      const read = await api.call('GET', `/orgs/${tenant.org.slug}/projects`, { headers: { cookie: user.cookie, origin: 'https://evil.example' } });
      expect(read.status).toBe(200);
      const bearer = await api.call('POST', `/orgs/${tenant.org.slug}/projects`, {
        token: user.token,
        headers: { origin: 'https://evil.example' },
        body: { name: 'X', slug: uniqueSlug('x') },
      });
      expect(bearer.status).toBe(201);
    });
  });

  describe('users and organizations', () => {
    it('makes the creator the owner; a project’s routes serve the user by its organization role', async () => {
      const user = await signUp(api);
      const tenant = await createUserTenant(api, user);
      const type = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/entity-types`, {
        token: user.token,
        body: { kind: 'EntityType', name: 'service', states: ['up', 'down'], initialState: 'up' },
      });
      expect(type.status, JSON.stringify(type.body)).toBe(201);
      const entity = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities`, {
        token: user.token,
        body: { kind: 'Entity', name: 'api', entityType: 'service' },
      });
      expect(entity.status, JSON.stringify(entity.body)).toBe(201);
      const read = await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities/api`, { token: user.token });
      expect(read.status).toBe(200);
      expect(read.body.name).toBe('api');
    });

    it('hides other organizations from a user (404), by slug and by id', async () => {
      const owner = await signUp(api);
      const stranger = await signUp(api);
      const tenant = await createUserTenant(api, owner);
      for (const ref of [tenant.org.slug, tenant.org.id]) {
        expectError(await api.call('GET', `/orgs/${ref}`, { token: stranger.token }), 404, 'not_found');
        expectError(await api.call('GET', `/orgs/${ref}/projects`, { token: stranger.token }), 404, 'not_found');
      }
      expectError(await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token: stranger.token }), 404, 'not_found');
      expectError(await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities`, { token: stranger.token }), 404, 'not_found');
    });

    it('lets a user mint a token, marked personal when asked; a service token cannot mint a personal one', async () => {
      const user = await signUp(api);
      const tenant = await createUserTenant(api, user);
      const path = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
      const personal = await api.call('POST', path, { token: user.token, body: { name: 'mine', role: 'admin', personal: true } });
      expect(personal.status).toBe(201);
      expect(personal.body.personal).toBe(true);
      const viaToken = await api.call('POST', path, { token: personal.body.token, body: { name: 'x', personal: true } });
      expectError(viaToken, 400, 'validation_failed');
      expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: personal.body.token })).status).toBe(200);
    });
  });

  it('settles who may call a user-only route before reading what is sent: a token with a bad request is 401, not 400', async () => {
    const user = await signUp(api);
    const tenant = await createUserTenant(api, user);
    const minted = await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
      token: user.token,
      body: { name: 'owner', role: 'owner' },
    });
    const bad: [string, string, unknown][] = [
      ['GET', '/notifications?limit=abc', undefined],
      ['PUT', '/user/preferences/theme', { value: 'not an object' }],
      ['POST', `/orgs/${tenant.org.slug}/users`, { email: 'not an address' }],
      ['PATCH', `/orgs/${tenant.org.slug}/users/${user.id}`, { role: 'emperor' }],
      ['GET', '/admin/audit?limit=-1', undefined],
    ];
    for (const [method, path, body] of bad) {
      expectError(await api.call(method, path, { token: minted.body.token, body }), 401, 'unauthorized');
      expectError(await api.call(method, path, { body }), 401, 'unauthorized');
    }
    // a signed-in user gets the validation error, and a non-super-admin the 403, as before
    expectError(await api.call('GET', '/notifications?limit=abc', { token: user.token }), 400, 'validation_failed');
    expectError(await api.call('GET', '/admin/audit?limit=-1', { token: user.token }), 403, 'forbidden');
  });

  it('keeps service tokens working beside sessions, and bootstrap mode refuses a stale cookie', async () => {
    const fresh = await createTestApi();
    try {
      const tenant = await createTenant(fresh);
      const stale = 'cellplane.session_token=' + encodeURIComponent(`${'a'.repeat(32)}.${'B'.repeat(43)}=`);
      // bootstrap mode is open, but a session that is presented must be valid
      expectError(await fresh.call('GET', `/orgs/${tenant.org.slug}`, { headers: { cookie: stale } }), 401, 'unauthorized');
      const token = await mintToken(fresh, tenant, { role: 'owner' });
      expect((await fresh.call('GET', `/orgs/${tenant.org.slug}`, { token })).status).toBe(200);
    } finally {
      await fresh.close();
    }
  });

  it('counts a session’s requests against its own rate-limit budget', async () => {
    const limited = await createTestApi({ env: { RATE_LIMIT_PER_MINUTE: '5' } });
    try {
      const user = await signUp(limited);
      let last;
      for (let i = 0; i < 6; i += 1) last = await limited.call('GET', '/api/auth/get-session', { token: user.token });
      expectError(last!, 429, 'rate_limited');
      // a new session of the same user has its own budget (the sign-in itself counts against the address)
      const other = await signIn(limited, user);
      expect((await limited.call('GET', '/api/auth/get-session', { token: other.token })).status).toBe(200);
    } finally {
      await limited.close();
    }
  });

  it('sends the verification link over real SMTP; following it verifies the address', async () => {
    const sink = await SmtpSink.start();
    const mailing = await createTestApi({ env: { SMTP_URL: sink.url } });
    try {
      const user = await signUp(mailing);
      const mail = await sink.waitFor((m) => m.envelope.to.includes(user.email) && /verify/i.test(m.subject));
      const link = new URL(linkIn(mail.text));
      expect(link.pathname).toBe('/api/auth/verify-email');
      expect([200, 302]).toContain((await mailing.call('GET', `${link.pathname}${link.search}`)).status);
      const [row] = await mailing.db.select({ verified: users.emailVerified }).from(users).where(eq(users.id, user.id));
      expect(row!.verified).toBe(true);
      // sent, not kept: the test api's own capture stays empty when SMTP_URL is set
      expect(mailing.mails).toEqual([]);
    } finally {
      await mailing.close();
      await sink.close();
    }
  });
});
