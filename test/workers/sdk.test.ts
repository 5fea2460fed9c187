import { exports } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import { CellplaneError, createClient } from '../../src/sdk';

/**
 * The SDK inside workerd: it needs fetch alone, so a Worker can drive the
 * API with it (here the API is the Worker itself, reached through its entry).
 */

const tenant = inject('seededTenant');
const client = createClient({
  baseUrl: 'http://cellplane.test',
  token: tenant.token,
  fetch: (request) => exports.default.fetch(request),
});
const path = { o: tenant.org, p: tenant.project, envName: 'default' };

describe.sequential('the SDK on the Worker runtime', () => {
  it('makes typed calls and iterates keyset pages', async () => {
    await client.POST('/{o}/{p}/entity-types', {
      params: { path: { o: tenant.org, p: tenant.project } },
      body: { kind: 'EntityType', name: 'sdk-node', states: ['up'], initialState: 'up' },
    });
    for (const name of ['sdk-a', 'sdk-b', 'sdk-c']) {
      await client.POST('/{o}/{p}/envs/{envName}/entities', { params: { path }, body: { kind: 'Entity', entityType: 'sdk-node', name } });
    }
    const names: string[] = [];
    for await (const entity of client.paginate('/{o}/{p}/envs/{envName}/entities', { params: { path, query: { namePrefix: 'sdk-', limit: 2 } } })) {
      names.push(entity.name);
    }
    expect(names).toEqual(['sdk-a', 'sdk-b', 'sdk-c']);
  });

  it('throws CellplaneError with the code and request id', async () => {
    const error = await client
      .GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { ...path, name: 'sdk-missing' } } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CellplaneError);
    expect(error).toMatchObject({ status: 404, code: 'not_found', requestId: expect.any(String) });
  });
});
