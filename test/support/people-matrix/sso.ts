import { eq } from 'drizzle-orm';
import { ssoProviders, users } from '../../../src/db/schema';
import type { TestApi } from '../node-app';
import { freshName, type PeopleRoute, type PeopleWorld } from './route';

/**
 * The SSO routes (SPEC Organizations sso-extras; docs/people/sso.md): owner
 * or admin of the world's organization; a member gets 403, a non-member
 * 404, a service token 401 (user-session routes). Each row that reads or
 * changes a provider inserts its own first, straight into `sso_providers`
 * (a provider's registration is a row of its own, and the real flow against
 * an OpenID Provider is test/node/sso.test.ts). Everything is fresh per
 * call, so the matrix can call each row again and again.
 */

/** A provider of the world's organization, forceSso off (on, it would lock the world's password sessions out). */
async function providerFixture(api: TestApi, world: PeopleWorld): Promise<string> {
  const providerId = freshName('matrix-idp');
  await api.db.insert(ssoProviders).values({
    providerId,
    issuer: `https://${providerId}.example.com`,
    domain: `${providerId}.example.com`,
    oidcConfig: JSON.stringify({ issuer: `https://${providerId}.example.com`, clientId: 'matrix', pkce: true }),
    organizationId: world.org.id,
  });
  return providerId;
}

const ownerOrAdmin = { access: 'admin', tokens: 401 } as const;

/**
 * Runs `call` with the address of the world's user holding `credential`
 * verified, and puts it back after. Registering a provider needs the
 * registering user's verified mailbox at the domain (docs/people/sso.md);
 * the world's users are unverified addresses at example.com, and other rows
 * must find them as they were.
 */
async function asVerified<T>(api: TestApi, world: PeopleWorld, credential: string | undefined, call: () => Promise<T>): Promise<T> {
  const user = [world.owner, world.admin, world.member, world.outsider, world.superAdmin].find((candidate) => candidate.token === credential);
  if (!user) return call();
  const [before] = await api.db.select({ emailVerified: users.emailVerified }).from(users).where(eq(users.id, user.id));
  await api.db.update(users).set({ emailVerified: true }).where(eq(users.id, user.id));
  try {
    return await call();
  } finally {
    await api.db.update(users).set({ emailVerified: before!.emailVerified }).where(eq(users.id, user.id));
  }
}

export const SSO_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'POST',
    path: '/orgs/{id}/sso-providers',
    ...ownerOrAdmin,
    success: 201,
    // endpoints given, so no discovery: the row needs no reachable provider. The domain is a
    // subdomain of example.com, the host of the world's users, so a verified one proves it.
    call: (api, world, credential) => {
      const providerId = freshName('matrix-new');
      const issuer = `https://${providerId}.example.com`;
      return asVerified(api, world, credential, () =>
        api.call('POST', `/orgs/${world.org.slug}/sso-providers`, {
          token: credential,
          body: {
            providerId,
            issuer,
            domain: `${providerId}.example.com`,
            clientId: 'matrix-client',
            clientSecret: 'matrix client secret 0123',
            endpoints: { authorization: `${issuer}/authorize`, token: `${issuer}/token`, jwks: `${issuer}/jwks` },
          },
        }),
      );
    },
  },
  {
    method: 'DELETE',
    path: '/orgs/{id}/sso-providers/{providerId}',
    ...ownerOrAdmin,
    success: 200,
    call: async (api, world, credential) => {
      const providerId = await providerFixture(api, world);
      return api.call('DELETE', `/orgs/${world.org.slug}/sso-providers/${providerId}`, { token: credential });
    },
  },
  {
    method: 'GET',
    path: '/orgs/{id}/sso-extras',
    ...ownerOrAdmin,
    success: 200,
    call: async (api, world, credential) => {
      await providerFixture(api, world);
      return api.call('GET', `/orgs/${world.org.slug}/sso-extras`, { token: credential });
    },
  },
  {
    method: 'PATCH',
    path: '/orgs/{id}/sso-extras/{providerId}',
    ...ownerOrAdmin,
    success: 200,
    // turning forceSso off: turning it on needs a session through the provider, which the matrix's users have not
    call: async (api, world, credential) => {
      const providerId = await providerFixture(api, world);
      return api.call('PATCH', `/orgs/${world.org.slug}/sso-extras/${providerId}`, { token: credential, body: { forceSso: false } });
    },
  },
];
