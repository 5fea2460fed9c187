import { describe, expect, it } from 'vitest';
import { crc32 } from '../../src/auth/crc32';
import { generateServiceToken, hashServiceToken, isWellFormedServiceToken } from '../../src/auth/service-token';
import { loadConfig } from '../../src/config';
import type { Db } from '../../src/db/client';
import { createLogger } from '../../src/logger';
import { platformOnSharedDatabase } from '../../src/node/platform';
import { TEST_SECRETS } from '../support/node-app';

describe('service token format', () => {
  it('uses the standard CRC-32 (check value of "123456789")', () => {
    expect(crc32('123456789')).toBe(0xcbf43926);
    expect(crc32('')).toBe(0);
  });

  it('takes the CRC-32 of the UTF-8 bytes past ASCII (zlib.crc32 of the same text)', () => {
    expect(crc32('héllo ✓ 𝄞')).toBe(0x2d9e80dc);
    expect(crc32('cpl_abc')).toBe(0x29d999af);
  });

  it('is cpl_ + 30 base62 + 6 base62 checksum, with a readable prefix', () => {
    const { token, prefix } = generateServiceToken();
    expect(token).toMatch(/^cpl_[0-9A-Za-z]{36}$/);
    expect(prefix).toBe(token.slice(0, 12));
    expect(isWellFormedServiceToken(token)).toBe(true);
  });

  it('draws fresh randomness each time', () => {
    const tokens = new Set(Array.from({ length: 200 }, () => generateServiceToken().token));
    expect(tokens.size).toBe(200);
  });

  it('refuses any single-character change, a wrong prefix, and wrong lengths', () => {
    const { token } = generateServiceToken();
    for (let i = 4; i < token.length; i++) {
      const replacement = token[i] === 'a' ? 'b' : 'a';
      expect(isWellFormedServiceToken(token.slice(0, i) + replacement + token.slice(i + 1))).toBe(false);
    }
    expect(isWellFormedServiceToken(`xyz_${token.slice(4)}`)).toBe(false);
    expect(isWellFormedServiceToken(token.slice(0, -1))).toBe(false);
    expect(isWellFormedServiceToken(`${token}0`)).toBe(false);
    expect(isWellFormedServiceToken('')).toBe(false);
  });

  it('hashes with SHA-256 to hex', () => {
    expect(hashServiceToken('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(hashServiceToken('')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });

  it("the Node host's native SHA-256 (Platform.sha256Hex, the rate limiter's) gives hashServiceToken's digest, for any text", () => {
    const platform = platformOnSharedDatabase({ config: loadConfig(TEST_SECRETS), logger: createLogger({ sink: () => {} }), db: {} as Db });
    const texts = ['', 'abc', generateServiceToken().token, 'cpl_ünïcödé-токен-令牌-🔑', 'a lone \ud800 surrogate', 'x'.repeat(10_000)];
    for (const text of texts) expect(platform.sha256Hex!(text)).toBe(hashServiceToken(text));
  });

  it('computes the same SHA-256 as WebCrypto', async () => {
    const { token } = generateServiceToken();
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(token)));
    expect(hashServiceToken(token)).toBe(Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join(''));
  });
});
