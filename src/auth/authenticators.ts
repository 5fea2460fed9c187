import { systemState } from '../db/schema';
import { ApiError } from '../http/errors';
import { bearerCredential, CallerState } from './caller';
import { grantsOf } from './grants';
import type { AuthenticationInput, Authenticator } from './principal';
import { hashServiceToken, isWellFormedServiceToken, TOKEN_PREFIX } from './service-token';
import { isSignedSessionToken, sessionCookieToken } from './session-cookie';

const unauthorized = (message: string) => new ApiError('unauthorized', message);

/**
 * `Authorization: Bearer cpl_…`: a service token of valid shape and checksum
 * is hashed, and looked up later with the request's tenancy. An
 * Authorization header that is not a Bearer credential is refused here, so a
 * bogus one is 401 even in bootstrap mode (docs/decisions.md, Bootstrap
 * mode); a Bearer value without the token prefix is a session's.
 */
export const serviceTokenAuthenticator: Authenticator = {
  name: 'service-token',
  authenticate({ header, knownTokenHash }) {
    const authorization = header('authorization');
    if (authorization === undefined) return undefined;
    const token = bearerCredential(authorization);
    if (token === undefined) throw unauthorized('expected Authorization: Bearer <token>');
    if (!token.startsWith(TOKEN_PREFIX)) return undefined;
    // a hash the rate limiter took is of this very header's token, which it found well-formed first
    if (knownTokenHash !== undefined) return { kind: 'service-token', tokenHash: knownTokenHash };
    if (!isWellFormedServiceToken(token)) throw unauthorized('malformed token');
    return { kind: 'service-token', tokenHash: hashServiceToken(token) };
  },
};

/**
 * A Better Auth session (src/auth/sessions.ts): `Authorization: Bearer
 * <session token>` (the CLI; the value of `set-auth-token`) or the session
 * cookie (browsers). A session that is unknown, expired or badly signed is
 * 401, never passed on to bootstrap mode.
 */
export const userSessionAuthenticator: Authenticator = {
  name: 'user-session',
  async authenticate({ header, auth, authSecret }) {
    const authorization = header('authorization');
    const cookie = authorization === undefined ? sessionCookieToken(header('cookie')) : undefined;
    if (authorization === undefined && cookie === undefined) return undefined;
    // a forged or malformed Bearer value is refused before any query, as a service token's checksum is
    if (authorization !== undefined && !(await isSignedSessionToken(bearerCredential(authorization)!, authSecret))) {
      throw unauthorized('malformed or forged session token');
    }
    const headers = new Headers();
    if (authorization !== undefined) headers.set('authorization', authorization);
    else headers.set('cookie', header('cookie')!);
    const found = await auth().api.getSession({ headers, query: { disableRefresh: false } });
    if (!found) throw unauthorized('invalid or expired session: sign in again at /api/auth/sign-in/email');
    const { session, user } = found;
    return {
      kind: 'user-session',
      principal: {
        kind: 'user-session',
        userId: user.id,
        email: user.email,
        name: user.name,
        emailVerified: user.emailVerified,
        sessionId: session.id,
        expiresAt: session.expiresAt,
        ssoProviderId: (session as { ssoProviderId?: string | null }).ssoProviderId ?? null,
        via: authorization === undefined ? 'cookie' : 'bearer',
      },
    };
  },
};

/**
 * No credentials on a deployment where no token was ever minted. A host
 * remembers "closed" once it has seen it and skips the query from then on.
 */
export const bootstrapAuthenticator: Authenticator = {
  name: 'bootstrap',
  async authenticate({ db, bootstrap }) {
    if (bootstrap.closed) return undefined;
    const [state] = await db().select().from(systemState).limit(1);
    if (state && state.bootstrapClosedAt === null) {
      const principal = { kind: 'bootstrap' } as const;
      return { kind: 'settled', caller: { principal, grants: grantsOf(principal) } };
    }
    bootstrap.closed = true;
    return undefined;
  },
};

/**
 * The local-first CLI's own process (principal.ts, LocalOperatorPrincipal):
 * a request without credentials on a platform built for it. A request that
 * carries credentials is still theirs to answer for.
 */
export const localOperatorAuthenticator: Authenticator = {
  name: 'local-operator',
  authenticate({ header, localOperator }) {
    if (!localOperator || header('authorization') !== undefined || header('cookie') !== undefined) return undefined;
    const principal = { kind: 'local-operator' } as const;
    return { kind: 'settled', caller: { principal, grants: grantsOf(principal) } };
  },
};

/**
 * Tried in order by the request middleware; the first that claims the
 * request decides. A new kind of caller (a session cookie, a code host's
 * signature) is one more entry here, plus its source of grants (./grants.ts).
 */
export const AUTHENTICATORS: readonly Authenticator[] = [
  serviceTokenAuthenticator,
  userSessionAuthenticator,
  localOperatorAuthenticator,
  bootstrapAuthenticator,
];

/** The request's caller, pending its lookup; 401 when no authenticator claims the request. */
export async function authenticateRequest(
  input: AuthenticationInput,
  authenticators: readonly Authenticator[] = AUTHENTICATORS,
): Promise<CallerState> {
  for (const authenticator of authenticators) {
    const pending = await authenticator.authenticate(input);
    if (pending) return CallerState.pending(pending);
  }
  throw unauthorized('authentication required: send Authorization: Bearer <token>, or sign in at /api/auth/sign-in/email');
}
