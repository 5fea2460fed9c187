import type { Secret } from '../secret';

/**
 * Sealing of stored credentials (DECISIONS §5): AES-256-GCM under
 * ENCRYPTION_KEY through Web Crypto, so the same code runs on Node and on the
 * Worker. Each seal draws a fresh 12-byte IV; the sealed form is
 * base64(IV ‖ ciphertext ‖ 16-byte tag).
 *
 * The row's organization, project, environment and name are bound as
 * associated data: a sealed value copied to another row (another environment,
 * another name, another tenant) fails GCM authentication instead of
 * decrypting there.
 */

export interface SealContext {
  orgId: string;
  projectId: string;
  envId: string;
  name: string;
}

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Raised when a sealed value does not open; says why it may have failed, never what it holds. */
export class SealedSecretError extends Error {
  constructor(message = 'sealed value failed to open: wrong key, altered, or sealed for another row') {
    super(message);
    this.name = 'SealedSecretError';
  }
}

// Imported once per key value: importKey is async and not free, and runs on every seal otherwise.
const importedKeys = new Map<string, Promise<CryptoKey>>();

function aesKey(key: Secret): Promise<CryptoKey> {
  const hex = key.reveal();
  let imported = importedKeys.get(hex);
  if (!imported) {
    if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw new Error('encryption key must be 32 bytes as 64 hexadecimal characters');
    const raw = new Uint8Array(32);
    for (let i = 0; i < 32; i++) raw[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
    imported = crypto.subtle.importKey('raw', raw, { name: 'AES-GCM' }, false, ['encrypt', 'decrypt']);
    importedKeys.set(hex, imported);
  }
  return imported;
}

/**
 * JSON of a fixed-order array: unambiguous (no separator a name could
 * contain can shift a field), and versioned so the binding can change later.
 */
const associatedData = (aad: SealContext): Uint8Array<ArrayBuffer> =>
  new TextEncoder().encode(JSON.stringify(['cellplane.secret.v1', aad.orgId, aad.projectId, aad.envId, aad.name]));

function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

export async function sealSecret(key: Secret, plaintext: string, aad: SealContext): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
  const ciphertext = await crypto.subtle.encrypt(
    { name: 'AES-GCM', iv, additionalData: associatedData(aad), tagLength: TAG_BYTES * 8 },
    await aesKey(key),
    new TextEncoder().encode(plaintext),
  );
  const sealed = new Uint8Array(IV_BYTES + ciphertext.byteLength);
  sealed.set(iv, 0);
  sealed.set(new Uint8Array(ciphertext), IV_BYTES);
  return toBase64(sealed);
}

/** The plaintext, or SealedSecretError when the key, the bytes or the row binding do not match. */
export async function openSecret(key: Secret, sealed: string, aad: SealContext): Promise<string> {
  let bytes: Uint8Array<ArrayBuffer>;
  try {
    bytes = fromBase64(sealed);
  } catch {
    throw new SealedSecretError('sealed value is not valid base64');
  }
  if (bytes.length < IV_BYTES + TAG_BYTES) throw new SealedSecretError('sealed value is too short');
  let plaintext: ArrayBuffer;
  try {
    plaintext = await crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: bytes.subarray(0, IV_BYTES), additionalData: associatedData(aad), tagLength: TAG_BYTES * 8 },
      await aesKey(key),
      bytes.subarray(IV_BYTES),
    );
  } catch {
    throw new SealedSecretError();
  }
  return new TextDecoder('utf-8', { fatal: true }).decode(plaintext);
}
