import { crc32 } from './crc32';
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';

/**
 * Service token format (DECISIONS §5): `cpl_` + 30 random base62 characters +
 * a 6-character base62 CRC-32 of those 30. The checksum lets a malformed or
 * forged token be refused before any database query; only the SHA-256 of the
 * whole token is stored.
 */
export const TOKEN_PREFIX = 'cpl_';
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const RANDOM_LENGTH = 30;
const CHECKSUM_LENGTH = 6;
const TOKEN_SHAPE = new RegExp(`^${TOKEN_PREFIX}[0-9A-Za-z]{${RANDOM_LENGTH + CHECKSUM_LENGTH}}$`);
/** The readable part kept for listing: `cpl_` and the first 8 random characters. */
const DISPLAY_PREFIX_LENGTH = TOKEN_PREFIX.length + 8;

function base62Checksum(body: string): string {
  let value = crc32(body);
  let out = '';
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = BASE62[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out;
}

/** Uniform base62 characters from the platform CSPRNG (rejection sampling, no modulo bias). */
function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    const bytes = crypto.getRandomValues(new Uint8Array(length * 2));
    for (const byte of bytes) {
      if (byte < 248 && out.length < length) out += BASE62[byte % 62];
    }
  }
  return out;
}

export function generateServiceToken(): { token: string; prefix: string } {
  const body = randomBase62(RANDOM_LENGTH);
  const token = `${TOKEN_PREFIX}${body}${base62Checksum(body)}`;
  return { token, prefix: token.slice(0, DISPLAY_PREFIX_LENGTH) };
}

/** Shape and checksum only: true means "worth a database lookup". */
export function isWellFormedServiceToken(token: string): boolean {
  if (!TOKEN_SHAPE.test(token)) return false;
  const body = token.slice(TOKEN_PREFIX.length, TOKEN_PREFIX.length + RANDOM_LENGTH);
  return token.slice(TOKEN_PREFIX.length + RANDOM_LENGTH) === base62Checksum(body);
}

/**
 * SHA-256 of the whole token, hex: what `service_tokens.token_hash` holds.
 * Synchronous, through @noble/hashes (audited, no dependencies): every
 * authenticated request hashes its token before its first query, and
 * WebCrypto's digest is asynchronous and, on Node, a thread-pool hop of
 * ~50 µs; the core may not import node:crypto.
 */
export function hashServiceToken(token: string): string {
  return bytesToHex(sha256(new TextEncoder().encode(token)));
}
