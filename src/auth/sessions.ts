import { sso, type SSOOptions } from '@better-auth/sso';
import { betterAuth } from 'better-auth';
import { drizzleAdapter } from 'better-auth/adapters/drizzle';
import { APIError, createAuthMiddleware } from 'better-auth/api';
import { bearer } from 'better-auth/plugins/bearer';
import { and, eq, isNotNull, isNull, ne } from 'drizzle-orm';
import type { Config } from '../config';
import type { Db } from '../db/client';
import { accounts, authSchema, orgMembers, orgs, ssoProviders, users } from '../db/schema';
import { recordAudit } from '../db/audit';
import { notify } from '../db/notifications';
import type { Logger } from '../logger';
import type { Mailer } from '../platform';
import { covers, domainsOf, hostOf } from './email-domains';
import { invitationMessage, passwordResetMessage, verificationMessage } from './mail-templates';

/** Where Better Auth is mounted (SPEC: the auth handler; DECISIONS §5). */
export const AUTH_BASE_PATH = '/api/auth';

/** The cookie names start with this: `cellplane.session_token`. */
export const AUTH_COOKIE_PREFIX = 'cellplane';

/** Where an invitation lands, as a query parameter of its link: the organization that invited (members/service.ts). */
export const INVITATION_MARKER = 'invitation';

export interface AuthDependencies {
  db: Db;
  config: Config;
  logger: Logger;
  mailer: Mailer;
}

/** The public base URL links in mail are built from: AUTH_URL, else the API's own (DECISIONS §8). */
export const authBaseUrl = (config: Config): string | undefined => config.authUrl ?? config.apiBaseUrl;

/**
 * Better Auth on the request's database: email and password, cookie
 * sessions signed with AUTH_SECRET, the same session as a Bearer value
 * (bearer plugin: `set-auth-token` on sign-in), verification and reset mail
 * through the Mailer port, and OIDC providers per organization in `cloud`
 * mode (the SSO plugin). Cheap to build (no I/O): a host builds one per
 * database handle (the Worker: per request, with its per-request pool).
 */
export function createAuth({ db, config, logger, mailer }: AuthDependencies) {
  const baseURL = authBaseUrl(config);
  const send = (message: Parameters<Mailer['send']>[0]) =>
    mailer.send(message).catch((error: unknown) => {
      // the request that asked for the mail still succeeds; the user can ask again
      logger.error('could not send mail', { to: message.to, subject: message.subject, error });
    });
  return betterAuth({
    appName: 'Cellplane',
    baseURL,
    basePath: AUTH_BASE_PATH,
    secret: config.authSecret.reveal(),
    trustedOrigins: config.trustedOrigins,
    database: drizzleAdapter(db, { provider: 'pg', schema: authSchema }),
    emailAndPassword: {
      enabled: true,
      minPasswordLength: 10,
      // a provisioned member's invitation is a reset link: following it sets the first password
      sendResetPassword: async ({ user, url }) => {
        const invited = !(await hasPassword(db, user.id));
        await send(invited ? invitationMessage(user.email, url) : passwordResetMessage(user.email, url));
      },
      // the link came by mail to the address: setting a password through it proves the address, as a verification link does
      onPasswordReset: async ({ user }) => {
        await db.update(users).set({ emailVerified: true }).where(eq(users.id, user.id));
      },
    },
    emailVerification: {
      sendOnSignUp: true,
      autoSignInAfterVerification: true,
      sendVerificationEmail: async ({ user, url }) => {
        await send(verificationMessage(user.email, url));
      },
    },
    session: {
      additionalFields: {
        ssoProviderId: { type: 'string', required: false, input: false },
      },
    },
    databaseHooks: {
      user: {
        create: {
          // SSO: a provider signs up addresses of its own domains only (docs/people/sso.md)
          before: async (user, context) => {
            const providerId = ssoCallbackProviderId(context);
            if (providerId) await assertSsoAddressAllowed(db, providerId, user.email);
          },
        },
      },
      account: {
        create: {
          // SSO: linking a provider's identity to a user who already exists (docs/people/sso.md)
          before: async (account, context) => {
            const providerId = ssoCallbackProviderId(context);
            if (providerId && account.providerId === providerId) await assertSsoLinkAllowed(db, providerId, account.userId);
          },
        },
      },
      session: {
        create: {
          // which provider a session came through decides forceSso (src/auth/memberships.ts)
          before: async (session, context) => {
            return { data: { ...session, ssoProviderId: ssoCallbackProviderId(context) ?? null } };
          },
        },
      },
    },
    hooks: { before: guardSsoEndpoints },
    advanced: {
      // said outright: Better Auth turns its origin check off when NODE_ENV is "test", so the tests would not see what production does
      disableOriginCheck: false,
      cookiePrefix: AUTH_COOKIE_PREFIX,
      database: { generateId: 'uuid' },
    },
    // the API's own limiter (src/http/rate-limit.ts) counts /api/auth requests like every other
    rateLimit: { enabled: false },
    telemetry: { enabled: false },
    logger: {
      level: 'error',
      log: (level, message) => {
        if (level === 'error') logger.error('auth handler', { message });
        else logger.warn('auth handler', { message });
      },
    },
    plugins: [bearer(), ...(config.deployment === 'cloud' ? [sso(ssoOptions(db))] : [])],
  });
}

