import type { z } from '@hono/zod-openapi';
import { discoverOIDCConfig, DiscoveryError } from '@better-auth/sso';
import { APIError } from 'better-auth/api';
import { and, asc, eq, sql } from 'drizzle-orm';
import { loadOrg, requirePermission, type OrgRow } from '../../auth/access';
import { isSuperAdmin, requireUserSession } from '../../auth/memberships';
import { roleAllows } from '../../auth/permissions';
import type { UserSessionPrincipal } from '../../auth/principal';
import { createAuth } from '../../auth/sessions';
import type { ServiceContext } from '../../context';
import type { Db, Tx } from '../../db/client';
import { accounts, sessions, ssoProviders } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { recordAudit } from '../../db/audit';
import { actorOf } from '../../auth/actor';
import { actorRoleUnderLock, lockOrganization } from '../members/service';
import { assertDomainsProven, domainsOf, overlaps } from './domain-proof';
import type { SsoExtra, SsoProvider, SsoProviderCreate, SsoProviderDeleted } from './schemas';

/**
 * Per-organization OpenID Connect providers (Better Auth's SSO plugin,
 * `cloud` mode) and their Cellplane settings (SPEC sso-extras; DECISIONS §8;
 * docs/people/sso.md).
 *
 * The plugin's own provider-management endpoints are closed over HTTP
 * (src/auth/sessions.ts): who may register a provider is an organization
 * role, which only Cellplane knows. These verbs check it, then let the
 * plugin validate and store the provider inside the same transaction as the
 * organization binding and the audit row.
 */

type ProviderRow = typeof ssoProviders.$inferSelect;
type ExtraBody = z.infer<typeof SsoExtra>;

const toExtra = (row: ProviderRow): ExtraBody => ({
  providerId: row.providerId,
  issuer: row.issuer,
  domain: row.domain,
  forceSso: row.forceSso,
});

/** Registrations take turns: the domain-overlap rule below is checked and written under this lock. */
const REGISTRATION_LOCK = sql`select pg_advisory_xact_lock(hashtext('cellplane.sso_providers'))`;

/** Session, organization (404 for non-members) and the owner-or-admin gate (SPEC Authentication 8). */
async function managerScene(ctx: ServiceContext, orgRef: string): Promise<{ actor: UserSessionPrincipal; org: OrgRow }> {
  const actor = requireUserSession(ctx);
  const org = await loadOrg(ctx, orgRef);
  requirePermission(ctx.caller, 'org:manage');
  return { actor, org };
}

/** The organization locked and the actor's role read again under the lock (as member changes do, src/modules/members). */
async function lockAsManager(tx: Tx, org: OrgRow, actor: UserSessionPrincipal): Promise<void> {
  await lockOrganization(tx, org);
  const role = await actorRoleUnderLock(tx, org, actor);
  if (!roleAllows(role, 'org:manage')) throw new ApiError('forbidden', `role "${role}" cannot manage SSO: owner or admin only`);
}

async function providerOfOrg(db: Db | Tx, org: OrgRow, providerId: string): Promise<ProviderRow> {
  const [row] = await db
    .select()
    .from(ssoProviders)
    .where(and(eq(ssoProviders.providerId, providerId), eq(ssoProviders.organizationId, org.id)))
    .limit(1);
  // another organization's provider is not found either (no existence oracle)
  if (!row) throw notFound(`SSO provider "${providerId}"`);
  return row;
}

/** GET /orgs/{id}/sso-extras. */
export async function listSsoExtras(ctx: ServiceContext, orgRef: string): Promise<ExtraBody[]> {
  const { org } = await managerScene(ctx, orgRef);
  const rows = await ctx.db
    .select()
    .from(ssoProviders)
    .where(eq(ssoProviders.organizationId, org.id))
    .orderBy(asc(ssoProviders.createdAt), asc(ssoProviders.providerId));
  return rows.map(toExtra);
}

/**
 * PATCH /orgs/{id}/sso-extras/{providerId}. Turning forceSso on needs a
 * session that came through that very provider: the admin proves the
 * provider signs people in before every other way in is closed, so a
 * misconfigured provider cannot lock the organization out.
 */
