import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { jwtVerify, SignJWT, errors } from 'jose';
import type { Secret } from '../secret';

/**
 * The per-run callback token (SPEC Authentication 9): an HS256 JWT, made and
 * checked by jose, that names one run of one tenant and expires with the run.
 * Its key is derived from AUTH_SECRET for this purpose alone, so a token of
 * another kind signed with AUTH_SECRET never passes as a callback token.
 * A host with a synchronous HS256 signer (Platform.signHs256: Node's) signs
 * with it instead: the same bytes, without WebCrypto's thread-pool hop.
 */

/** Signs a JWT's claims (HS256, header `{"alg":"HS256","typ":"JWT"}`) with the key it was made for. */
export type Hs256Signer = (claims: Record<string, unknown>) => string;
/** A host's synchronous HS256 signer for `key` (Platform.signHs256). */
export type SignHs256 = (key: Uint8Array) => Hs256Signer;

export interface CallbackClaims {
  runId: string;
  orgId: string;
  projectId: string;
  envId: string;
}

const AUDIENCE = 'cellplane:run-callback';
const ISSUER = 'cellplane';

const KEY_LABEL = 'cellplane run callback token v1';

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
      const derived = await crypto.subtle.sign('HMAC', secretKey, new TextEncoder().encode(KEY_LABEL));
      return crypto.subtle.importKey('raw', derived, hmac, false, ['sign', 'verify']);
    })();
    keys.set(raw, key);
  }
  return key;
}

/** Each host's signer, by the secret it signs for: the derived key computed and handed to the host once. */
const signers = new WeakMap<SignHs256, Map<string, Hs256Signer>>();

/** callbackKey's bytes, derived synchronously (@noble/hashes), in the signer of `signHs256`. */
function callbackSigner(authSecret: Secret, signHs256: SignHs256): Hs256Signer {
  const raw = authSecret.reveal();
  let bySecret = signers.get(signHs256);
  if (!bySecret) signers.set(signHs256, (bySecret = new Map()));
  let signer = bySecret.get(raw);
  if (!signer) {
    const encode = (text: string) => new TextEncoder().encode(text);
    bySecret.set(raw, (signer = signHs256(hmac(sha256, encode(raw), encode(KEY_LABEL)))));
  }
  return signer;
}

/**
 * `issuedAt` defaults to now; the run engine passes the run's creation time,
 * so every attempt of a run carries the same token (and the same body). A
 * trigger that hands its run to a slot of the Node job runner signs it the
 * same way while the run is written (LeasedJob.callbackToken). With
 * `signHs256` (Platform.signHs256) the host signs, synchronously: the claims
 * in jose's order, so the token is the one jose would make.
 */
export async function signCallbackToken(authSecret: Secret, claims: CallbackClaims, expiresAt: Date, issuedAt?: Date, signHs256?: SignHs256): Promise<string> {
  const iat = Math.floor((issuedAt ?? new Date()).getTime() / 1000);
  const exp = Math.floor(expiresAt.getTime() / 1000);
  const tenancy = { org: claims.orgId, prj: claims.projectId, env: claims.envId };
  if (signHs256) return callbackSigner(authSecret, signHs256)({ ...tenancy, sub: claims.runId, aud: AUDIENCE, iss: ISSUER, iat, exp });
  return new SignJWT(tenancy)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.runId)
    .setAudience(AUDIENCE)
    .setIssuer(ISSUER)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
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
