import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_TYPES_DIR, lineCount, renderApiTypes } from '../../scripts/sdk-types';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * The SDK's types are the server's routes: src/sdk/api-types/ is generated
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

  it('src/sdk/api-types/ is generated from the OpenAPI document the server serves (run `npm run sdk:types` after a route change)', async () => {
    const document = (await api.call('GET', '/openapi.json')).body;
    const files = await renderApiTypes(document);
    // nothing else in the folder: a part left from an earlier grouping would still be compiled, and read
    expect(readdirSync(API_TYPES_DIR).sort()).toEqual([...files.keys()].sort());
    for (const [name, text] of files) expect(readFileSync(new URL(name, API_TYPES_DIR), 'utf8'), name).toBe(text);
  });

  it('keeps every file of src/sdk/api-types/ under 600 lines, as every source file is', () => {
    const long = readdirSync(API_TYPES_DIR)
      .map((name) => ({ name, lines: lineCount(readFileSync(new URL(name, API_TYPES_DIR), 'utf8')) }))
      .filter((file) => file.lines >= 600);
    expect(long).toEqual([]);
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
