import { errors, jwtVerify, SignJWT } from 'jose';
import type { Secret } from '../secret';

/**
 * The install-state token (SPEC Authentication 11): the `state` of the
 * GitHub App's install URL, and the one credential of GET
 * /github/install-callback. An HS256 JWT made and checked by jose, naming
 * the organization the installation is for and the user who asked for the
 * URL, valid for INSTALL_STATE_TTL_SECONDS. Its key is derived from
 * AUTH_SECRET for this purpose alone (as the run callback token's is), so a
 * token of another kind signed with AUTH_SECRET never passes as a state.
 */

export interface InstallStateClaims {
  orgId: string;
  userId: string;
}

/** Long enough to click through GitHub's install screens, short enough that a leaked URL soon stops working. */
export const INSTALL_STATE_TTL_SECONDS = 10 * 60;

const AUDIENCE = 'cellplane:github-install';
const ISSUER = 'cellplane';

const keys = new Map<string, Promise<Uint8Array>>();

/** HMAC-SHA256(AUTH_SECRET, label): a key per purpose from the one configured secret. */
function stateKey(authSecret: Secret): Promise<Uint8Array> {
  const raw = authSecret.reveal();
  let key = keys.get(raw);
  if (!key) {
    key = (async () => {
      const hmacKey = await crypto.subtle.importKey('raw', new TextEncoder().encode(raw), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
      return new Uint8Array(await crypto.subtle.sign('HMAC', hmacKey, new TextEncoder().encode('cellplane github install state v1')));
    })();
    keys.set(raw, key);
  }
  return key;
}

export async function signInstallState(authSecret: Secret, claims: InstallStateClaims, now: Date): Promise<string> {
  const issuedAt = Math.floor(now.getTime() / 1000);
  return new SignJWT({ org: claims.orgId })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.userId)
    .setAudience(AUDIENCE)
    .setIssuer(ISSUER)
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + INSTALL_STATE_TTL_SECONDS)
    .setJti(crypto.randomUUID())
    .sign(await stateKey(authSecret));
}

export type InstallStateVerdict = { ok: true; claims: InstallStateClaims } | { ok: false; reason: 'expired' | 'invalid' };

/** Checks signature, audience, issuer and expiry at `now`. */
export async function verifyInstallState(authSecret: Secret, state: string, now: Date): Promise<InstallStateVerdict> {
  try {
    const { payload } = await jwtVerify(state, await stateKey(authSecret), {
      algorithms: ['HS256'],
      audience: AUDIENCE,
      issuer: ISSUER,
      currentDate: now,
      requiredClaims: ['exp', 'sub'],
    });
    const { sub, org } = payload as { sub?: unknown; org?: unknown };
    if (typeof sub !== 'string' || typeof org !== 'string') return { ok: false, reason: 'invalid' };
    return { ok: true, claims: { orgId: org, userId: sub } };
  } catch (error) {
    return { ok: false, reason: error instanceof errors.JWTExpired ? 'expired' : 'invalid' };
  }
}
