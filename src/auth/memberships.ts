import { and, eq, sql } from 'drizzle-orm';
import type { MiddlewareHandler } from 'hono';
import type { AppEnv, ServiceContext } from '../context';
import type { Queryable } from '../db/client';
import { orgMembers, ssoProviders } from '../db/schema';
import { ApiError } from '../http/errors';
import type { CallerState } from './caller';
import { grantsOf } from './grants';
import type { UserSessionPrincipal } from './principal';

/**
 * A user's grants: its membership of the organization a path names
 * (DECISIONS §5: a user's role on a project is its organization role).
 * Settled by the tenancy lookup (./access.ts) once it has found the
 * organization; a user who is not a member is answered like a caller of
 * another tenant (`notMember`, a 404), before anything about the
 * organization (its suspension, its SSO rule) is told.
 *
 * forceSso: a member whose session did not come through a provider of the
 * organization that forces SSO is refused with 403 sso_required
 * (DECISIONS §8); service tokens are unaffected.
 */
export async function settleMembership(state: CallerState, db: Queryable, orgId: string, notMember: () => Error): Promise<void> {
  const user = state.user;
  if (!user || state.resolved) return;
  const [row] = await db
    .select({
      role: orgMembers.role,
      // a provider forcing SSO that this session did not come through
      ssoRequired: sql<string | null>`(
        select ${ssoProviders.providerId} from ${ssoProviders}
        where ${ssoProviders.organizationId} = ${orgId} and ${ssoProviders.forceSso}
          and ${ssoProviders.providerId} is distinct from ${user.ssoProviderId}
          and not exists (
            select 1 from ${ssoProviders} own
            where own.organization_id = ${orgId} and own.force_sso and own.provider_id = ${user.ssoProviderId}
          )
        limit 1)`,
    })
    .from(orgMembers)
    .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, user.userId)))
    .limit(1);
  if (!row) throw notMember();
  state.settle({ principal: user, grants: grantsOf(user, { membershipOrgId: orgId, membershipRole: row.role }) });
  if (row.ssoRequired !== null) {
    throw new ApiError('sso_required', `this organization requires signing in through its SSO provider "${row.ssoRequired}"`);
  }
}

/** The signed-in user of a user-scoped endpoint (SPEC Authentication 7), or 401. */
export function requireUserSession(ctx: Pick<ServiceContext, 'callerState'>): UserSessionPrincipal {
  const user = ctx.callerState.user;
  if (!user) throw new ApiError('unauthorized', 'this endpoint needs a user session: sign in at /api/auth/sign-in/email');
  return user;
}

/** A super-admin: a user whose verified address is in SUPER_ADMIN_EMAILS (DECISIONS §5, §8). */
export function isSuperAdmin(ctx: Pick<ServiceContext, 'config'>, user: UserSessionPrincipal): boolean {
  return user.emailVerified && ctx.config.superAdminEmails.includes(user.email.toLowerCase());
}

/** The super-admin of an /admin route: 401 without a user session, 403 for any other user. */
export function requireSuperAdmin(ctx: Pick<ServiceContext, 'callerState' | 'config'>): UserSessionPrincipal {
  const user = requireUserSession(ctx);
  if (!isSuperAdmin(ctx, user)) throw new ApiError('forbidden', 'super-admin only');
  return user;
}

/**
 * Route middleware of the user-only routes: who may call is settled before
 * the request is validated, so a service token gets 401 whatever it sends,
 * as a missing credential is refused before its body is read elsewhere.
 * The services check again (requireUserSession): the route is not the only
 * way in.
 */
export const userSessionOnly: MiddlewareHandler<AppEnv> = async (c, next) => {
  requireUserSession(c.get('services'));
  await next();
};

/** Whether the caller is the local-first CLI's operator (src/auth/principal.ts, LocalOperatorPrincipal). */
export const isLocalOperator = (ctx: Pick<ServiceContext, 'callerState'>): boolean =>
  ctx.callerState.resolved && ctx.callerState.current.principal.kind === 'local-operator';

/** userSessionOnly, letting the local-first CLI's operator through too: GET /orgs. */
export const userSessionOrLocalOperator: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (!isLocalOperator(c.get('services'))) requireUserSession(c.get('services'));
  await next();
};

/** The same for the super-admin routes: 401 without a session, 403 for any other user, before validation. */
export const superAdminOnly: MiddlewareHandler<AppEnv> = async (c, next) => {
  requireSuperAdmin(c.get('services'));
  await next();
};
