import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { userPreferences } from '../../src/db/schema';
import { MAX_PREFERENCE_BYTES } from '../../src/modules/preferences/schemas';
import { createTenant, expectError, mintToken } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { signUp, type TestUser } from '../support/people';

/**
 * User preferences (SPEC "User preferences"): a JSON object per user and
 * key; upsert, read (null when unset), delete (204 always); 64 KB of JSON at
 * most (docs/people/preferences.md); a user session only.
 */

/** A preference value whose compact JSON is exactly `bytes` bytes long. */
function valueOfSize(bytes: number): Record<string, string> {
  const envelope = JSON.stringify({ blob: '' }).length;
  const value = { blob: 'x'.repeat(bytes - envelope) };
  expect(new TextEncoder().encode(JSON.stringify(value)).length).toBe(bytes);
  return value;
}

describe('user preferences', () => {
  let api: TestApi;
  let alice: TestUser;
  let bob: TestUser;
  let serviceToken: string;

  const path = (key: string) => `/user/preferences/${encodeURIComponent(key)}`;
  const get = (user: TestUser, key: string) => api.call('GET', path(key), { token: user.token });
  const put = (user: TestUser, key: string, body: unknown) => api.call('PUT', path(key), { token: user.token, body });
  const del = (user: TestUser, key: string) => api.call('DELETE', path(key), { token: user.token });

  beforeAll(async () => {
    api = await createTestApi();
    alice = await signUp(api);
    bob = await signUp(api);
    serviceToken = await mintToken(api, await createTenant(api), { role: 'owner' });
  });
  afterAll(() => api.close());

  it('answers null for a key never set', async () => {
    const response = await get(alice, 'never.set');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ value: null });
  });

  it('stores a value (PUT answers it), reads it back, and overwrites it whole', async () => {
    const first = await put(alice, 'graph.layout', { value: { layout: 'dagre', depth: 2, nested: { pinned: ['a', 'b'] } } });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body).toEqual({ value: { layout: 'dagre', depth: 2, nested: { pinned: ['a', 'b'] } } });
    expect((await get(alice, 'graph.layout')).body).toEqual({ value: { layout: 'dagre', depth: 2, nested: { pinned: ['a', 'b'] } } });

    const second = await put(alice, 'graph.layout', { value: { layout: 'grid' } });
    expect(second.status).toBe(200);
    expect(second.body).toEqual({ value: { layout: 'grid' } });
    // replaced, not merged
    expect((await get(alice, 'graph.layout')).body).toEqual({ value: { layout: 'grid' } });
    const rows = await api.db
      .select()
      .from(userPreferences)
      .where(and(eq(userPreferences.userId, alice.id), eq(userPreferences.key, 'graph.layout')));
    expect(rows).toHaveLength(1);
  });

  it('settles concurrent first PUTs of one key: every one 200, one row, holding one of the values', async () => {
    const values = Array.from({ length: 8 }, (_, i) => ({ writer: i }));
    const responses = await Promise.all(values.map((value) => put(alice, 'raced', { value })));
    expect(responses.map((response) => response.status)).toEqual(values.map(() => 200));
    const rows = await api.db
      .select({ value: userPreferences.value })
      .from(userPreferences)
      .where(and(eq(userPreferences.userId, alice.id), eq(userPreferences.key, 'raced')));
    expect(rows).toHaveLength(1);
    expect(values).toContainEqual(rows[0]!.value);
    expect((await get(alice, 'raced')).body).toEqual({ value: rows[0]!.value });
  });

  it('accepts an empty object', async () => {
    expect((await put(alice, 'empty', { value: {} })).body).toEqual({ value: {} });
    expect((await get(alice, 'empty')).body).toEqual({ value: {} });
  });

  it('deletes with 204 and no body; the key reads null after; deleting again is 204 too', async () => {
    await put(alice, 'to-delete', { value: { a: 1 } });
    const removed = await del(alice, 'to-delete');
    expect(removed.status).toBe(204);
    expect(removed.body).toBeUndefined();
    expect((await get(alice, 'to-delete')).body).toEqual({ value: null });
    const again = await del(alice, 'to-delete');
    expect(again.status).toBe(204);
    expect(again.body).toBeUndefined();
    expect((await del(alice, 'never-set-at-all')).status).toBe(204);
  });

  it("keeps each user's preferences apart: same key, own values; a delete touches only the caller's", async () => {
    await put(alice, 'ui.theme', { value: { theme: 'dark' } });
    expect((await get(bob, 'ui.theme')).body).toEqual({ value: null });
    await put(bob, 'ui.theme', { value: { theme: 'light' } });
    expect((await get(alice, 'ui.theme')).body).toEqual({ value: { theme: 'dark' } });
    expect((await del(bob, 'ui.theme')).status).toBe(204);
    expect((await get(alice, 'ui.theme')).body).toEqual({ value: { theme: 'dark' } });
    expect((await get(bob, 'ui.theme')).body).toEqual({ value: null });
  });

  describe('the 64 KB limit, on the JSON text of the value', () => {
    it('stores a value of exactly 64 KB (65,536 bytes)', async () => {
      const value = valueOfSize(MAX_PREFERENCE_BYTES);
      const response = await put(alice, 'big', { value });
      expect(response.status, JSON.stringify(response.body).slice(0, 200)).toBe(200);
      expect((await get(alice, 'big')).body).toEqual({ value });
    });

    it('refuses one byte more with 400 validation_failed, leaving the stored value as it was', async () => {
      await put(alice, 'bounded', { value: { kept: true } });
      const response = await put(alice, 'bounded', { value: valueOfSize(MAX_PREFERENCE_BYTES + 1) });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([{ path: 'value', message: expect.stringContaining('65536') }]);
      expect((await get(alice, 'bounded')).body).toEqual({ value: { kept: true } });
    });

    it('counts UTF-8 bytes, not characters', async () => {
      // 'é' is two bytes: 33,000 of them are 66,000 bytes in fewer than 65,536 characters
      const response = await put(alice, 'accents', { value: { text: 'é'.repeat(33_000) } });
      expectError(response, 400, 'validation_failed');
    });

    it('does not count the formatting of the body: a pretty-printed body of a value under the limit is stored', async () => {
      const value = valueOfSize(MAX_PREFERENCE_BYTES - 100);
      const rawBody = JSON.stringify({ value }, null, 200).replace('{', `{${' '.repeat(1000)}`);
      expect(rawBody.length).toBeGreaterThan(MAX_PREFERENCE_BYTES);
      const response = await api.call('PUT', path('pretty'), { token: alice.token, rawBody });
      expect(response.status).toBe(200);
    });

    it('refuses a body over 1 MiB with the general 413 payload_too_large', async () => {
      const response = await put(alice, 'huge', { value: { blob: 'x'.repeat(1024 * 1024 + 10) } });
      expectError(response, 413, 'payload_too_large');
    });
  });

  describe('invalid bodies (400)', () => {
    it('refuses invalid JSON with invalid_json', async () => {
      expectError(await api.call('PUT', path('k'), { token: alice.token, rawBody: '{"value": {' }), 400, 'invalid_json');
    });

    it('refuses a missing value, a missing body, and an unknown field with validation_failed', async () => {
      expectError(await put(alice, 'k', {}), 400, 'validation_failed');
      expectError(await api.call('PUT', path('k'), { token: alice.token }), 400, 'validation_failed');
      expectError(await put(alice, 'k', { value: { a: 1 }, extra: true }), 400, 'validation_failed');
    });

    it.each([
      ['an array', [1, 2]],
      ['a string', 'dark'],
      ['a number', 42],
      ['a boolean', true],
      ['null', null],
    ])('refuses a value that is %s with validation_failed', async (_what, value) => {
      const response = await put(alice, 'not-object', { value });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details[0].path).toBe('value');
      expect((await get(alice, 'not-object')).body).toEqual({ value: null });
    });
  });

  describe('keys', () => {
    it('accepts letters, digits and . _ : - up to 128 characters', async () => {
      for (const key of ['a', 'UI.theme_v2:dark-mode', '9lives', 'k'.repeat(128)]) {
        const response = await put(alice, key, { value: { key } });
        expect(response.status, key).toBe(200);
        expect((await get(alice, key)).body).toEqual({ value: { key } });
      }
    });

    it.each([
      ['longer than 128 characters', 'k'.repeat(129)],
      ['starting with a dot', '.hidden'],
      ['starting with a hyphen', '-x'],
      ['with a slash', 'a/b'],
      ['with a space', 'a b'],
      ['with a non-ASCII letter', 'thème'],
    ])('refuses a key %s with 400 validation_failed, on every method', async (_what, key) => {
      expectError(await get(alice, key), 400, 'validation_failed');
      expectError(await put(alice, key, { value: {} }), 400, 'validation_failed');
      expectError(await del(alice, key), 400, 'validation_failed');
    });
  });

  describe('who may call (401 without a user session)', () => {
    it('refuses no credentials, a service token and a bad session on every method, touching nothing', async () => {
      await put(alice, 'guarded', { value: { v: 1 } });
      for (const token of [undefined, serviceToken, 'not-a-session-token']) {
        expectError(await api.call('GET', path('guarded'), { token }), 401, 'unauthorized');
        expectError(await api.call('PUT', path('guarded'), { token, body: { value: { v: 2 } } }), 401, 'unauthorized');
        expectError(await api.call('DELETE', path('guarded'), { token }), 401, 'unauthorized');
      }
      expect((await get(alice, 'guarded')).body).toEqual({ value: { v: 1 } });
    });

    it('refuses the session cookie on a write from an untrusted origin, and accepts a read with it', async () => {
      const headers = { cookie: alice.cookie };
      const read = await api.call('GET', path('guarded'), { headers });
      expect(read.status).toBe(200);
      expect(read.body).toEqual({ value: { v: 1 } });
      expectError(
        await api.call('PUT', path('guarded'), { headers: { ...headers, origin: 'https://evil.example.com' }, body: { value: { v: 3 } } }),
        403,
        'origin_not_trusted',
      );
    });
  });
});

describe('user preferences in bootstrap mode', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi();
  });
  afterAll(() => api.close());

  it('answers 401: bootstrap mode is no user', async () => {
    expectError(await api.call('GET', '/user/preferences/theme'), 401, 'unauthorized');
    expectError(await api.call('PUT', '/user/preferences/theme', { body: { value: {} } }), 401, 'unauthorized');
    expectError(await api.call('DELETE', '/user/preferences/theme'), 401, 'unauthorized');
  });
});