export async function updateSsoExtra(
  ctx: ServiceContext,
  orgRef: string,
  providerId: string,
  input: { forceSso: boolean },
): Promise<ExtraBody> {
  const { actor, org } = await managerScene(ctx, orgRef);
  const row = await ctx.db.transaction(async (tx) => {
    await lockAsManager(tx, org, actor);
    const current = await providerOfOrg(tx, org, providerId);
    if (input.forceSso && !current.forceSso && actor.ssoProviderId !== providerId) {
      throw new ApiError(
        'sso_required',
        `sign in through SSO provider "${providerId}" before enforcing it, so that enforcing it cannot lock the organization out`,
      );
    }
    if (current.forceSso === input.forceSso) return current;
    const [updated] = await tx
      .update(ssoProviders)
      .set({ forceSso: input.forceSso, updatedAt: ctx.clock.now() })
      .where(eq(ssoProviders.id, current.id))
      .returning();
    await recordAudit(tx, {
      action: 'sso.updated',
      actor: actorOf(actor),
      orgId: org.id,
      target: { type: 'sso_provider', id: providerId },
      data: { forceSso: { from: current.forceSso, to: input.forceSso } },
    });
    return updated!;
  });
  return toExtra(row);
}

/**
 * A domain (or a parent or subdomain of it) belongs to one provider only:
 * signing in by address picks the provider by domain, and an address must
 * not have two organizations' providers speaking for it.
 */
async function assertDomainsFree(tx: Tx, domains: string[]): Promise<void> {
  const taken = await tx.select({ providerId: ssoProviders.providerId, domain: ssoProviders.domain }).from(ssoProviders);
  for (const row of taken) {
    const clash = domainsOf(row.domain).find((existing) => domains.some((domain) => overlaps(domain, existing)));
    if (clash) throw new ApiError('already_exists', `the domain "${clash}" already has an SSO provider`);
  }
}

interface OidcEndpoints {
  authorizationEndpoint: string;
  tokenEndpoint: string;
  jwksEndpoint: string;
  userInfoEndpoint?: string;
  tokenEndpointAuthentication?: 'client_secret_basic' | 'client_secret_post' | 'private_key_jwt';
}

/**
 * The provider's endpoints: given, or read from the issuer's discovery
 * document before the transaction opens (no network wait holds a database
 * connection). Discovery is Better Auth's own and trusts what Better Auth
 * trusts: the issuer's origin must be in TRUSTED_ORIGINS.
 */
async function providerEndpoints(ctx: ServiceContext, input: z.infer<typeof SsoProviderCreate>): Promise<OidcEndpoints> {
  if (input.endpoints) {
    const { authorization, token, jwks, userInfo } = input.endpoints;
    return { authorizationEndpoint: authorization, tokenEndpoint: token, jwksEndpoint: jwks, userInfoEndpoint: userInfo };
  }
  const authContext = await ctx.auth().$context;
  try {
    const discovered = await discoverOIDCConfig({ issuer: input.issuer, isTrustedOrigin: (url) => authContext.isTrustedOrigin(url) });
    return {
      authorizationEndpoint: discovered.authorizationEndpoint,
      tokenEndpoint: discovered.tokenEndpoint,
      jwksEndpoint: discovered.jwksEndpoint,
      userInfoEndpoint: discovered.userInfoEndpoint,
      tokenEndpointAuthentication: discovered.tokenEndpointAuthentication,
    };
  } catch (error) {
    if (error instanceof DiscoveryError) throw new ApiError('validation_failed', `OIDC discovery of "${input.issuer}" failed: ${error.message}`);
    throw error;
  }
}

/** The session credential of the request (a Bearer value or the cookie), for the plugin's own session check. */
export function sessionHeadersOf(headers: Headers): Headers {
  const only = new Headers();
  const authorization = headers.get('authorization');
  const cookie = headers.get('cookie');
  if (authorization) only.set('authorization', authorization);
  else if (cookie) only.set('cookie', cookie);
  return only;
}

/**
 * The plugin's registration (its validation of the provider id and the
 * endpoints, its stored configuration) run on the transaction: a Better
 * Auth built on `tx` writes the row there, so a failure after it leaves no
 * provider without its organization. Its refusals are 400s.
 */
