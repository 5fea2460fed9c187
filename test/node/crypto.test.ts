import { describe, expect, it } from 'vitest';
import { openSecret, sealSecret, SealedSecretError, type SealContext } from '../../src/auth/crypto';
import { Secret } from '../../src/secret';

const key = new Secret('00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff');
const otherKey = new Secret('ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100');
const aad: SealContext = {
  orgId: '11111111-1111-4111-8111-111111111111',
  projectId: '22222222-2222-4222-8222-222222222222',
  envId: '33333333-3333-4333-8333-333333333333',
  name: 'deploy-token',
};
const plaintext = 'hunter2-é-ü-🔑';

const bytesOf = (sealed: string) => Uint8Array.from(atob(sealed), (c) => c.charCodeAt(0));
const base64Of = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));

describe('secret sealing (AES-256-GCM, row-bound)', () => {
  it('round-trips a value', async () => {
    const sealed = await sealSecret(key, plaintext, aad);
    expect(sealed).not.toContain(plaintext);
    expect(await openSecret(key, sealed, aad)).toBe(plaintext);
  });

  it('lays out IV (12) ‖ ciphertext ‖ tag (16) as base64', async () => {
    const sealed = await sealSecret(key, 'abc', aad);
    expect(bytesOf(sealed).length).toBe(12 + 3 + 16);
  });

  it('draws a fresh IV for every seal, so two seals of one value differ', async () => {
    const a = await sealSecret(key, plaintext, aad);
    const b = await sealSecret(key, plaintext, aad);
    expect(a).not.toBe(b);
    expect(bytesOf(a).subarray(0, 12)).not.toEqual(bytesOf(b).subarray(0, 12));
    expect(await openSecret(key, b, aad)).toBe(plaintext);
  });

  it('refuses a value with any byte altered', async () => {
    const sealed = await sealSecret(key, 'short value', aad);
    const bytes = bytesOf(sealed);
    for (let i = 0; i < bytes.length; i++) {
      const tampered = Uint8Array.from(bytes);
      tampered[i]! ^= 0x01;
      await expect(openSecret(key, base64Of(tampered), aad), `byte ${i}`).rejects.toBeInstanceOf(SealedSecretError);
    }
  });

  it('refuses a truncated or non-base64 value', async () => {
    const sealed = await sealSecret(key, 'v', aad);
    await expect(openSecret(key, sealed.slice(0, 20), aad)).rejects.toBeInstanceOf(SealedSecretError);
    await expect(openSecret(key, '***not base64***', aad)).rejects.toBeInstanceOf(SealedSecretError);
  });

  it.each([
    ['organization', { orgId: '44444444-4444-4444-8444-444444444444' }],
    ['project', { projectId: '44444444-4444-4444-8444-444444444444' }],
    ['environment', { envId: '44444444-4444-4444-8444-444444444444' }],
    ['name', { name: 'deploy-token2' }],
  ])('refuses to open under another %s (associated data)', async (_what, change) => {
    const sealed = await sealSecret(key, plaintext, aad);
    await expect(openSecret(key, sealed, { ...aad, ...change })).rejects.toBeInstanceOf(SealedSecretError);
  });

  it('refuses to open with another key, without echoing the value', async () => {
    const sealed = await sealSecret(key, plaintext, aad);
    const error = await openSecret(otherKey, sealed, aad).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SealedSecretError);
    expect(String(error)).not.toContain(plaintext);
  });

  it('rejects a key that is not 64 hex characters', async () => {
    await expect(sealSecret(new Secret('abc'), 'v', aad)).rejects.toThrow(/64 hexadecimal/);
  });
});
