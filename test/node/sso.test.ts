import { and, desc, eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, auditEvents, notifications, orgMembers, sessions, ssoProviders, users } from '../../src/db/schema';
import { expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, TEST_API_BASE_URL, type ApiResponse, type TestApi } from '../support/node-app';
import { startOidcProvider, type TestOidcProvider } from '../support/oidc-provider';
import { createUserTenant, linkIn, signIn, signUp, TEST_PASSWORD, verifiedUser, type TestUser } from '../support/people';

/**
 * SSO (DECISIONS §5, §8; SPEC sso-extras; docs/people/sso.md), end to end
 * against a real OpenID Provider on 127.0.0.1 (test/support/oidc-provider.ts):
 * the API reads its discovery document, exchanges the code at its token
 * endpoint (PKCE, client secret), checks the ID token against its JWKS and
 * reads its userinfo, all over real HTTP. The browser's part is played by
 * the test: the sign-in's state cookie is carried to the callback, which
 * is called on the in-process app at the path the provider redirects to
 * (the API's public base URL is http://cellplane.test, so the redirect URI
 * registered at the provider is that, and the provider never calls it).
 */

/** Provider ids the test provider's client accepts as redirect URIs (exact match, as real providers require). */
const PROVIDER_IDS = Array.from({ length: 90 }, (_, i) => `idp-${i + 1}`);
const BOSS_PROVIDER = 'idp-boss';
/**
 * boss.test is the super-admins' domain: chief registers its provider (a
 * super-admin by a mailed link), root and lazy sign in through it.
 * guarded.test holds a super-admin nobody registers a provider for.
 */
const SUPER_ADMINS = ['root@boss.test', 'lazy@boss.test', 'chief@boss.test', 'ops@guarded.test'];
const callbackPath = (providerId: string) => `/api/auth/sso/callback/${providerId}`;

type Tenant = Awaited<ReturnType<typeof createUserTenant>>;

/** The end of an SSO sign-in: the callback's answer and, when it signed someone in, their session. */
interface SsoOutcome {
  callback: ApiResponse;
  /** Where the callback sent the browser. */
  location: URL;
  /** The session's Bearer value (`set-auth-token`), when one was made. */
  token?: string;
  userId?: string;
}