// --- SSO (cloud mode; docs/people/sso.md) -------------------------------------

/**
 * The plugin's endpoints that manage providers. Cellplane's own routes do
 * that (POST/DELETE /orgs/{id}/sso-providers, src/modules/sso), because who
 * may is an organization role the plugin cannot see: over HTTP these answer
 * 404, as paths that are not mounted do. The services still call them
 * in-process (`auth.api.registerSSOProvider`), after their own checks.
 */
const SSO_MANAGEMENT_PATHS = new Set([
  '/sso/register',
  '/sso/providers',
  '/sso/get-provider',
  '/sso/update-provider',
  '/sso/delete-provider',
  '/sso/request-domain-verification',
  '/sso/verify-domain',
]);

const guardSsoEndpoints = createAuthMiddleware(async (ctx) => {
  // ctx.request is set for HTTP requests only, not for in-process auth.api calls
  if (ctx.request && SSO_MANAGEMENT_PATHS.has(ctx.path)) {
    throw new APIError('NOT_FOUND', { message: `no route for ${ctx.request.method} ${new URL(ctx.request.url).pathname}` });
  }
  // the plugin would look the slug up in the organization plugin's table, which Cellplane does not have
  if (ctx.path === '/sign-in/sso' && (ctx.body as { organizationSlug?: unknown } | undefined)?.organizationSlug !== undefined) {
    throw new APIError('BAD_REQUEST', { message: 'organizationSlug is not supported: sign in with providerId, domain or email' });
  }
});

/** The provider whose callback (OIDC) or assertion endpoint (SAML) is running, from Better Auth's endpoint context. */
export function ssoCallbackProviderId(context: { path?: string; params?: unknown } | null | undefined): string | undefined {
  const path = context?.path ?? '';
  if (!path.startsWith('/sso/callback/') && !path.startsWith('/sso/saml2/sp/acs/')) return undefined;
  const providerId = (context?.params as { providerId?: unknown } | undefined)?.providerId;
  return typeof providerId === 'string' ? providerId : undefined;
}

function ssoOptions(db: Db): SSOOptions {
  return {
    // who may register is decided per organization by src/modules/sso, not per user
    providersLimit: Number.POSITIVE_INFINITY,
    // a provider's email_verified verifies the address (DECISIONS §8), for addresses of its own domains only
    trustEmailVerified: true,
    // the plugin's provisioning writes the organization plugin's tables; provisionUser writes Cellplane's
    organizationProvisioning: { disabled: true },
    provisionUser: async ({ user, provider }) => {
      if (provider.organizationId) await joinProviderOrganization(db, { userId: user.id, orgId: provider.organizationId, providerId: provider.providerId });
    },
  };
}

const ssoRefusal = (code: string, message: string) => new APIError('FORBIDDEN', { code, message });

/** Whether an address belongs to one of a provider's domains (comma-separated), subdomains included. */
const addressInDomains = (email: string, domains: string): boolean => domainsOf(domains).some((domain) => covers(domain, hostOf(email)));

async function providerOf(db: Db, providerId: string) {
  const [provider] = await db
    .select({ domain: ssoProviders.domain, organizationId: ssoProviders.organizationId })
    .from(ssoProviders)
    .where(eq(ssoProviders.providerId, providerId))
    .limit(1);
  if (!provider) throw ssoRefusal('SSO_PROVIDER_NOT_FOUND', `SSO provider "${providerId}" not found`);
  return provider;
}

/**
 * An organization's provider speaks for the addresses of its own domains
 * only: it may not sign anyone else up, nor have its email_verified taken
 * for an address it does not own.
 */
