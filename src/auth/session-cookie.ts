import { createHMAC } from '@better-auth/utils/hmac';
import { parse } from 'hono/utils/cookie';
import type { Secret } from '../secret';
import { AUTH_COOKIE_PREFIX } from './sessions';

/** The session cookie's names: plain on http, with the `__Secure-` prefix Better Auth adds on https. */
const SESSION_COOKIE_NAMES = [`${AUTH_COOKIE_PREFIX}.session_token`, `__Secure-${AUTH_COOKIE_PREFIX}.session_token`];

/**
 * The session cookie's value in a Cookie header (Hono's parser), undefined
 * when there is none. Only its presence matters here: Better Auth verifies it.
 */
export function sessionCookieToken(cookieHeader: string | undefined): string | undefined {
  if (!cookieHeader || !cookieHeader.includes(`${AUTH_COOKIE_PREFIX}.session_token`)) return undefined;
  const cookies = parse(cookieHeader);
  for (const name of SESSION_COOKIE_NAMES) {
    const value = cookies[name];
    if (value) return value;
  }
  return undefined;
}

/** A session token (32 characters), a dot, and its signature: the value of Better Auth's `set-auth-token`. */
const SIGNED_SESSION_TOKEN = /^[0-9A-Za-z]{32}\.[0-9A-Za-z+/_-]{43}=?$/;

/**
 * Whether a Bearer value is a session token signed with AUTH_SECRET, checked
 * as Better Auth's bearer plugin checks it (its own HMAC helper), but before
 * the lookup: a forged value costs no query.
 */
export async function isSignedSessionToken(credential: string, secret: Secret): Promise<boolean> {
  let value = credential;
  if (value.includes('%')) {
    try {
      value = decodeURIComponent(value);
    } catch {
      return false;
    }
  }
  if (!SIGNED_SESSION_TOKEN.test(value)) return false;
  const [token, signature] = value.split('.') as [string, string];
  try {
    return await createHMAC('SHA-256', 'base64urlnopad').verify(secret.reveal(), token, signature);
  } catch {
    return false;
  }
}
