import { Integer, Null, ObjectIdentifier, OctetString, Sequence, fromBER } from 'asn1js';
import { pem } from '@peculiar/utils/pem';

/**
 * The GitHub App's private key, as CODEHOST_APP_PRIVATE_KEY holds it. SPEC
 * accepts PKCS#1 (`-----BEGIN RSA PRIVATE KEY-----`, what GitHub's "Generate
 * a private key" downloads) and PKCS#8 (`-----BEGIN PRIVATE KEY-----`).
 * WebCrypto imports PKCS#8 only, and so does universal-github-app-jwt where
 * it cannot reach node:crypto (workerd), so a PKCS#1 key is wrapped into a
 * PKCS#8 PrivateKeyInfo once, here, on both hosts alike. The DER is parsed
 * and built with asn1js and the PEM armour with @peculiar/utils: no ASN.1 is
 * written by hand.
 *
 * Errors never quote the key: they name the variable and what it expects.
 */

const RSA_ENCRYPTION_OID = '1.2.840.113549.1.1.1';

export class PrivateKeyError extends Error {
  constructor(message: string) {
    super(`CODEHOST_APP_PRIVATE_KEY ${message}`);
    this.name = 'PrivateKeyError';
  }
}

/** Which PEM a key is: the label of its block. */
export type PrivateKeyFormat = 'pkcs1' | 'pkcs8';

/**
 * The key as PKCS#8 PEM, whichever of the two formats it came in. Secrets
 * pasted into a single-line variable often carry `\n` as two characters:
 * those are taken as line breaks, as @octokit/auth-app does.
 */
export function toPkcs8Pem(key: string): { pem: string; format: PrivateKeyFormat } {
  const text = key.replace(/\\n/g, '\n').trim();
  if (text.includes('ENCRYPTED')) throw new PrivateKeyError('is encrypted: export it without a passphrase (PKCS#1 or PKCS#8 PEM)');
  if (text.includes('-----BEGIN OPENSSH PRIVATE KEY-----')) {
    throw new PrivateKeyError('is an OpenSSH key: use the PEM GitHub generated (PKCS#1) or a PKCS#8 PEM');
  }
  let blocks;
  try {
    blocks = pem.decode(text);
  } catch {
    throw new PrivateKeyError('is not valid PEM: expects -----BEGIN RSA PRIVATE KEY----- (PKCS#1) or -----BEGIN PRIVATE KEY----- (PKCS#8)');
  }
  const pkcs8 = blocks.find((block) => block.label === 'PRIVATE KEY');
  if (pkcs8) return { pem: pem.encode('PRIVATE KEY', pkcs8.data), format: 'pkcs8' };
  const pkcs1 = blocks.find((block) => block.label === 'RSA PRIVATE KEY');
  if (!pkcs1) {
    throw new PrivateKeyError('holds no private key block: expects -----BEGIN RSA PRIVATE KEY----- (PKCS#1) or -----BEGIN PRIVATE KEY----- (PKCS#8)');
  }
  return { pem: pem.encode('PRIVATE KEY', wrapPkcs1(pkcs1.data)), format: 'pkcs1' };
}

/**
 * RFC 5208 PrivateKeyInfo around an RFC 8017 RSAPrivateKey:
 * SEQUENCE { version 0, AlgorithmIdentifier { rsaEncryption, NULL }, OCTET STRING { the PKCS#1 DER } }.
 */
function wrapPkcs1(der: Uint8Array): ArrayBuffer {
  const parsed = fromBER(der);
  const key = parsed.result;
  // RSAPrivateKey: version, n, e, d, p, q, dP, dQ, qInv (and, for multi-prime keys, more)
  const values = key instanceof Sequence ? key.valueBlock.value : [];
  if (parsed.offset === -1 || values.length < 9 || !values.slice(0, 9).every((value) => value instanceof Integer)) {
    throw new PrivateKeyError('is labelled RSA PRIVATE KEY but does not hold a PKCS#1 RSAPrivateKey');
  }
  return new Sequence({
    value: [
      new Integer({ value: 0 }),
      new Sequence({ value: [new ObjectIdentifier({ value: RSA_ENCRYPTION_OID }), new Null()] }),
      new OctetString({ valueHex: der }),
    ],
  }).toBER();
}

/**
 * Imports the PKCS#8 PEM as an RS256 signing key: a key WebCrypto refuses
 * (not RSA, truncated) is found at start-up of the code-hosting routes, not
 * at the first installation token.
 */
export async function assertSigningKey(pkcs8Pem: string): Promise<void> {
  try {
    await crypto.subtle.importKey('pkcs8', new Uint8Array(pem.decodeFirst(pkcs8Pem, 'PRIVATE KEY')), { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, false, ['sign']);
  } catch {
    throw new PrivateKeyError('is not a usable RSA private key (expects the PEM GitHub generated for the App, PKCS#1 or PKCS#8)');
  }
}
