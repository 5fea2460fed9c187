import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * `items` of an array property (docs/decisions.md, "Array items"): the type
 * and allowed values of every element, checked wherever property values are
 * (entities, relationships, action parameters), and checked in the
 * definition itself.
 */
describe('array property items', () => {
  let api: TestApi;
  let tenant: Tenant;
  let token: string;
  let proj: string;
  let env: string;

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    token = await mintToken(api, tenant, { role: 'owner' });
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const created = await api.call('POST', `${proj}/entity-types`, {
      token,
      body: {
        kind: 'EntityType',
        name: 'host',
        states: ['up'],
        initialState: 'up',
        properties: [
          { name: 'tags', type: 'array', items: { type: 'string' }, default: ['new'] },
          { name: 'ports', type: 'array', items: { type: 'integer', enum: [22, 80, 443] } },
          { name: 'anything', type: 'array' },
        ],
      },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body.properties[0]).toEqual({ name: 'tags', type: 'array', items: { type: 'string' }, default: ['new'] });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('refuses an element of the wrong type or outside the items enum, naming its index', async () => {
    const wrong = await api.call('POST', `${env}/entities`, {
      token,
      body: { kind: 'Entity', entityType: 'host', name: 'h-1', properties: { tags: ['a', 1], ports: [80, 8080] } },
    });
    expectError(wrong, 400, 'validation_failed');
    expect(wrong.body.details).toEqual(
      expect.arrayContaining([
        { path: 'properties.tags.1', message: 'must be of type string' },
        { path: 'properties.ports.1', message: 'must be one of [22,80,443]' },
      ]),
    );
    expect((await api.call('GET', `${env}/entities/h-1`, { token })).status).toBe(404);
  });

  it('accepts elements that match, fills the default, and leaves an array without items untyped', async () => {
    const created = await api.call('POST', `${env}/entities`, {
      token,
      body: { kind: 'Entity', entityType: 'host', name: 'h-2', properties: { ports: [22, 443], anything: [1, 'x', { a: true }] } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body.properties).toEqual({ tags: ['new'], ports: [22, 443], anything: [1, 'x', { a: true }] });
    const updated = await api.call('PUT', `${env}/entities/h-2`, { token, body: { properties: { tags: [true] } } });
    expectError(updated, 400, 'validation_failed');
  });

  it('checks the definition: items only on arrays, an items enum of its type, a default whose elements match', async () => {
    const bad = await api.call('POST', `${proj}/entity-types`, {
      token,
      body: {
        kind: 'EntityType',
        name: 'bad',
        states: ['up'],
        initialState: 'up',
        properties: [
          { name: 'name', type: 'string', items: { type: 'string' } },
          { name: 'sizes', type: 'array', items: { type: 'number', enum: ['big'] } },
          { name: 'labels', type: 'array', items: { type: 'string' }, default: ['ok', 2] },
        ],
      },
    });
    expectError(bad, 400, 'validation_failed');
    const paths = (bad.body.details as { path: string }[]).map((detail) => detail.path);
    expect(paths).toEqual(expect.arrayContaining(['properties.0.items', 'properties.1.items.enum.0', 'properties.2.default.1']));
  });

  it('checks action parameters the same way at trigger time', async () => {
    const action = await api.call('POST', `${proj}/actions`, {
      token,
      body: {
        kind: 'Action',
        name: 'open-ports',
        entityType: 'host',
        parameters: [{ name: 'ports', type: 'array', items: { type: 'integer' }, required: true }],
        trigger: { type: 'webhook', url: 'https://hooks.example.com/open' },
      },
    });
    expect(action.status, JSON.stringify(action.body)).toBe(201);
    const refused = await api.call('POST', `${env}/entities/h-2/actions/open-ports`, { token, body: { parameters: { ports: ['22'] } } });
    expectError(refused, 400, 'validation_failed');
    expect(refused.body.details).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'parameters.ports.0' })]));
  });
});
