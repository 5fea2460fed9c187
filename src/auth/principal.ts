import type { Db } from '../db/client';
import type { BootstrapMemo } from '../platform';
import type { CallbackClaims } from './callback-token';
import type { Caller } from './caller';
import type { Auth } from './sessions';
import type { Secret } from '../secret';

/**
 * Who is calling, and nothing about what they may do: that is the caller's
 * grants (./grants.ts). Every request resolves to one principal, found by the
 * first authenticator of AUTHENTICATORS (./authenticators.ts) that claims the
 * request; the rest of the app never parses a credential.
 */
export type Principal =
  | ServiceTokenPrincipal
  | BootstrapPrincipal
  | LocalOperatorPrincipal
  | UserSessionPrincipal
  | RunCallbackPrincipal
  | CodeHostWebhookPrincipal;

/** A service token (SPEC Authentication): looked up together with the request's tenancy. */
export interface ServiceTokenPrincipal {
  kind: 'service-token';
  tokenId: string;
  expiresAt: Date | null;
}

/** Bootstrap mode: a fresh deployment with no token minted yet accepts every request. */
export interface BootstrapPrincipal {
  kind: 'bootstrap';
}

/**
 * The local-first CLI (`cellplane --local`): the app runs inside the CLI's
 * own process on the embedded database and no port is opened, so whoever
 * runs the process is the operator. Only a platform built for that
 * (`Platform.localOperator`) lets this principal exist; no HTTP request can
 * ask for it.
 */
export interface LocalOperatorPrincipal {
  kind: 'local-operator';
}

/**
 * A signed-in user (Better Auth, src/auth/sessions.ts): settled by the
 * session lookup; its grants come from its organization membership, found by
 * the tenancy lookup of the organization a path names (./memberships.ts).
 */
export interface UserSessionPrincipal {
  kind: 'user-session';
  userId: string;
  email: string;
  name: string;
  emailVerified: boolean;
  sessionId: string;
  expiresAt: Date;
  /** The SSO provider the session came through; null for email and password. */
  ssoProviderId: string | null;
  /** How the session was presented: a cookie is a browser's, and its writes are checked for their origin (CSRF). */
  via: 'cookie' | 'bearer';
}

/**
 * Declared, not yet produced by an authenticator: the run callback still
 * checks its own token in its route (src/modules/action-runs/routes.ts), and
 * its claims are this principal.
 */
export interface RunCallbackPrincipal extends CallbackClaims {
  kind: 'run-callback';
}

/** Declared, not yet produced: a code host's signed webhook delivery. */
export interface CodeHostWebhookPrincipal {
  kind: 'codehost-webhook';
  provider: string;
  deliveryId: string;
}

/**
 * What an authenticator settles from the headers alone. A service token is
 * only checked for shape and checksum and hashed: the first tenancy lookup
 * (src/auth/access.ts) resolves it with its grants in the same query. A
 * principal needing no lookup (bootstrap) comes settled, grants included.
 */
export type PendingPrincipal =
  | { kind: 'service-token'; tokenHash: string }
  | { kind: 'user-session'; principal: UserSessionPrincipal }
  | { kind: 'settled'; caller: Caller };

export interface AuthenticationInput {
  /** A request header by name (case-insensitive); undefined when absent. */
  header(name: string): string | undefined;
  /** The request's database, leased on first use. */
  db(): Db;
  bootstrap: BootstrapMemo;
  /** Better Auth on the request's database, built on first use. */
  auth(): Auth;
  /** AUTH_SECRET: a session Bearer value's signature is checked with it before any lookup. */
  authSecret: Secret;
  /** hashServiceToken of the bearer token, when the request already computed it (the rate limiter, only for a token it found well-formed: its shape and checksum are not checked again). */
  knownTokenHash?: string;
  /** The platform serves the local-first CLI in its own process (Platform.localOperator). */
  localOperator?: boolean;
}

/**
 * One way of recognising a caller. Returns the pending principal when the
 * request is its kind, undefined to pass the request to the next one, and
 * throws ApiError('unauthorized') to refuse it (401) — a credential of its
 * kind that is wrong is refused, never passed on.
 */
export interface Authenticator {
  readonly name: string;
  authenticate(input: AuthenticationInput): PendingPrincipal | undefined | Promise<PendingPrincipal | undefined>;
}
