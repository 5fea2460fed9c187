import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_TYPES_FILE, renderApiTypes } from '../../scripts/sdk-types';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * The SDK's types are the server's routes: src/sdk/api-types.ts is generated
 * from GET /openapi.json, so it must match what the server publishes now,
 * and a program using the SDK must type-check with DOM and ES libraries only.
 */
describe('SDK types', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi();
  });
  afterAll(async () => {
    await api?.close();
  });

  it('src/sdk/api-types.ts is generated from the OpenAPI document the server serves (run `npm run sdk:types` after a route change)', async () => {
    const document = (await api.call('GET', '/openapi.json')).body;
    expect(await renderApiTypes(document)).toBe(readFileSync(API_TYPES_FILE, 'utf8'));
  });

  it('type-checks a program that uses the SDK, and refuses its misuses', async () => {
    const tsc = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
    const project = fileURLToPath(new URL('../fixtures/sdk/tsconfig.json', import.meta.url));
    const result = await promisify(execFile)(process.execPath, [tsc, '-p', project], { encoding: 'utf8' }).then(
      () => ({ code: 0, output: '' }),
      (error: { code: number; stdout: string }) => ({ code: error.code, output: error.stdout }),
    );
    expect(result).toEqual({ code: 0, output: '' });
  }, 60_000);
});
