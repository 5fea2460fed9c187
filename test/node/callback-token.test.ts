import { SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { signCallbackToken, verifyCallbackToken } from '../../src/auth/callback-token';
import { signHs256 } from '../../src/node/platform';
import { Secret } from '../../src/secret';

const secret = new Secret('callback-test-auth-secret-0123456789abcdef');
const claims = { runId: 'run-1', orgId: 'org-1', projectId: 'prj-1', envId: 'env-1' };
const now = new Date('2026-11-21T10:00:00.000Z');
const inAnHour = new Date(now.getTime() + 3600_000);

describe('run callback token', () => {
  it('round-trips the run and its tenant', async () => {
    const token = await signCallbackToken(secret, claims, inAnHour);
    expect(await verifyCallbackToken(secret, token, now)).toEqual({ ok: true, claims });
  });

  it('expires with the run', async () => {
    const token = await signCallbackToken(secret, claims, inAnHour);
    expect(await verifyCallbackToken(secret, token, new Date(inAnHour.getTime() + 1000))).toEqual({ ok: false, reason: 'expired' });
  });

  it('refuses another secret, a tampered token and garbage', async () => {
    const token = await signCallbackToken(secret, claims, inAnHour);
    expect(await verifyCallbackToken(new Secret('another-auth-secret-0123456789abcdefgh'), token, now)).toEqual({ ok: false, reason: 'invalid' });
    const [header, payload, signature] = token.split('.');
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload!, 'base64url').toString()), sub: 'run-2' })).toString('base64url');
    expect((await verifyCallbackToken(secret, `${header}.${forged}.${signature}`, now)).ok).toBe(false);
    expect((await verifyCallbackToken(secret, 'not.a.token', now)).ok).toBe(false);
    expect((await verifyCallbackToken(secret, '', now)).ok).toBe(false);
  });

  it('refuses a JWT signed with AUTH_SECRET itself: the callback key is derived for this purpose only', async () => {
    const direct = await new SignJWT({ org: 'org-1', prj: 'prj-1', env: 'env-1' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('run-1')
      .setAudience('cellplane:run-callback')
      .setIssuer('cellplane')
      .setExpirationTime(Math.floor(inAnHour.getTime() / 1000))
      .sign(new TextEncoder().encode(secret.reveal()));
    expect((await verifyCallbackToken(secret, direct, now)).ok).toBe(false);
  });

  it('refuses the "none" algorithm', async () => {
    const unsigned = `${Buffer.from(JSON.stringify({ alg: 'none' })).toString('base64url')}.${Buffer.from(
      JSON.stringify({ sub: 'run-1', org: 'o', prj: 'p', env: 'e', aud: 'cellplane:run-callback', iss: 'cellplane', exp: 9999999999 }),
    ).toString('base64url')}.`;
    expect((await verifyCallbackToken(secret, unsigned, now)).ok).toBe(false);
  });

  describe("with the Node host's signer (Platform.signHs256)", () => {
    it('makes the token jose makes, byte for byte, for every run and time', async () => {
      const runs = [claims, { runId: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', orgId: 'o-2', projectId: 'p-2', envId: 'e-2' }];
      for (const run of runs) {
        for (const issuedAt of [now, new Date('2026-01-01T00:00:00.999Z')]) {
          const byHost = await signCallbackToken(secret, run, inAnHour, issuedAt, signHs256);
          expect(byHost).toBe(await signCallbackToken(secret, run, inAnHour, issuedAt));
          expect(await verifyCallbackToken(secret, byHost, now)).toEqual({ ok: true, claims: run });
        }
      }
    });

    it('signs with the key derived for each secret, not with the first one it saw', async () => {
      const other = new Secret('another-auth-secret-0123456789abcdefgh');
      const mine = await signCallbackToken(secret, claims, inAnHour, now, signHs256);
      const theirs = await signCallbackToken(other, claims, inAnHour, now, signHs256);
      expect(theirs).not.toBe(mine);
      expect(theirs).toBe(await signCallbackToken(other, claims, inAnHour, now));
      expect(await verifyCallbackToken(secret, theirs, now)).toEqual({ ok: false, reason: 'invalid' });
    });

    it('stamps the time of signing when no issue time is given, and expires with the run', async () => {
      const before = Math.floor(Date.now() / 1000);
      const token = await signCallbackToken(secret, claims, inAnHour, undefined, signHs256);
      const { iat, exp } = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { iat: number; exp: number };
      expect(iat).toBeGreaterThanOrEqual(before);
      expect(iat).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
      expect(exp).toBe(Math.floor(inAnHour.getTime() / 1000));
      expect(await verifyCallbackToken(secret, token, new Date(inAnHour.getTime() + 1000))).toEqual({ ok: false, reason: 'expired' });
    });
  });
});
