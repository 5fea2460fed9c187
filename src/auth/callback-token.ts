import { jwtVerify, SignJWT, errors } from 'jose';
import type { Secret } from '../secret';

/**
 * The per-run callback token (SPEC Authentication 9): an HS256 JWT, made and
 * checked by jose, that names one run of one tenant and expires with the run.
 * Its key is derived from AUTH_SECRET for this purpose alone, so a token of
 * another kind signed with AUTH_SECRET never passes as a callback token.
 */

export interface CallbackClaims {
  runId: string;
  orgId: string;
  projectId: string;
  envId: string;
}

const AUDIENCE = 'cellplane:run-callback';
const ISSUER = 'cellplane';

const keys = new Map<string, Promise<CryptoKey>>();

/**
 * HMAC-SHA256(AUTH_SECRET, label): a key per purpose from the one configured
 * secret, imported once as a CryptoKey (jose would import raw bytes again on
 * every sign and verify: each delivery attempt signs a token).
 */
function callbackKey(authSecret: Secret): Promise<CryptoKey> {
  const raw = authSecret.reveal();
  let key = keys.get(raw);
  if (!key) {
    key = (async () => {
      const hmac = { name: 'HMAC', hash: 'SHA-256' };
      const secretKey = await crypto.subtle.importKey('raw', new TextEncoder().encode(raw), hmac, false, ['sign']);
      const derived = await crypto.subtle.sign('HMAC', secretKey, new TextEncoder().encode('cellplane run callback token v1'));
      return crypto.subtle.importKey('raw', derived, hmac, false, ['sign', 'verify']);
    })();
    keys.set(raw, key);
  }
  return key;
}

/**
 * `issuedAt` defaults to now; the run engine passes the run's creation time,
 * so every attempt of a run carries the same token (and the same body). A
 * trigger that hands its run to a slot of the Node job runner signs it the
 * same way while the run is written (LeasedJob.callbackToken).
 */
export async function signCallbackToken(authSecret: Secret, claims: CallbackClaims, expiresAt: Date, issuedAt?: Date): Promise<string> {
  return new SignJWT({ org: claims.orgId, prj: claims.projectId, env: claims.envId })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.runId)
    .setAudience(AUDIENCE)
    .setIssuer(ISSUER)
    .setIssuedAt(issuedAt ? Math.floor(issuedAt.getTime() / 1000) : undefined)
    .setExpirationTime(Math.floor(expiresAt.getTime() / 1000))
    .sign(await callbackKey(authSecret));
}

export type CallbackVerdict = { ok: true; claims: CallbackClaims } | { ok: false; reason: 'expired' | 'invalid' };

/** Checks signature, audience, issuer and expiry (at `now`); the caller then matches the claims to the path's run. */
export async function verifyCallbackToken(authSecret: Secret, token: string, now: Date): Promise<CallbackVerdict> {
  try {
    const { payload } = await jwtVerify(token, await callbackKey(authSecret), {
      algorithms: ['HS256'],
      audience: AUDIENCE,
      issuer: ISSUER,
      currentDate: now,
    });
    const { sub, org, prj, env } = payload as { sub?: unknown; org?: unknown; prj?: unknown; env?: unknown };
    if ([sub, org, prj, env].some((value) => typeof value !== 'string')) return { ok: false, reason: 'invalid' };
    return { ok: true, claims: { runId: sub as string, orgId: org as string, projectId: prj as string, envId: env as string } };
  } catch (error) {
    return { ok: false, reason: error instanceof errors.JWTExpired ? 'expired' : 'invalid' };
  }
}
