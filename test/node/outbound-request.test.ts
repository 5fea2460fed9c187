import { createHmac } from 'node:crypto';
import { jwtVerify } from 'jose';
import { describe, expect, it } from 'vitest';
import { WebhookTrigger } from '../../src/modules/actions/schemas';
import { buildOutboundRequest, signWebhook } from '../../src/runs/outbound-request';
import { hmacSha256 } from '../../src/node/platform';

const now = new Date('2026-11-21T10:00:00.000Z');
const trigger = (fields: Record<string, unknown>) => WebhookTrigger.parse({ type: 'webhook', url: 'https://hooks.example.com/x', ...fields });

describe('outbound request', () => {
  it('posts the JSON payload with the Standard Webhooks id and timestamp', async () => {
    const request = await buildOutboundRequest(trigger({ payload: { a: 1 }, headers: { 'x-team': 'payments' } }), { webhookId: 'msg_run-1', now });
    expect(request).toMatchObject({ url: 'https://hooks.example.com/x', method: 'POST', body: '{"a":1}' });
    expect(Object.fromEntries(request.headers)).toMatchObject({
      'content-type': 'application/json',
      'x-team': 'payments',
      'webhook-id': 'msg_run-1',
      'webhook-timestamp': String(now.getTime() / 1000),
    });
    expect(request.headers.has('webhook-signature')).toBe(false);
  });

  it('sends no body on GET', async () => {
    const request = await buildOutboundRequest(trigger({ method: 'GET', payload: { a: 1 } }), { webhookId: 'm', now });
    expect(request.body).toBeUndefined();
    expect(request.headers.has('content-type')).toBe(false);
  });

  it.each([
    [{ type: 'bearer', token: 'tok' }, 'authorization', 'Bearer tok'],
    [{ type: 'basic', username: 'ci', password: 'pä:ss' }, 'authorization', `Basic ${Buffer.from('ci:pä:ss').toString('base64')}`],
    [{ type: 'header', name: 'X-Api-Key', value: 'k-123' }, 'x-api-key', 'k-123'],
  ])('authenticates with %j', async (auth, header, value) => {
    const request = await buildOutboundRequest(trigger({ auth }), { webhookId: 'm', now });
    expect(request.headers.get(header)).toBe(value);
  });

  it('signs a JWT with jose for jwt auth', async () => {
    const request = await buildOutboundRequest(trigger({ auth: { type: 'jwt', secret: 'jwt-secret-value', claims: { sub: 'cellplane' } } }), {
      webhookId: 'm',
      now,
    });
    const token = request.headers.get('authorization')!.replace(/^Bearer /, '');
    const { payload, protectedHeader } = await jwtVerify(token, new TextEncoder().encode('jwt-secret-value'), { currentDate: now });
    expect(protectedHeader.alg).toBe('HS256');
    expect(payload).toMatchObject({ sub: 'cellplane', iat: now.getTime() / 1000, exp: now.getTime() / 1000 + 300 });
  });

  it('signs as Standard Webhooks specifies, for whsec_ and plain secrets', async () => {
    const key = Buffer.from('0123456789abcdef0123456789abcdef');
    const body = '{"a":1}';
    const expected = createHmac('sha256', key).update(`msg_1.${now.getTime() / 1000}.${body}`).digest('base64');
    expect(await signWebhook(`whsec_${key.toString('base64')}`, 'msg_1', now.getTime() / 1000, body)).toBe(`v1,${expected}`);
    const plain = createHmac('sha256', 'plain-secret').update(`msg_1.${now.getTime() / 1000}.${body}`).digest('base64');
    expect(await signWebhook('plain-secret', 'msg_1', now.getTime() / 1000, body)).toBe(`v1,${plain}`);
    const request = await buildOutboundRequest(trigger({ payload: { a: 1 } }), { webhookId: 'msg_1', now, signingSecret: 'plain-secret' });
    expect(request.headers.get('webhook-signature')).toBe(`v1,${plain}`);
  });

  it("signs the same with the Node host's own HMAC (RunEngine.hmacSha256) as with WebCrypto", async () => {
    const key = Buffer.from('0123456789abcdef0123456789abcdef');
    const body = '{"a":1,"text":"é ✓ 🚀"}';
    for (const secret of [`whsec_${key.toString('base64')}`, 'plain-secret', 'ünïcode-secret']) {
      expect(await signWebhook(secret, 'msg_2', 1_700_000_000, body, hmacSha256)).toBe(await signWebhook(secret, 'msg_2', 1_700_000_000, body));
    }
    const request = await buildOutboundRequest(trigger({ payload: { a: 1 } }), { webhookId: 'msg_1', now, signingSecret: 'plain-secret', hmacSha256 });
    const expected = createHmac('sha256', 'plain-secret').update(`msg_1.${now.getTime() / 1000}.{"a":1}`).digest('base64');
    expect(request.headers.get('webhook-signature')).toBe(`v1,${expected}`);
  });
});