async function registerWithPlugin(
  ctx: ServiceContext,
  tx: Tx,
  input: z.infer<typeof SsoProviderCreate>,
  endpoints: OidcEndpoints,
  headers: Headers,
): Promise<{ redirectURI: string }> {
  // a transaction is a drizzle database for every query Better Auth's adapter makes
  const auth = createAuth({ db: tx as unknown as Db, config: ctx.config, logger: ctx.logger, mailer: ctx.mailer });
  try {
    const registered = await auth.api.registerSSOProvider({
      headers,
      body: {
        providerId: input.providerId,
        issuer: input.issuer,
        domain: input.domain,
        oidcConfig: {
          clientId: input.clientId,
          clientSecret: input.clientSecret,
          skipDiscovery: true,
          ...endpoints,
          scopes: input.scopes,
          pkce: input.pkce,
        },
      },
    });
    return { redirectURI: (registered as { redirectURI: string }).redirectURI };
  } catch (error) {
    if (error instanceof APIError && error.statusCode >= 400 && error.statusCode < 500) {
      if (error.statusCode === 401) throw new ApiError('unauthorized', 'invalid or expired session: sign in again');
      throw new ApiError('validation_failed', error.body?.message ?? error.message);
    }
    throw error;
  }
}

/**
 * POST /orgs/{id}/sso-providers: an owner or admin registers an OpenID
 * Provider for the organization, for domains their own verified address
 * proves (./domain-proof.ts: otherwise any organization could front a
 * domain nobody has claimed and sign up its future users, verified). The
 * response names the redirect URI to configure at the provider; the client
 * secret is never returned.
 */
export async function registerSsoProvider(
  ctx: ServiceContext,
  orgRef: string,
  input: z.infer<typeof SsoProviderCreate>,
  headers: Headers,
): Promise<z.infer<typeof SsoProvider>> {
  const { actor, org } = await managerScene(ctx, orgRef);
  const domains = domainsOf(input.domain);
  // before discovery: an unproven claim costs no request to the issuer, and learns nothing about taken domains
  assertDomainsProven({ actor, actorIsSuperAdmin: isSuperAdmin(ctx, actor), superAdminEmails: ctx.config.superAdminEmails }, domains);
  const endpoints = await providerEndpoints(ctx, input);
  const { row, redirectUri } = await ctx.db.transaction(async (tx) => {
    await lockAsManager(tx, org, actor);
    await tx.execute(REGISTRATION_LOCK);
    const [existing] = await tx.select({ id: ssoProviders.id }).from(ssoProviders).where(eq(ssoProviders.providerId, input.providerId));
    if (existing) throw new ApiError('already_exists', `SSO provider "${input.providerId}" exists`);
    await assertDomainsFree(tx, domains);
    const { redirectURI } = await registerWithPlugin(ctx, tx, input, endpoints, headers);
    const [bound] = await tx
      .update(ssoProviders)
      .set({ organizationId: org.id })
      .where(eq(ssoProviders.providerId, input.providerId))
      .returning();
    if (!bound) throw new Error(`the SSO plugin did not store provider "${input.providerId}"`);
    await recordAudit(tx, {
      action: 'sso.registered',
      actor: actorOf(actor),
      orgId: org.id,
      target: { type: 'sso_provider', id: bound.providerId },
      data: { issuer: bound.issuer, domain: bound.domain },
    });
    return { row: bound, redirectUri: redirectURI };
  });
  return { ...toExtra(row), redirectUri, createdAt: timestamp(row.createdAt) };
}

/**
 * DELETE /orgs/{id}/sso-providers/{providerId}: the provider, the accounts
 * it linked and the sessions it started go together, as the plugin's own
 * deletion does for accounts — a provider id registered again later must
 * not inherit the links — and so that nobody stays signed in on the word of
 * a provider the organization removed.
 */
export async function deleteSsoProvider(
  ctx: ServiceContext,
  orgRef: string,
  providerId: string,
): Promise<z.infer<typeof SsoProviderDeleted>> {
  const { actor, org } = await managerScene(ctx, orgRef);
  await ctx.db.transaction(async (tx) => {
    await lockAsManager(tx, org, actor);
    const provider = await providerOfOrg(tx, org, providerId);
    const unlinked = await tx.delete(accounts).where(eq(accounts.providerId, providerId)).returning({ id: accounts.id });
    const ended = await tx.delete(sessions).where(eq(sessions.ssoProviderId, providerId)).returning({ id: sessions.id });
    await tx.delete(ssoProviders).where(eq(ssoProviders.id, provider.id));
    await recordAudit(tx, {
      action: 'sso.deleted',
      actor: actorOf(actor),
      orgId: org.id,
      target: { type: 'sso_provider', id: providerId },
      data: { issuer: provider.issuer, domain: provider.domain, accountsUnlinked: unlinked.length, sessionsEnded: ended.length },
    });
  });
  return { deleted: true, providerId };
}