async function assertSsoAddressAllowed(db: Db, providerId: string, email: string): Promise<void> {
  const provider = await providerOf(db, providerId);
  if (!addressInDomains(email, provider.domain)) {
    throw ssoRefusal('SSO_EMAIL_OUTSIDE_DOMAIN', `SSO provider "${providerId}" may only sign in addresses of ${provider.domain}`);
  }
}

/**
 * Linking a provider's identity to a user who already exists (Better Auth
 * does so when both the provider and the user's own record say the address
 * is verified). Besides the domain rule, the user must already be a member
 * of the provider's organization: an organization's admin, who registers its
 * provider, must not be able to sign in as users of other organizations —
 * or as a super-admin — by claiming their domain. A user with no account
 * yet is the one this callback has just signed up (its account comes next).
 */
async function assertSsoLinkAllowed(db: Db, providerId: string, userId: string): Promise<void> {
  const provider = await providerOf(db, providerId);
  const [user] = await db.select({ email: users.email }).from(users).where(eq(users.id, userId)).limit(1);
  if (!user) return;
  await assertSsoAddressAllowed(db, providerId, user.email);
  const [otherAccount] = await db
    .select({ id: accounts.id })
    .from(accounts)
    .where(and(eq(accounts.userId, userId), ne(accounts.providerId, providerId)))
    .limit(1);
  if (!otherAccount) return;
  const [membership] = provider.organizationId
    ? await db
        .select({ role: orgMembers.role })
        .from(orgMembers)
        .where(and(eq(orgMembers.orgId, provider.organizationId), eq(orgMembers.userId, userId)))
        .limit(1)
    : [];
  if (!membership) {
    throw ssoRefusal(
      'SSO_ACCOUNT_NOT_LINKABLE',
      `this address already has an account that is not a member of the organization of SSO provider "${providerId}": an admin adds it first`,
    );
  }
}

/**
 * A user signed up through an organization's provider joins that
 * organization as `member` (docs/people/sso.md), told and audited in one
 * transaction. Only at sign-up: an existing user keeps its memberships as
 * they are, so a member removed by an admin stays removed.
 */
async function joinProviderOrganization(db: Db, join: { userId: string; orgId: string; providerId: string }): Promise<void> {
  await db.transaction(async (tx) => {
    const [org] = await tx
      .select({ id: orgs.id, name: orgs.name, slug: orgs.slug })
      .from(orgs)
      .where(and(eq(orgs.id, join.orgId), isNull(orgs.deletedAt)))
      .limit(1);
    if (!org) return;
    const [added] = await tx
      .insert(orgMembers)
      .values({ orgId: org.id, userId: join.userId, role: 'member' })
      .onConflictDoNothing()
      .returning({ userId: orgMembers.userId });
    if (!added) return;
    await notify(tx, {
      userId: join.userId,
      orgId: org.id,
      kind: 'org.member_added',
      title: `You joined ${org.name}`,
      body: `Signing in through ${org.name}'s SSO provider made you a member of ${org.name}.`,
      data: { orgId: org.id, orgSlug: org.slug, role: 'member', via: 'sso', providerId: join.providerId },
    });
    await recordAudit(tx, {
      action: 'member.added',
      actor: { type: 'user', id: join.userId },
      orgId: org.id,
      target: { type: 'user', id: join.userId },
      data: { role: 'member', via: 'sso', providerId: join.providerId },
    });
  });
}

export type Auth = ReturnType<typeof createAuth>;

const authByDatabase = new WeakMap<Db, Auth>();

/**
 * Better Auth for a database handle, built once per handle: once for the
 * Node host's long-lived pool, once per request on the Worker (whose pool is
 * the request's). Building costs about a millisecond and no I/O.
 */
export function authFor(dependencies: AuthDependencies): Auth {
  let auth = authByDatabase.get(dependencies.db);
  if (!auth) authByDatabase.set(dependencies.db, (auth = createAuth(dependencies)));
  return auth;
}

/**
 * Whether a user has set a password. A reset link sent to one who has not
 * (a provisioned member, an SSO user) is worded as an invitation: the
 * wording follows from the account, never from anything the request says.
 */
async function hasPassword(db: Db, userId: string): Promise<boolean> {
  const [row] = await db
    .select({ id: accounts.id })
    .from(accounts)
    .where(and(eq(accounts.userId, userId), eq(accounts.providerId, 'credential'), isNotNull(accounts.password)))
    .limit(1);
  return row !== undefined;
}
