import { systemState } from '../db/schema';
import { ApiError } from '../http/errors';
import { bearerCredential, CallerState } from './caller';
import { grantsOf } from './grants';
import type { AuthenticationInput, Authenticator } from './principal';
import { hashServiceToken, isWellFormedServiceToken } from './service-token';

const unauthorized = (message: string) => new ApiError('unauthorized', message);

/**
 * `Authorization: Bearer cpl_…`: a service token of valid shape and checksum
 * is hashed, and looked up later with the request's tenancy. Any
 * Authorization header is this authenticator's to judge, so a bogus one is
 * 401 even in bootstrap mode (docs/decisions.md, Bootstrap mode).
 */
export const serviceTokenAuthenticator: Authenticator = {
  name: 'service-token',
  authenticate({ header, knownTokenHash }) {
    const authorization = header('authorization');
    if (authorization === undefined) return undefined;
    const token = bearerCredential(authorization);
    if (token === undefined) throw unauthorized('expected Authorization: Bearer <token>');
    if (!isWellFormedServiceToken(token)) throw unauthorized('malformed token');
    return { kind: 'service-token', tokenHash: knownTokenHash ?? hashServiceToken(token) };
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
 * Tried in order by the request middleware; the first that claims the
 * request decides. A new kind of caller (a session cookie, a code host's
 * signature) is one more entry here, plus its source of grants (./grants.ts).
 */
export const AUTHENTICATORS: readonly Authenticator[] = [serviceTokenAuthenticator, bootstrapAuthenticator];

/** The request's caller, pending its lookup; 401 when no authenticator claims the request. */
export async function authenticateRequest(
  input: AuthenticationInput,
  authenticators: readonly Authenticator[] = AUTHENTICATORS,
): Promise<CallerState> {
  for (const authenticator of authenticators) {
    const pending = await authenticator.authenticate(input);
    if (pending) return CallerState.pending(pending);
  }
  throw unauthorized('authentication required: send Authorization: Bearer <token>');
}
