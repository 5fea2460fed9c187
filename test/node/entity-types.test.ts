import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cells, entities, environments, relationshipTypes } from '../../src/db/schema';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenantWithRival, expectError, type Tenant } from '../support/fixtures';

const ENTITY_TYPE_FIELDS = [
  'name', 'displayName', 'states', 'initialState', 'properties', 'metrics', 'constraints', 'syncTracked',
  'syncFreshness', 'applier', 'orgId', 'projectId', 'createdAt', 'updatedAt',
].sort();
const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

let counter = 0;
const freshName = (base: string) => `${base}-${++counter}`;

/** A minimal valid request, with overrides. */
const entityTypeBody = (name: string, overrides: Record<string, unknown> = {}) => ({
  kind: 'EntityType',
  name,
  states: ['provisioning', 'running', 'retired'],
  initialState: 'provisioning',
  ...overrides,
});

describe('entity types', () => {
  const clock = manualClock(new Date('2026-11-21T10:00:00.000Z'));
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  let admin: string;
  let viewer: string;
  let otherOwner: string;
  let path: string;

  const create = (name: string, overrides: Record<string, unknown> = {}) =>
    api.call('POST', path, { token: admin, body: entityTypeBody(name, overrides) });

  /** An entity row of `type` in environment `envName`, written directly: the entities API belongs to another module. */
  async function insertEntity(type: string, state: string, envName = 'default', t: Tenant = tenant) {
    const [env] = await api.db
      .select()
      .from(environments)
      .where(and(eq(environments.projectId, t.project.id), eq(environments.name, envName)));
    await api.db.insert(entities).values({
      orgId: t.org.id,
      projectId: t.project.id,
      envId: env!.id,
      entityTypeName: type,
      name: freshName('entity'),
      state,
    });
  }

  beforeAll(async () => {
    api = await createTestApi({ clock });
    ({ tenant, other, otherOwner, tokens: { admin, viewer } } = await createTenantWithRival(api, { environments: ['staging'] }));
    path = `/${tenant.org.slug}/${tenant.project.slug}/entity-types`;
  });
  afterAll(() => api.close());

  describe('POST', () => {
    it('creates a type: 201 with exactly the fields of SPEC, unset optional fields null', async () => {
      const response = await create('vm');
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(ENTITY_TYPE_FIELDS);
      expect(response.body).toEqual({
        name: 'vm',
        displayName: null,
        states: ['provisioning', 'running', 'retired'],
        initialState: 'provisioning',
        properties: [],
        metrics: [],
        constraints: [],
        syncTracked: false,
        syncFreshness: null,
        applier: null,
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        createdAt: '2026-11-21T10:00:00.000Z',
        updatedAt: '2026-11-21T10:00:00.000Z',
      });
    });

    it('stores a full definition as given', async () => {
      const full = entityTypeBody('database', {
        displayName: 'Database',
        properties: [
          { name: 'engine', type: 'string', required: true, enum: ['postgres', 'mysql'] },
          { name: 'port', type: 'integer', default: 5432, description: 'Listen port' },
        ],
        metrics: [{ name: 'cpu', unit: '%', min: 0, max: 100, capacity: 100 }, { name: 'connections' }],
        constraints: [
          { kind: 'unique', properties: ['engine', 'port'] },
          { kind: 'transition', from: 'provisioning', to: ['running'] },
        ],
        syncTracked: true,
        syncFreshness: { maxAgeSeconds: 600 },
        applier: 'terraform',
      });
      const response = await api.call('POST', path, { token: admin, body: full });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      const { kind: _kind, ...definition } = full;
      expect(response.body).toMatchObject(definition);
      expect(response.body.createdAt).toMatch(RFC3339_MS);
    });

    it('defaults syncFreshness to 3600 seconds for a sync-tracked type', async () => {
      const response = await create(freshName('synced'), { syncTracked: true });
      expect(response.status).toBe(201);
      expect(response.body).toMatchObject({ syncTracked: true, syncFreshness: { maxAgeSeconds: 3600 } });
    });

    it('refuses a taken name: 409 already_exists', async () => {
      const name = freshName('dup');
      expect((await create(name)).status).toBe(201);
      expectError(await create(name), 409, 'already_exists');
    });

    it('of concurrent creates of one name, exactly one wins', async () => {
      const name = freshName('race');
      const responses = await Promise.all(Array.from({ length: 5 }, () => create(name)));
      expect(responses.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
      for (const response of responses.filter((r) => r.status === 409)) expectError(response, 409, 'already_exists');
    });

    it('lets another project use the same name', async () => {
      const response = await api.call('POST', `/${other.org.slug}/${other.project.slug}/entity-types`, {
        token: otherOwner,
        body: entityTypeBody('vm'),
      });
      expect(response.status).toBe(201);
      expect(response.body.projectId).toBe(other.project.id);
    });

    it('needs catalog:write: a viewer gets 403 forbidden', async () => {
      expectError(await api.call('POST', path, { token: viewer, body: entityTypeBody(freshName('nope')) }), 403, 'forbidden');
    });
  });

  describe('validation (400 validation_failed with details)', () => {
    const cases: [string, Record<string, unknown>, string[]][] = [
      ['missing required fields', { name: undefined, states: undefined, initialState: undefined }, ['name', 'states', 'initialState']],
      ['the wrong kind', { kind: 'Entity' }, ['kind']],
      ['an unknown field', { color: 'blue' }, ['(root)']],
      ['a name breaking the name rules', { name: '-bad name' }, ['name']],
      ['empty states', { states: [] }, ['states']],
      ['duplicate states', { states: ['a', 'b', 'a'], initialState: 'a' }, ['states.2']],
      ['an initialState outside states', { initialState: 'gone' }, ['initialState']],
      ['duplicate property names', { properties: [{ name: 'x', type: 'string' }, { name: 'x', type: 'number' }] }, ['properties.1.name']],
      ['an unknown field in a property definition', { properties: [{ name: 'x', type: 'string', colour: 1 }] }, ['properties.0']],
      ['a default of the wrong type', { properties: [{ name: 'x', type: 'integer', default: 'one' }] }, ['properties.0.default']],
      ['duplicate metric names', { metrics: [{ name: 'cpu' }, { name: 'cpu' }] }, ['metrics.1.name']],
      ['a metric with min above max', { metrics: [{ name: 'cpu', min: 5, max: 1 }] }, ['metrics.0.min']],
      ['an unknown constraint kind', { constraints: [{ kind: 'range' }] }, ['constraints.0.kind']],
      [
        'a unique constraint on an undeclared property',
        { properties: [{ name: 'ip', type: 'string' }], constraints: [{ kind: 'unique', properties: ['ip', 'mac'] }] },
        ['constraints.0.properties.1'],
      ],
      [
        'a transition between undeclared states',
        { constraints: [{ kind: 'transition', from: 'nowhere', to: ['running', 'elsewhere'] }] },
        ['constraints.0.from', 'constraints.0.to.1'],
      ],
      ['a syncFreshness that is not positive', { syncFreshness: { maxAgeSeconds: 0 } }, ['syncFreshness.maxAgeSeconds']],
      ['a non-boolean syncTracked', { syncTracked: 'yes' }, ['syncTracked']],
    ];

    it.each(cases)('refuses %s', async (_label, overrides, paths) => {
      const body = { ...entityTypeBody(freshName('invalid')), ...overrides };
      const response = await api.call('POST', path, { token: admin, body });
      expectError(response, 400, 'validation_failed');
      const reported = (response.body.details as { path: string; message: string }[]).map((d) => d.path);
      expect(reported.sort()).toEqual([...paths].sort());
      for (const detail of response.body.details) expect(detail.message.length).toBeGreaterThan(0);
    });

    it('writes nothing for a refused request', async () => {
      const name = freshName('never');
      expectError(await create(name, { initialState: 'gone' }), 400, 'validation_failed');
      expectError(await api.call('GET', `${path}/${name}`, { token: viewer }), 404, 'not_found');
    });
  });

  describe('GET', () => {
    it('lists the project\'s types by name, never another project\'s', async () => {
      const response = await api.call('GET', path, { token: viewer });
      expect(response.status).toBe(200);
      const names = response.body.map((t: { name: string }) => t.name);
      expect(names).toEqual([...names].sort());
      expect(names).toContain('vm');
      for (const item of response.body) {
        expect(Object.keys(item).sort()).toEqual(ENTITY_TYPE_FIELDS);
        expect(item.projectId).toBe(tenant.project.id);
      }
    });

    it('reads one type as created', async () => {
      const created = await create(freshName('read'), { displayName: 'Read me' });
      const response = await api.call('GET', `${path}/${created.body.name}`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual(created.body);
    });

    it('answers 404 not_found for a missing type', async () => {
      expectError(await api.call('GET', `${path}/missing`, { token: viewer }), 404, 'not_found');
    });

    it('reaches a name with / and : when URL-encoded', async () => {
      const name = `aws:ec2/${++counter}`;
      expect((await create(name)).status).toBe(201);
      const response = await api.call('GET', `${path}/${encodeURIComponent(name)}`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body.name).toBe(name);
    });
  });

  describe('PUT', () => {
    it('replaces the definition wholesale: omitted fields return to their defaults', async () => {
      const name = freshName('replace');
      const created = await create(name, {
        displayName: 'Before',
        properties: [{ name: 'size', type: 'string' }],
        metrics: [{ name: 'cpu' }],
        syncTracked: true,
        applier: 'terraform',
      });
      expect(created.status).toBe(201);
      clock.advance(60_000);
      const response = await api.call('PUT', `${path}/${name}`, {
        token: admin,
        body: entityTypeBody(name, { states: ['up', 'down'], initialState: 'up' }),
      });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(Object.keys(response.body).sort()).toEqual(ENTITY_TYPE_FIELDS);
      expect(response.body).toMatchObject({
        name,
        displayName: null,
        states: ['up', 'down'],
        initialState: 'up',
        properties: [],
        metrics: [],
        constraints: [],
        syncTracked: false,
        syncFreshness: null,
        applier: null,
        createdAt: created.body.createdAt,
      });
      expect(new Date(response.body.updatedAt).getTime() - new Date(created.body.updatedAt).getTime()).toBe(60_000);
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).body).toEqual(response.body);
    });

    it('answers 404 not_found for a missing type', async () => {
      expectError(await api.call('PUT', `${path}/ghost`, { token: admin, body: entityTypeBody('ghost') }), 404, 'not_found');
    });

    it('refuses a body whose name differs from the path: 400 validation_failed', async () => {
      const name = freshName('named');
      await create(name);
      const response = await api.call('PUT', `${path}/${name}`, { token: admin, body: entityTypeBody('renamed') });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([{ path: 'name', message: expect.stringContaining(name) }]);
    });

    it('validates the body as POST does', async () => {
      const name = freshName('checked');
      await create(name);
      const response = await api.call('PUT', `${path}/${name}`, {
        token: admin,
        body: entityTypeBody(name, { constraints: [{ kind: 'transition', from: 'running', to: ['nowhere'] }] }),
      });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details.map((d: { path: string }) => d.path)).toEqual(['constraints.0.to.0']);
    });

    it('refuses to remove a state entities are in: 409 still_referenced', async () => {
      const name = freshName('busy');
      await create(name);
      await insertEntity(name, 'running', 'staging');
      const response = await api.call('PUT', `${path}/${name}`, {
        token: admin,
        body: entityTypeBody(name, { states: ['provisioning', 'retired'] }),
      });
      expectError(response, 409, 'still_referenced');
      expect(response.body.error).toContain('"running"');
      // a state no entity is in may go
      const ok = await api.call('PUT', `${path}/${name}`, {
        token: admin,
        body: entityTypeBody(name, { states: ['provisioning', 'running'] }),
      });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    });

    it('refuses to change unique constraints while entities exist: 409 still_referenced', async () => {
      const name = freshName('keyed');
      const properties = [{ name: 'ip', type: 'string' }];
      await create(name, { properties });
      const withUnique = entityTypeBody(name, { properties, constraints: [{ kind: 'unique', properties: ['ip'] }] });
      // without entities the constraints may change freely
      expect((await api.call('PUT', `${path}/${name}`, { token: admin, body: withUnique })).status).toBe(200);
      await insertEntity(name, 'provisioning');
      expectError(
        await api.call('PUT', `${path}/${name}`, { token: admin, body: entityTypeBody(name, { properties }) }),
        409,
        'still_referenced',
      );
      // other changes still go through
      const renamedDisplay = { ...withUnique, displayName: 'Keyed' };
      expect((await api.call('PUT', `${path}/${name}`, { token: admin, body: renamedDisplay })).status).toBe(200);
    });
  });

  describe('DELETE', () => {
    it('deletes an unused type: 200 { deleted: true, name }', async () => {
      const name = freshName('doomed');
      await create(name);
      const response = await api.call('DELETE', `${path}/${name}`, { token: admin });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, name });
      expectError(await api.call('GET', `${path}/${name}`, { token: viewer }), 404, 'not_found');
      expectError(await api.call('DELETE', `${path}/${name}`, { token: admin }), 404, 'not_found');
    });

    it('refuses while entities of the type exist in any environment: 409 still_referenced', async () => {
      const name = freshName('inhabited');
      await create(name);
      await insertEntity(name, 'running', 'staging');
      const response = await api.call('DELETE', `${path}/${name}`, { token: admin });
      expectError(response, 409, 'still_referenced');
      expect(response.body.error).toContain('"staging"');
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).status).toBe(200);
    });

    it('maps the foreign key refusing the delete to 409 still_referenced', async () => {
      // an entity the explicit check cannot see (its environment is another project's) stands in
      // for one created between the check and the delete: the RESTRICT foreign key refuses
      const name = freshName('guarded');
      await create(name);
      const [foreignEnv] = await api.db.select().from(environments).where(eq(environments.projectId, other.project.id));
      await api.db.insert(entities).values({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        envId: foreignEnv!.id,
        entityTypeName: name,
        name: freshName('stray'),
        state: 'running',
      });
      expectError(await api.call('DELETE', `${path}/${name}`, { token: admin }), 409, 'still_referenced');
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).status).toBe(200);
    });

    it('refuses while a relationship type names it: 409 still_referenced', async () => {
      const name = freshName('endpoint');
      await create(name);
      await api.db.insert(relationshipTypes).values({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        name: freshName('links'),
        fromEntityTypeName: 'vm',
        toEntityTypeName: name,
        cardinality: 'many-to-many',
        states: ['active'],
      });
      const response = await api.call('DELETE', `${path}/${name}`, { token: admin });
      expectError(response, 409, 'still_referenced');
      expect(response.body.error).toContain('relationship type');
    });

    it('refuses while a cell names it: 409 still_referenced', async () => {
      const name = freshName('celled');
      await create(name);
      await api.db.insert(cells).values({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        name: freshName('cell'),
        entityTypeName: name,
        placementPolicy: 'least-loaded',
        membershipMode: 'explicit',
      });
      const response = await api.call('DELETE', `${path}/${name}`, { token: admin });
      expectError(response, 409, 'still_referenced');
      expect(response.body.error).toContain('cell');
    });

    it('answers 404 not_found for a missing type', async () => {
      expectError(await api.call('DELETE', `${path}/missing`, { token: admin }), 404, 'not_found');
    });

    it('never reaches another project\'s type of the same name', async () => {
      // "vm" exists in both projects; this tenant's token deleting through the other's path is a 404
      expectError(await api.call('DELETE', `/${other.org.slug}/${other.project.slug}/entity-types/vm`, { token: admin }), 404, 'not_found');
      expect((await api.call('GET', `/${other.org.slug}/${other.project.slug}/entity-types/vm`, { token: otherOwner })).status).toBe(200);
    });
  });

  it('documents every route in /openapi.json', async () => {
    const document = (await api.call('GET', '/openapi.json')).body;
    const collection = document.paths['/{o}/{p}/entity-types'];
    const item = document.paths['/{o}/{p}/entity-types/{name}'];
    expect(Object.keys(collection).sort()).toEqual(['get', 'post']);
    expect(Object.keys(item).sort()).toEqual(['delete', 'get', 'put']);
    expect(Object.keys(item.delete.responses)).toContain('409');
    // every field is always present; the optional ones of SPEC are null when unset
    const schema = document.components.schemas.EntityType;
    expect([...schema.required].sort()).toEqual(ENTITY_TYPE_FIELDS);
    for (const field of ['displayName', 'syncFreshness', 'applier']) {
      expect(JSON.stringify(schema.properties[field]), field).toContain('null');
    }
  });
});
