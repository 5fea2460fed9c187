import { SignJWT } from 'jose';
import { z } from '@hono/zod-openapi';
import { Credential, HeaderName, TemplateString } from './trigger-fields';

/**
 * The HTTP request of one delivery attempt, from a webhook trigger whose
 * strings are already interpolated (src/runs/interpolation.ts): method, URL,
 * configured headers, the JSON payload, the trigger's auth, and the
 * Standard Webhooks headers: `webhook-id` (the same for every attempt of a
 * run, so receivers can drop duplicates), `webhook-timestamp`, and
 * `webhook-signature` when the trigger names a signing secret.
 */

/** The credentials a request may carry, as a webhook trigger defines them (DECISIONS §4). */
export const WebhookAuth = z
  .discriminatedUnion('type', [
    z.strictObject({ type: z.literal('bearer'), token: Credential }),
    z.strictObject({ type: z.literal('basic'), username: TemplateString.min(1), password: Credential }),
    z.strictObject({ type: z.literal('header'), name: HeaderName, value: Credential }),
    z.strictObject({
      type: z.literal('jwt'),
      secret: Credential,
      algorithm: z.literal('HS256').default('HS256'),
      claims: z.record(z.string(), z.unknown()).optional(),
      expiresInSeconds: z.number().int().positive().max(86_400).default(300),
    }),
  ])
  .openapi('ActionWebhookAuth', {
    description: 'bearer, basic, header, or jwt (an HS256 JWT sent as `Authorization: Bearer`)',
  });

/** What a request is built from: the parts of a webhook trigger, interpolated. */
export interface OutboundRequestSpec {
  url: string;
  method: string;
  headers?: Record<string, string>;
  payload?: unknown;
  auth?: z.output<typeof WebhookAuth>;
}

export interface OutboundRequest {
  url: string;
  method: string;
  headers: Headers;
  body: string | undefined;
}

export const USER_AGENT = 'Cellplane-Webhook/0.1';

const utf8 = (text: string) => new TextEncoder().encode(text);

function base64(bytes: Uint8Array): string {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** HMAC-SHA256 of a message's UTF-8 with `key`, synchronously, where the host has a native one (RunEngine.hmacSha256). */
export type HmacSha256 = (key: Uint8Array, message: string) => Uint8Array;

/**
 * Standard Webhooks: HMAC-SHA256 over `id.timestamp.body`, base64, as
 * `v1,<signature>`. A `whsec_`-prefixed secret is base64 key material (the
 * scheme's own format); any other secret is used as its UTF-8 bytes. With
 * `hmacSha256` (RunEngine.hmacSha256) the host computes it; else WebCrypto.
 */
export async function signWebhook(secret: string, id: string, timestamp: number, body: string, hmacSha256?: HmacSha256): Promise<string> {
  const keyBytes = secret.startsWith('whsec_') ? Uint8Array.from(atob(secret.slice(6)), (ch) => ch.charCodeAt(0)) : utf8(secret);
  const message = `${id}.${timestamp}.${body}`;
  if (hmacSha256) return `v1,${base64(hmacSha256(keyBytes, message))}`;
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const signature = new Uint8Array(await crypto.subtle.sign('HMAC', key, utf8(message)));
  return `v1,${base64(signature)}`;
}

async function authorization(auth: NonNullable<OutboundRequestSpec['auth']>, now: Date): Promise<[string, string]> {
  switch (auth.type) {
    case 'bearer':
      return ['authorization', `Bearer ${auth.token}`];
    case 'basic':
      return ['authorization', `Basic ${base64(utf8(`${auth.username}:${auth.password}`))}`];
    case 'header':
      return [auth.name, auth.value];
    case 'jwt': {
      const issuedAt = Math.floor(now.getTime() / 1000);
      const jwt = await new SignJWT({ ...(auth.claims ?? {}) })
        .setProtectedHeader({ alg: auth.algorithm, typ: 'JWT' })
        .setIssuedAt(issuedAt)
        .setExpirationTime(issuedAt + auth.expiresInSeconds)
        .sign(utf8(auth.secret));
      return ['authorization', `Bearer ${jwt}`];
    }
  }
}

export async function buildOutboundRequest(
  trigger: OutboundRequestSpec,
  delivery: { webhookId: string; now: Date; signingSecret?: string; hmacSha256?: HmacSha256 },
): Promise<OutboundRequest> {
  const headers = new Headers({ 'user-agent': USER_AGENT });
  for (const [name, value] of Object.entries(trigger.headers ?? {})) headers.set(name, value);
  const hasBody = trigger.method !== 'GET' && trigger.payload !== undefined;
  const body = hasBody ? JSON.stringify(trigger.payload) : undefined;
  if (body !== undefined) headers.set('content-type', 'application/json');
  if (trigger.auth) {
    const [name, value] = await authorization(trigger.auth, delivery.now);
    headers.set(name, value);
  }
  const timestamp = Math.floor(delivery.now.getTime() / 1000);
  headers.set('webhook-id', delivery.webhookId);
  headers.set('webhook-timestamp', String(timestamp));
  if (delivery.signingSecret !== undefined) {
    headers.set('webhook-signature', await signWebhook(delivery.signingSecret, delivery.webhookId, timestamp, body ?? '', delivery.hmacSha256));
  }
  return { url: trigger.url, method: trigger.method, headers, body };
}
