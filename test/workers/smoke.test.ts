import { exports } from 'cloudflare:workers';
import { expect, it } from 'vitest';

it('healthz', async () => {
  const res = await exports.default.fetch('http://cellplane.test/healthz');
  console.log(res.status, await res.text());
  expect(res.status).toBe(200);
});