describe('SSO through a real OpenID Provider', () => {
  let api: TestApi;
  let op: TestOidcProvider;
  let nextProvider = 0;
  const takeProviderId = () => PROVIDER_IDS[nextProvider++]!;

  beforeAll(async () => {
    op = await startOidcProvider({
      redirectUris: [...PROVIDER_IDS, BOSS_PROVIDER].map((id) => `${TEST_API_BASE_URL}${callbackPath(id)}`),
    });
    // Better Auth fetches an IdP on a private address (loopback here) only from a trusted origin
    api = await createTestApi({ env: { TRUSTED_ORIGINS: op.issuer, SUPER_ADMIN_EMAILS: SUPER_ADMINS.join(',') } });
    // the client secret must reach the provider's token endpoint and nowhere else
    api.secretScan.register(op.clientSecret, 'the OIDC client secret');
  });
  afterAll(async () => {
    await api?.close();
    await op?.close();
  });

  const registration = (providerId: string, domain: string, extra: Record<string, unknown> = {}) => ({
    providerId,
    issuer: op.issuer,
    domain,
    clientId: op.clientId,
    clientSecret: op.clientSecret,
    ...extra,
  });

  /**
   * A fresh organization of a fresh owner, with a provider registered for
   * `domain` (default `<providerId>.test`): the owner's verified address is
   * there, which is what lets them register it.
   */
  async function orgWithProvider(
    providerId = takeProviderId(),
    domain = `${providerId}.test`,
  ): Promise<{ owner: TestUser; tenant: Tenant; providerId: string; domain: string }> {
    const owner = await verifiedUser(api, `owner@${domain}`, { name: 'Owner' });
    const tenant = await createUserTenant(api, owner);
    const registered = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, { token: owner.token, body: registration(providerId, domain) });
    expect(registered.status, JSON.stringify(registered.body)).toBe(201);
    return { owner, tenant, providerId, domain };
  }

  /** Adds an existing user to an organization with a role, through the API. */
  async function addMember(as: TestUser, tenant: Tenant, user: { email: string; name: string }, role: 'member' | 'admin' | 'owner') {
    const added = await api.call('POST', `/orgs/${tenant.org.slug}/users`, { token: as.token, body: { email: user.email, name: user.name, role } });
    expect(added.status, JSON.stringify(added.body)).toBe(201);
    return added.body;
  }

  /**
   * Signs in through a provider as a browser would: POST /api/auth/sign-in/sso
   * answers the authorization URL and sets the state cookie; the provider
   * signs `email` in and sends the browser back with a code; the callback,
   * given the state cookie, exchanges it and answers with the session.
   */
  async function ssoSignIn(
    providerId: string,
    email: string,
    options: { keepStateCookie?: boolean; byAddress?: boolean } = {},
  ): Promise<SsoOutcome> {
    // by provider id (the login hint names the account), or by address: the provider is found by its domain
    const which = options.byAddress ? { email } : { providerId, loginHint: email };
    const start = await api.call('POST', '/api/auth/sign-in/sso', {
      body: { ...which, callbackURL: '/signed-in', errorCallbackURL: '/sign-in-failed' },
    });
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    expect(start.body.redirect).toBe(true);
    const stateCookie = start.headers
      .getSetCookie()
      .map((line) => line.split(';')[0]!)
      .join('; ');
    expect(stateCookie).toMatch(/^cellplane\.state=/);
    const back = await op.authorize(start.body.url);
    expect(`${back.origin}${back.pathname}`).toBe(`${TEST_API_BASE_URL}${callbackPath(providerId)}`);
    const callback = await api.call('GET', `${back.pathname}${back.search}`, {
      headers: options.keepStateCookie === false ? {} : { cookie: stateCookie },
    });
    expect(callback.status).toBe(302);
    const location = new URL(callback.headers.get('location')!, TEST_API_BASE_URL);
    const token = callback.headers.get('set-auth-token') ?? undefined;
    if (!token) return { callback, location };
    const session = await api.call('GET', '/api/auth/get-session', { token });
    expect(session.status).toBe(200);
    return { callback, location, token, userId: session.body.user.id };
  }

  const ssoSessionRow = (token: string) =>
    api.db
      .select({ ssoProviderId: sessions.ssoProviderId, userId: sessions.userId })
      .from(sessions)
      .where(eq(sessions.token, token.split('.')[0]!))
      .then((rows) => rows[0]);

  const membership = (orgId: string, userId: string) =>
    api.db
      .select({ role: orgMembers.role })
      .from(orgMembers)
      .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, userId)))
      .then((rows) => rows[0]?.role ?? null);

  const auditOf = (orgId: string, action: string) =>
    api.db.select().from(auditEvents).where(and(eq(auditEvents.orgId, orgId), eq(auditEvents.action, action))).orderBy(desc(auditEvents.at));

  describe('registering a provider', () => {
    it('lets an owner register one: the row is bound to the organization, audited, and the secret is never returned', async () => {
      const providerId = takeProviderId();
      const owner = await verifiedUser(api, `owner@${providerId}.test`);
      const tenant = await createUserTenant(api, owner);
      const response = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: owner.token,
        body: registration(providerId, `${providerId}.test`),
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body).toEqual({
        providerId,
        issuer: op.issuer,
        domain: `${providerId}.test`,
        forceSso: false,
        redirectUri: `${TEST_API_BASE_URL}${callbackPath(providerId)}`,
        createdAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/),
      });
      expect(JSON.stringify(response.body)).not.toContain(op.clientSecret);
      // discovery went to the provider itself, over HTTP
      expect(op.hits('/.well-known/openid-configuration')).toBeGreaterThan(0);
      const [row] = await api.db.select().from(ssoProviders).where(eq(ssoProviders.providerId, providerId));
      expect(row).toMatchObject({ organizationId: tenant.org.id, userId: owner.id, forceSso: false });
      expect(JSON.parse(row!.oidcConfig!)).toMatchObject({
        issuer: op.issuer,
        clientId: op.clientId,
        pkce: true,
        authorizationEndpoint: `${op.issuer}/auth`,
        tokenEndpoint: `${op.issuer}/token`,
        jwksEndpoint: `${op.issuer}/jwks`,
        userInfoEndpoint: `${op.issuer}/me`,
      });
      const [audit] = await auditOf(tenant.org.id, 'sso.registered');
      expect(audit).toMatchObject({ actorType: 'user', actorId: owner.id, targetType: 'sso_provider', targetId: providerId });
      expect(JSON.stringify(audit!.data)).not.toContain(op.clientSecret);
    });

    it('lets an admin register one; a member gets 403, a non-member 404, no session or a service token 401', async () => {
      const owner = await verifiedUser(api, `owner@${uniqueSlug('org')}.test`);
      const tenant = await createUserTenant(api, owner);
      // everyone's address is verified and in the domain they register: only the role decides
      const adminProvider = takeProviderId();
      const admin = await verifiedUser(api, `admin@${adminProvider}.test`);
      const memberProvider = takeProviderId();
      const member = await verifiedUser(api, `member@${memberProvider}.test`);
      const outsiderProvider = takeProviderId();
      const outsider = await verifiedUser(api, `outsider@${outsiderProvider}.test`);
      await createUserTenant(api, outsider);
      await addMember(owner, tenant, admin, 'admin');
      await addMember(owner, tenant, member, 'member');
      const serviceToken = await mintToken(api, tenant, { role: 'owner', as: owner.token });
      const path = `/orgs/${tenant.org.slug}/sso-providers`;
      const body = (providerId: string) => registration(providerId, `${providerId}.test`);
      expectError(await api.call('POST', path, { token: member.token, body: body(memberProvider) }), 403, 'forbidden');
      expectError(await api.call('POST', path, { token: outsider.token, body: body(outsiderProvider) }), 404, 'not_found');
      expectError(await api.call('POST', path, { body: body(adminProvider) }), 401, 'unauthorized');
      expectError(await api.call('POST', path, { token: serviceToken, body: body(adminProvider) }), 401, 'unauthorized');
      expect(await api.db.select().from(ssoProviders).where(eq(ssoProviders.organizationId, tenant.org.id))).toEqual([]);
      const byAdmin = await api.call('POST', `/orgs/${tenant.org.id}/sso-providers`, { token: admin.token, body: body(adminProvider) });
      expect(byAdmin.status, JSON.stringify(byAdmin.body)).toBe(201);
    });

    it('takes the endpoints as given instead of discovering them', async () => {
      const providerId = takeProviderId();
      const owner = await verifiedUser(api, `owner@${providerId}.test`);
      const tenant = await createUserTenant(api, owner);
      const discoveries = op.hits('/.well-known/openid-configuration');
      const response = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: owner.token,
        body: registration(providerId, `${providerId}.test`, {
          endpoints: { authorization: `${op.issuer}/auth`, token: `${op.issuer}/token`, jwks: `${op.issuer}/jwks`, userInfo: `${op.issuer}/me` },
          scopes: ['openid', 'email'],
        }),
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(op.hits('/.well-known/openid-configuration')).toBe(discoveries);
      op.addAccount({ email: `given@${providerId}.test`, name: 'Given', emailVerified: true });
      const signedIn = await ssoSignIn(providerId, `given@${providerId}.test`);
      expect(signedIn.token).toBeDefined();
      expect(await membership(tenant.org.id, signedIn.userId!)).toBe('member');
    });

    it('refuses a taken provider id or domain (409), an untrusted issuer (400), a malformed body (400), and writes nothing', async () => {
      const first = takeProviderId();
      // the first provider speaks for a subdomain, so that a rival at the parent can claim every shape of overlap
      const parent = `${first}.test`;
      const { tenant, providerId, domain } = await orgWithProvider(first, `eu.${parent}`);
      const fresh = takeProviderId();
      const other = await verifiedUser(api, `other@${fresh}.test`);
      const otherTenant = await createUserTenant(api, other);
      const path = `/orgs/${otherTenant.org.slug}/sso-providers`;
      expectError(await api.call('POST', path, { token: other.token, body: registration(providerId, `${fresh}.test`) }), 409, 'already_exists');
      // the same domain, a subdomain, a parent, a list holding one: one provider speaks for an address
      const rival = await verifiedUser(api, `rival@${parent}`);
      const rivalTenant = await createUserTenant(api, rival);
      for (const taken of [domain, `de.${domain}`, parent, `us.${parent},${domain}`]) {
        const refused = await api.call('POST', `/orgs/${rivalTenant.org.slug}/sso-providers`, { token: rival.token, body: registration(fresh, taken) });
        expectError(refused, 409, 'already_exists');
      }
      const untrusted = await api.call('POST', path, {
        token: other.token,
        body: { ...registration(fresh, `${fresh}.test`), issuer: 'http://127.0.0.1:9/not-trusted' },
      });
      expectError(untrusted, 400, 'validation_failed');
      expect(untrusted.body.error).toMatch(/discovery/i);
      for (const bad of [
        { ...registration('Bad Id', `${fresh}.test`) },
        { ...registration(fresh, 'not a domain') },
        { ...registration(fresh, `${fresh}.test`), organizationId: tenant.org.id },
        { ...registration(fresh, `${fresh}.test`), scopes: ['email'] },
      ]) {
        expectError(await api.call('POST', path, { token: other.token, body: bad }), 400, 'validation_failed');
      }
      expect(await api.db.select().from(ssoProviders).where(inArray(ssoProviders.organizationId, [otherTenant.org.id, rivalTenant.org.id]))).toEqual([]);
      expect((await api.db.select().from(ssoProviders).where(eq(ssoProviders.providerId, providerId)))[0]!.organizationId).toBe(tenant.org.id);
    });

    it('gives a domain to one of two organizations registering it at once', async () => {
      const ids = [takeProviderId(), takeProviderId()];
      const domain = `contested-${ids[0]}.test`;
      // each proves what it claims: one has a mailbox at the domain, the other at its subdomain
      const [first, second] = await Promise.all([verifiedUser(api, `first@${domain}`), verifiedUser(api, `second@eu.${domain}`)]);
      const tenants = await Promise.all([createUserTenant(api, first!), createUserTenant(api, second!)]);
      const answers = await Promise.all(
        [first!, second!].map((user, i) =>
          api.call('POST', `/orgs/${tenants[i]!.org.slug}/sso-providers`, {
            token: user.token,
            // one registers the domain, the other a subdomain of it: the same addresses
            body: registration(ids[i]!, i === 0 ? domain : `eu.${domain}`),
          }),
        ),
      );
      expect(answers.map((answer) => answer.status).sort()).toEqual([201, 409]);
      expectError(answers.find((answer) => answer.status === 409)!, 409, 'already_exists');
      const rows = await api.db.select().from(ssoProviders).where(inArray(ssoProviders.providerId, ids));
      expect(rows).toHaveLength(1);
    });

    it("closes Better Auth's own provider-management endpoints over HTTP: 404 in the API's error shape", async () => {
      const { owner, tenant, providerId } = await orgWithProvider();
      const attempts: [string, string, unknown][] = [
        ['POST', '/api/auth/sso/register', { ...registration(takeProviderId(), 'sneaky.test'), organizationId: tenant.org.id }],
        ['GET', '/api/auth/sso/providers', undefined],
        ['GET', `/api/auth/sso/get-provider?providerId=${providerId}`, undefined],
        ['POST', '/api/auth/sso/update-provider', { providerId, domain: 'sneaky.test' }],
        ['POST', '/api/auth/sso/delete-provider', { providerId }],
      ];
      for (const [method, path, body] of attempts) {
        expectError(await api.call(method, path, { token: owner.token, body }), 404, 'not_found');
      }
      // the plugin would look a slug up in a table Cellplane does not have
      expectError(
        await api.call('POST', '/api/auth/sign-in/sso', { body: { organizationSlug: tenant.org.slug, callbackURL: '/signed-in' } }),
        400,
        'validation_failed',
      );
      const [row] = await api.db.select().from(ssoProviders).where(eq(ssoProviders.providerId, providerId));
      expect(row!.domain).toBe(`${providerId}.test`);
      expect(await api.db.select().from(ssoProviders).where(eq(ssoProviders.domain, 'sneaky.test'))).toEqual([]);
    });
  });

  describe('who may claim a domain (account pre-hijacking)', () => {
    const providersOf = (orgId: string) => api.db.select().from(ssoProviders).where(eq(ssoProviders.organizationId, orgId));

    it("refuses an owner whose own address is unverified (403): nothing fetched, nothing written", async () => {
      const providerId = takeProviderId();
      const owner = await signUp(api, { email: `owner@${providerId}.test` });
      const tenant = await createUserTenant(api, owner);
      const discoveries = op.hits('/.well-known/openid-configuration');
      const refused = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: owner.token,
        body: registration(providerId, `${providerId}.test`),
      });
      expectError(refused, 403, 'forbidden');
      expect(refused.body.error).toMatch(/verify your address/);
      expect(op.hits('/.well-known/openid-configuration')).toBe(discoveries);
      expect(await providersOf(tenant.org.id)).toEqual([]);
      expect(await auditOf(tenant.org.id, 'sso.registered')).toEqual([]);
    });

    it("refuses a verified owner a domain outside their address's host: another domain, a parent, a look-alike, a list holding one", async () => {
      const base = `${takeProviderId()}.test`;
      const owner = await verifiedUser(api, `alice@eng.${base}`);
      const tenant = await createUserTenant(api, owner);
      const path = `/orgs/${tenant.org.slug}/sso-providers`;
      const providerId = takeProviderId();
      for (const domain of [
        `other-${base}`, // another domain
        base, // the parent: a mailbox at eng.<base> says nothing about who else is at <base>
        `xeng.${base}`, // ends like the host, is not under it
        `ng.${base}`,
        `eu.eng.${base},${base}`, // one unproven domain refuses the list
      ]) {
        const refused = await api.call('POST', path, { token: owner.token, body: registration(providerId, domain) });
        expectError(refused, 403, 'forbidden');
        expect(refused.body.error).toMatch(/verified address/);
      }
      expect(await providersOf(tenant.org.id)).toEqual([]);
    });

    it("lets a verified owner register their address's host, or subdomains of it (201)", async () => {
      const base = `${takeProviderId()}.test`;
      const owner = await verifiedUser(api, `alice@${base}`);
      const tenant = await createUserTenant(api, owner);
      const path = `/orgs/${tenant.org.slug}/sso-providers`;
      const subdomains = takeProviderId();
      const ofSubdomains = await api.call('POST', path, { token: owner.token, body: registration(subdomains, `eu.${base},us.${base}`) });
      expect(ofSubdomains.status, JSON.stringify(ofSubdomains.body)).toBe(201);
      expect(ofSubdomains.body.domain).toBe(`eu.${base},us.${base}`);
      // the host itself overlaps them now: one provider per address
      expectError(await api.call('POST', path, { token: owner.token, body: registration(takeProviderId(), base) }), 409, 'already_exists');

      const other = `${takeProviderId()}.test`;
      const bob = await verifiedUser(api, `bob@${other}`);
      const bobs = await createUserTenant(api, bob);
      const ofHost = await api.call('POST', `/orgs/${bobs.org.slug}/sso-providers`, { token: bob.token, body: registration(takeProviderId(), other) });
      expect(ofHost.status, JSON.stringify(ofHost.body)).toBe(201);
    });

    it('counts an invitation link as proof: a provisioned admin who set a password through it registers their domain', async () => {
      const { owner, tenant } = await orgWithProvider();
      const providerId = takeProviderId();
      const email = `newcomer@${providerId}.test`;
      await addMember(owner, tenant, { email, name: 'Newcomer' }, 'admin');
      // the invitation link checks its token and lands with it; the landing page sets the password with it
      const invitation = api.mails.findLast((mail) => mail.to === email);
      expect(invitation, `an invitation to ${email}`).toBeDefined();
      const link = new URL(linkIn(invitation!.text));
      const followed = await api.call('GET', `${link.pathname}${link.search}`);
      expect(followed.status).toBe(302);
      const token = new URL(followed.headers.get('location')!).searchParams.get('token');
      expect(token).toBeTruthy();
      expect((await api.call('POST', '/api/auth/reset-password', { body: { newPassword: TEST_PASSWORD, token } })).status).toBe(200);
      const newcomer = await signIn(api, { email, name: 'Newcomer', password: TEST_PASSWORD });
      const registered = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: newcomer.token,
        body: registration(providerId, `${providerId}.test`),
      });
      expect(registered.status, JSON.stringify(registered.body)).toBe(201);
    });

    it("refuses the pre-hijacking attack: an organization cannot front a domain it has no mailbox at, so its IdP never creates the victim's account", async () => {
      const victimDomain = `victim-${uniqueSlug('v')}.test`;
      const attackerDomain = `attacker-${uniqueSlug('a')}.test`;
      const mallory = await verifiedUser(api, `mallory@${attackerDomain}`);
      const attackerOrg = await createUserTenant(api, mallory);
      const providerId = takeProviderId();
      for (const domain of [victimDomain, `${attackerDomain},${victimDomain}`, `eu.${victimDomain}`]) {
        const refused = await api.call('POST', `/orgs/${attackerOrg.org.slug}/sso-providers`, { token: mallory.token, body: registration(providerId, domain) });
        expectError(refused, 403, 'forbidden');
      }
      expect(await providersOf(attackerOrg.org.id)).toEqual([]);
      // the attacker's IdP is ready to assert the victim, verified; no provider speaks for the domain, so no sign-in starts
      op.addAccount({ email: `alice@${victimDomain}`, name: 'Not Alice', emailVerified: true });
      const start = await api.call('POST', '/api/auth/sign-in/sso', { body: { email: `alice@${victimDomain}`, callbackURL: '/signed-in' } });
      expectError(start, 404, 'not_found');
      expect(await api.db.select().from(users).where(eq(users.email, `alice@${victimDomain}`))).toEqual([]);
      // the real Alice signs up later and her account is hers alone: no provider linked to it
      const alice = await verifiedUser(api, `alice@${victimDomain}`, { name: 'Alice' });
      const linked = await api.db.select({ providerId: accounts.providerId }).from(accounts).where(eq(accounts.userId, alice.id));
      expect(linked.map((row) => row.providerId)).toEqual(['credential']);
    });

    it("keeps the super-admins' domain for super-admins: a verified member of that domain who is not one gets 403", async () => {
      const mallory = await verifiedUser(api, 'mallory@guarded.test');
      const tenant = await createUserTenant(api, mallory);
      const refused = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: mallory.token,
        body: registration(takeProviderId(), 'guarded.test'),
      });
      expectError(refused, 403, 'forbidden');
      expect(refused.body.error).toMatch(/super-admin/);
      expect(await providersOf(tenant.org.id)).toEqual([]);
      // a subdomain holding no super-admin address is hers to claim
      const sub = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: mallory.token,
        body: registration(takeProviderId(), 'eu.guarded.test'),
      });
      expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    });

    it('refuses the domain of a public mail service, whose addresses anyone can get', async () => {
      const user = await verifiedUser(api, `someone-${uniqueSlug('g')}@gmail.com`);
      const tenant = await createUserTenant(api, user);
      const refused = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: user.token,
        body: registration(takeProviderId(), 'gmail.com'),
      });
      expectError(refused, 403, 'forbidden');
      expect(refused.body.error).toMatch(/mail service/);
      expect(await providersOf(tenant.org.id)).toEqual([]);
    });
  });

  describe('signing in through the provider', () => {
    it('signs a new user up: session through the provider, verified address, member of the organization, told and audited', async () => {
      const { tenant, providerId, domain } = await orgWithProvider();
      const alice = op.addAccount({ email: `alice@${domain}`, name: 'Alice', emailVerified: true });
      const tokenRequests = op.hits('/token');
      const signedIn = await ssoSignIn(providerId, alice.email);
      expect(signedIn.location.pathname).toBe('/signed-in');
      expect(signedIn.location.searchParams.get('error')).toBeNull();
      expect(op.hits('/token')).toBe(tokenRequests + 1);
      expect(op.hits('/jwks')).toBeGreaterThan(0);
      expect(op.hits('/me')).toBeGreaterThan(0);

      const [user] = await api.db.select().from(users).where(eq(users.email, alice.email));
      expect(user).toMatchObject({ id: signedIn.userId, name: 'Alice', emailVerified: true });
      const [account] = await api.db.select().from(accounts).where(eq(accounts.userId, user!.id));
      expect(account).toMatchObject({ providerId, accountId: alice.sub, password: null });
      expect(await ssoSessionRow(signedIn.token!)).toEqual({ ssoProviderId: providerId, userId: user!.id });
      expect(await membership(tenant.org.id, user!.id)).toBe('member');

      const org = await api.call('GET', `/orgs/${tenant.org.slug}`, { token: signedIn.token });
      expect(org.status, JSON.stringify(org.body)).toBe(200);
      const entities = await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities`, { token: signedIn.token });
      expect(entities.status, JSON.stringify(entities.body)).toBe(200);

      const told = await api.db.select().from(notifications).where(eq(notifications.userId, user!.id));
      expect(told).toEqual([expect.objectContaining({ kind: 'org.member_added', orgId: tenant.org.id })]);
      const [audit] = await auditOf(tenant.org.id, 'member.added');
      expect(audit).toMatchObject({ actorType: 'user', actorId: user!.id, targetId: user!.id, data: { role: 'member', via: 'sso', providerId } });
    });

    it('signs the same user in again (the provider found by the address), keeping the role an admin gave them', async () => {
      const { owner, tenant, providerId, domain } = await orgWithProvider();
      const bob = op.addAccount({ email: `bob@${domain}`, name: 'Bob', emailVerified: true });
      const first = await ssoSignIn(providerId, bob.email);
      const promoted = await api.call('PATCH', `/orgs/${tenant.org.slug}/users/${first.userId}`, { token: owner.token, body: { role: 'admin' } });
      expect(promoted.status, JSON.stringify(promoted.body)).toBe(200);
      const second = await ssoSignIn(providerId, bob.email, { byAddress: true });
      expect(second.userId).toBe(first.userId);
      expect(second.token).not.toBe(first.token);
      expect(await membership(tenant.org.id, first.userId!)).toBe('admin');
      expect(await api.db.select().from(users).where(eq(users.email, bob.email))).toHaveLength(1);
    });

    it('verifies an address the provider asserts verified (a super-admin then), and no other', async () => {
      // the boss provider speaks for boss.test, the domain of SUPER_ADMIN_EMAILS: a super-admin verified by mail registers it
      const owner = await verifiedUser(api, 'chief@boss.test');
      expect((await api.call('GET', '/admin/orgs', { token: owner.token })).status).toBe(200);
      const tenant = await createUserTenant(api, owner);
      const registered = await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, {
        token: owner.token,
        body: registration(BOSS_PROVIDER, 'boss.test'),
      });
      expect(registered.status, JSON.stringify(registered.body)).toBe(201);
      op.addAccount({ email: 'root@boss.test', name: 'Root', emailVerified: true });
      op.addAccount({ email: 'lazy@boss.test', name: 'Lazy', emailVerified: false });
      const root = await ssoSignIn(BOSS_PROVIDER, 'root@boss.test');
      const lazy = await ssoSignIn(BOSS_PROVIDER, 'lazy@boss.test');
      const verified = await api.db
        .select({ email: users.email, verified: users.emailVerified })
        .from(users)
        .where(inArray(users.email, SUPER_ADMINS))
        .orderBy(users.email);
      expect(verified).toEqual([
        { email: 'chief@boss.test', verified: true },
        { email: 'lazy@boss.test', verified: false },
        { email: 'root@boss.test', verified: true },
      ]);
      // DECISIONS §8: a super-admin's address must be verified, here by the provider's assertion
      expect((await api.call('GET', '/admin/orgs', { token: root.token })).status).toBe(200);
      expectError(await api.call('GET', '/admin/orgs', { token: lazy.token }), 403, 'forbidden');
    });

    it("refuses an address outside the provider's domains: no user, no session", async () => {
      const { providerId } = await orgWithProvider();
      const eve = op.addAccount({ email: `eve-${uniqueSlug('x')}@elsewhere.test`, name: 'Eve', emailVerified: true });
      const refused = await ssoSignIn(providerId, eve.email);
      expect(refused.token).toBeUndefined();
      expect(refused.location.pathname).toBe('/sign-in-failed');
      expect(refused.location.searchParams.get('error')).toBe('SSO_EMAIL_OUTSIDE_DOMAIN');
      expect(refused.callback.headers.getSetCookie().some((line) => line.startsWith('cellplane.session_token=') && !line.includes('Max-Age=0'))).toBe(false);
      expect(await api.db.select().from(users).where(eq(users.email, eve.email))).toEqual([]);
    });

    it('refuses a callback without the state cookie of its sign-in', async () => {
      const { providerId, domain } = await orgWithProvider();
      const carol = op.addAccount({ email: `carol@${domain}`, name: 'Carol', emailVerified: true });
      const refused = await ssoSignIn(providerId, carol.email, { keepStateCookie: false });
      expect(refused.token).toBeUndefined();
      expect(refused.location.searchParams.get('error')).toBe('state_mismatch');
      expect(await api.db.select().from(users).where(eq(users.email, carol.email))).toEqual([]);
    });

    it('links an existing member with a verified address to the provider: same user, same role', async () => {
      const { owner, tenant, providerId, domain } = await orgWithProvider();
      const dave = await verifiedUser(api, `dave@${domain}`, { name: 'Dave' });
      await addMember(owner, tenant, dave, 'admin');
      op.addAccount({ email: dave.email, name: 'Dave at the IdP', emailVerified: true });
      const signedIn = await ssoSignIn(providerId, dave.email);
      expect(signedIn.userId).toBe(dave.id);
      expect(await membership(tenant.org.id, dave.id)).toBe('admin');
      const linked = await api.db.select({ providerId: accounts.providerId }).from(accounts).where(eq(accounts.userId, dave.id));
      expect(linked.map((row) => row.providerId).sort()).toEqual(['credential', providerId].sort());
      expect((await ssoSessionRow(signedIn.token!))!.ssoProviderId).toBe(providerId);
    });

    it("refuses to link a provider's identity to an existing user who is not a member of its organization", async () => {
      const { providerId, domain } = await orgWithProvider();
      const erin = await verifiedUser(api, `erin@${domain}`, { name: 'Erin' });
      op.addAccount({ email: erin.email, name: 'Erin', emailVerified: true });
      const refused = await ssoSignIn(providerId, erin.email);
      expect(refused.token).toBeUndefined();
      expect(refused.location.searchParams.get('error')).toBe('SSO_ACCOUNT_NOT_LINKABLE');
      const linked = await api.db.select({ providerId: accounts.providerId }).from(accounts).where(eq(accounts.userId, erin.id));
      expect(linked.map((row) => row.providerId)).toEqual(['credential']);
    });

    it('refuses to link a member whose own address is unverified (Better Auth: the account could be a squatter)', async () => {
      const { owner, tenant, providerId, domain } = await orgWithProvider();
      const frank = await signUp(api, { email: `frank@${domain}`, name: 'Frank' });
      await addMember(owner, tenant, frank, 'member');
      op.addAccount({ email: frank.email, name: 'Frank', emailVerified: true });
      const refused = await ssoSignIn(providerId, frank.email);
      expect(refused.token).toBeUndefined();
      expect(refused.location.searchParams.get('error')).toBe('account not linked');
      expect(await api.db.select().from(accounts).where(and(eq(accounts.userId, frank.id), eq(accounts.providerId, providerId)))).toEqual([]);
    });
  });

  describe('forceSso', () => {
    /** An organization forcing its provider, turned on by an admin signed in through it; the owner has a password session. */
    async function forcedOrg() {
      const scene = await orgWithProvider();
      const grace = op.addAccount({ email: `grace@${scene.domain}`, name: 'Grace', emailVerified: true });
      const ssoAdmin = await ssoSignIn(scene.providerId, grace.email);
      const promoted = await api.call('PATCH', `/orgs/${scene.tenant.org.slug}/users/${ssoAdmin.userId}`, {
        token: scene.owner.token,
        body: { role: 'admin' },
      });
      expect(promoted.status).toBe(200);
      const serviceToken = await mintToken(api, scene.tenant, { role: 'admin', as: scene.owner.token });
      const forced = await api.call('PATCH', `/orgs/${scene.tenant.org.slug}/sso-extras/${scene.providerId}`, {
        token: ssoAdmin.token,
        body: { forceSso: true },
      });
      expect(forced.status, JSON.stringify(forced.body)).toBe(200);
      expect(forced.body).toEqual({ providerId: scene.providerId, issuer: op.issuer, domain: scene.domain, forceSso: true });
      return { ...scene, ssoAdmin, serviceToken };
    }

    it('cannot be turned on from a session that did not come through the provider (no lock-out)', async () => {
      const { owner, tenant, providerId } = await orgWithProvider();
      const refused = await api.call('PATCH', `/orgs/${tenant.org.slug}/sso-extras/${providerId}`, { token: owner.token, body: { forceSso: true } });
      expectError(refused, 403, 'sso_required');
      const [row] = await api.db.select().from(ssoProviders).where(eq(ssoProviders.providerId, providerId));
      expect(row!.forceSso).toBe(false);
    });

    it("refuses the organization's resources to password sessions, serves SSO sessions and service tokens, and leaves other organizations alone", async () => {
      const { owner, tenant, providerId, ssoAdmin, serviceToken } = await forcedOrg();
      const [audit] = await auditOf(tenant.org.id, 'sso.updated');
      expect(audit).toMatchObject({ actorId: ssoAdmin.userId, targetId: providerId, data: { forceSso: { from: false, to: true } } });

      const entitiesPath = `/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities`;
      for (const path of [`/orgs/${tenant.org.slug}`, entitiesPath, `/orgs/${tenant.org.slug}/sso-extras`, `/orgs/${tenant.org.slug}/users`]) {
        const refused = await api.call('GET', path, { token: owner.token });
        expectError(refused, 403, 'sso_required');
        expect(refused.body.error).toContain(providerId);
      }
      // a fresh password sign-in is still a password session
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: (await signInAgain(owner)).token }), 403, 'sso_required');

      expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: ssoAdmin.token })).status).toBe(200);
      expect((await api.call('GET', entitiesPath, { token: ssoAdmin.token })).status).toBe(200);
      expect((await api.call('GET', entitiesPath, { token: serviceToken })).status).toBe(200);

      // the owner's other organization does not force SSO
      const elsewhere = await createUserTenant(api, owner);
      expect((await api.call('GET', `/orgs/${elsewhere.org.slug}`, { token: owner.token })).status).toBe(200);
      expect((await api.call('GET', `/${elsewhere.org.slug}/${elsewhere.project.slug}/envs/default/entities`, { token: owner.token })).status).toBe(200);

      // turned off, by the SSO admin: password sessions are back
      const off = await api.call('PATCH', `/orgs/${tenant.org.slug}/sso-extras/${providerId}`, { token: ssoAdmin.token, body: { forceSso: false } });
      expect(off.status).toBe(200);
      expect(off.body.forceSso).toBe(false);
      expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: owner.token })).status).toBe(200);
    });

    it("refuses a session that came through another organization's provider", async () => {
      const { tenant } = await forcedOrg();
      // a member of the forcing organization who signed in through another organization's provider
      const other = await orgWithProvider();
      const henry = op.addAccount({ email: `henry@${other.domain}`, name: 'Henry', emailVerified: true });
      const viaOther = await ssoSignIn(other.providerId, henry.email);
      // (the owner's password session can no longer add members there: the membership is a fixture)
      await api.db.insert(orgMembers).values({ orgId: tenant.org.id, userId: viaOther.userId!, role: 'member' });
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: viaOther.token }), 403, 'sso_required');
      expect((await api.call('GET', `/orgs/${other.tenant.org.slug}`, { token: viaOther.token })).status).toBe(200);
    });

    async function signInAgain(user: TestUser): Promise<{ token: string }> {
      const response = await api.call('POST', '/api/auth/sign-in/email', { body: { email: user.email, password: user.password } });
      expect(response.status).toBe(200);
      return { token: response.headers.get('set-auth-token')! };
    }
  });

  describe('sso-extras', () => {
    it("lists the organization's providers for owners and admins: 403 member, 404 non-member, 401 without a session or with a service token", async () => {
      const { owner, tenant, providerId, domain } = await orgWithProvider();
      // the second provider is registered by an admin whose mailbox is at its domain
      const second = takeProviderId();
      const admin = await verifiedUser(api, `admin@${second}.test`);
      const member = await signUp(api);
      const outsider = await signUp(api);
      await addMember(owner, tenant, admin, 'admin');
      await addMember(owner, tenant, member, 'member');
      expect(
        (await api.call('POST', `/orgs/${tenant.org.slug}/sso-providers`, { token: admin.token, body: registration(second, `${second}.test`) })).status,
      ).toBe(201);
      const serviceToken = await mintToken(api, tenant, { role: 'owner', as: owner.token });
      const path = `/orgs/${tenant.org.slug}/sso-extras`;
      const expected = [
        { providerId, issuer: op.issuer, domain, forceSso: false },
        { providerId: second, issuer: op.issuer, domain: `${second}.test`, forceSso: false },
      ];
      for (const user of [owner, admin]) {
        const listed = await api.call('GET', path, { token: user.token });
        expect(listed.status).toBe(200);
        expect(listed.body).toEqual(expected);
      }
      expectError(await api.call('GET', path, { token: member.token }), 403, 'forbidden');
      expectError(await api.call('GET', path, { token: outsider.token }), 404, 'not_found');
      expectError(await api.call('GET', path), 401, 'unauthorized');
      expectError(await api.call('GET', path, { token: serviceToken }), 401, 'unauthorized');
    });

    it("answers 404 for a provider that is unknown or another organization's, 400 for a bad body, 403 to a member", async () => {
      const { owner, tenant, providerId } = await orgWithProvider();
      const other = await orgWithProvider();
      const member = await signUp(api);
      await addMember(owner, tenant, member, 'member');
      const patch = (id: string, body: unknown, token = owner.token) =>
        api.call('PATCH', `/orgs/${tenant.org.slug}/sso-extras/${id}`, { token, body });
      expectError(await patch(other.providerId, { forceSso: false }), 404, 'not_found');
      expectError(await patch('no-such-idp', { forceSso: false }), 404, 'not_found');
      expectError(await patch(providerId, { forceSso: 'yes' }), 400, 'validation_failed');
      expectError(await patch(providerId, { forceSso: false, domain: 'x.test' }), 400, 'validation_failed');
      expectError(await patch(providerId, {}), 400, 'validation_failed');
      expectError(await patch(providerId, { forceSso: false }, member.token), 403, 'forbidden');
      expectError(await api.call('PATCH', `/orgs/${tenant.org.slug}/sso-extras/${providerId}`, { body: { forceSso: false } }), 401, 'unauthorized');
      const unchanged = await patch(providerId, { forceSso: false });
      expect(unchanged.status).toBe(200);
      expect(unchanged.body.forceSso).toBe(false);
      // nothing changed, nothing audited
      expect(await auditOf(tenant.org.id, 'sso.updated')).toEqual([]);
    });
  });

  describe('removing a provider', () => {
    it('removes it with the accounts it linked and the sessions it started; a member gets 403, another organization 404', async () => {
      const { owner, tenant, providerId, domain } = await orgWithProvider();
      const other = await orgWithProvider();
      const member = await signUp(api);
      await addMember(owner, tenant, member, 'member');
      const ivy = op.addAccount({ email: `ivy@${domain}`, name: 'Ivy', emailVerified: true });
      const signedIn = await ssoSignIn(providerId, ivy.email);
      expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: signedIn.token })).status).toBe(200);

      expectError(await api.call('DELETE', `/orgs/${tenant.org.slug}/sso-providers/${providerId}`, { token: member.token }), 403, 'forbidden');
      expectError(await api.call('DELETE', `/orgs/${tenant.org.slug}/sso-providers/${other.providerId}`, { token: owner.token }), 404, 'not_found');
      expectError(await api.call('DELETE', `/orgs/${tenant.org.slug}/sso-providers/${providerId}`), 401, 'unauthorized');

      const removed = await api.call('DELETE', `/orgs/${tenant.org.slug}/sso-providers/${providerId}`, { token: owner.token });
      expect(removed.status, JSON.stringify(removed.body)).toBe(200);
      expect(removed.body).toEqual({ deleted: true, providerId });
      expect(await api.db.select().from(ssoProviders).where(eq(ssoProviders.providerId, providerId))).toEqual([]);
      expect(await api.db.select().from(accounts).where(eq(accounts.providerId, providerId))).toEqual([]);
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: signedIn.token }), 401, 'unauthorized');
      // the member stays a member; the other organization's provider is untouched
      expect(await membership(tenant.org.id, signedIn.userId!)).toBe('member');
      expect(await api.db.select().from(ssoProviders).where(eq(ssoProviders.providerId, other.providerId))).toHaveLength(1);
      const [audit] = await auditOf(tenant.org.id, 'sso.deleted');
      expect(audit).toMatchObject({ actorId: owner.id, targetId: providerId, data: { accountsUnlinked: 1, sessionsEnded: 1 } });
      // signing in through it again finds no provider
      const start = await api.call('POST', '/api/auth/sign-in/sso', { body: { providerId, callbackURL: '/signed-in' } });
      expectError(start, 404, 'not_found');
    });
  });
});

describe('SSO in oss mode', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi({ env: { SERVICE_DEPLOYMENT: 'oss' } });
  });
  afterAll(() => api?.close());

  it('answers 404 in the error shape on the SSO routes and on Better Auth SSO endpoints', async () => {
    const owner = await signUp(api);
    const tenant = await createUserTenant(api, owner);
    const calls: [string, string, unknown][] = [
      ['GET', `/orgs/${tenant.org.slug}/sso-extras`, undefined],
      ['PATCH', `/orgs/${tenant.org.slug}/sso-extras/some-idp`, { forceSso: true }],
      ['POST', `/orgs/${tenant.org.slug}/sso-providers`, { providerId: 'some-idp' }],
      ['DELETE', `/orgs/${tenant.org.slug}/sso-providers/some-idp`, undefined],
      ['POST', '/api/auth/sign-in/sso', { providerId: 'some-idp', callbackURL: '/' }],
      ['GET', '/api/auth/sso/callback/some-idp?code=x&state=y', undefined],
      ['POST', '/api/auth/sso/register', { providerId: 'some-idp' }],
    ];
    for (const [method, path, body] of calls) {
      const response = await api.call(method, path, { token: owner.token, body });
      expectError(response, 404, 'not_found');
    }
    // email and password sign-in is still there
    expect((await api.call('GET', '/api/auth/get-session', { token: owner.token })).status).toBe(200);
  });
});
