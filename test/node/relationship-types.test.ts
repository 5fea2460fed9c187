import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { relationships } from '../../src/db/schema';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenantWithRival, expectError, type Tenant } from '../support/fixtures';

const RELATIONSHIP_TYPE_FIELDS = [
  'name', 'displayName', 'cardinality', 'states', 'properties', 'constraints', 'fromEntityTypeName',
  'toEntityTypeName', 'orgId', 'projectId', 'createdAt', 'updatedAt',
].sort();

let counter = 0;
const freshName = (base: string) => `${base}-${++counter}`;

/** A minimal valid request from `service` to `vm`, with overrides. */
const relationshipTypeBody = (name: string, overrides: Record<string, unknown> = {}) => ({
  kind: 'RelationshipType',
  name,
  from: 'service',
  to: 'vm',
  states: ['active', 'draining'],
  ...overrides,
});

describe('relationship types', () => {
  const clock = manualClock(new Date('2026-11-21T10:00:00.000Z'));
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  let admin: string;
  let viewer: string;
  let otherOwner: string;
  let path: string;
  let envPath: string;

  const create = (name: string, overrides: Record<string, unknown> = {}) =>
    api.call('POST', path, { token: admin, body: relationshipTypeBody(name, overrides) });
  const put = (name: string, overrides: Record<string, unknown> = {}) =>
    api.call('PUT', `${path}/${encodeURIComponent(name)}`, { token: admin, body: relationshipTypeBody(name, overrides) });

  /** A `service` → `vm` relationship of `type` in the default environment, through the API. */
  async function relate(type: string, state?: string): Promise<string> {
    const names = [freshName('svc'), freshName('host')];
    for (const [name, entityType] of [[names[0], 'service'], [names[1], 'vm']]) {
      const entity = await api.call('POST', `${envPath}/entities`, { token: admin, body: { kind: 'Entity', entityType, name } });
      expect(entity.status, JSON.stringify(entity.body)).toBe(201);
    }
    const response = await api.call('POST', `${envPath}/relationships`, {
      token: admin,
      body: { relationshipType: type, from: names[0], to: names[1], ...(state ? { state } : {}) },
    });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body.id;
  }

  beforeAll(async () => {
    api = await createTestApi({ clock });
    ({ tenant, other, otherOwner, tokens: { admin, viewer } } = await createTenantWithRival(api));
    path = `/${tenant.org.slug}/${tenant.project.slug}/relationship-types`;
    envPath = `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;
    for (const name of ['service', 'vm', 'database']) {
      const response = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/entity-types`, {
        token: admin,
        body: { kind: 'EntityType', name, states: ['up'], initialState: 'up' },
      });
      expect(response.status).toBe(201);
    }
  });
  afterAll(() => api.close());

  describe('POST', () => {
    it('creates a type: 201 with exactly the fields of SPEC and the defaults', async () => {
      const response = await create('runs-on');
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(RELATIONSHIP_TYPE_FIELDS);
      expect(response.body).toEqual({
        name: 'runs-on',
        displayName: null,
        cardinality: 'many-to-many',
        states: ['active', 'draining'],
        properties: [],
        constraints: [],
        fromEntityTypeName: 'service',
        toEntityTypeName: 'vm',
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        createdAt: '2026-11-21T10:00:00.000Z',
        updatedAt: '2026-11-21T10:00:00.000Z',
      });
    });

    it('stores a full definition, constraints as given', async () => {
      const response = await create('uses', {
        displayName: 'Uses',
        to: 'database',
        cardinality: 'many-to-one',
        properties: [{ name: 'weight', type: 'number', default: 1 }],
        constraints: [{ kind: 'transition', from: 'active', to: ['draining'] }, { anything: { nested: [1, 2] } }],
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body).toMatchObject({
        displayName: 'Uses',
        cardinality: 'many-to-one',
        fromEntityTypeName: 'service',
        toEntityTypeName: 'database',
        properties: [{ name: 'weight', type: 'number', default: 1 }],
        constraints: [{ kind: 'transition', from: 'active', to: ['draining'] }, { anything: { nested: [1, 2] } }],
      });
    });

    it('refuses a taken name: 409 already_exists', async () => {
      const name = freshName('dup');
      expect((await create(name)).status).toBe(201);
      expectError(await create(name), 409, 'already_exists');
    });

    it('of concurrent creates of one name, exactly one wins', async () => {
      const name = freshName('race');
      const responses = await Promise.all(Array.from({ length: 4 }, () => create(name)));
      expect(responses.map((r) => r.status).sort()).toEqual([201, 409, 409, 409]);
    });

    it('refuses ends that are not entity types of the project: 400 invalid_reference', async () => {
      const one = await create(freshName('dangling'), { to: 'nowhere' });
      expectError(one, 400, 'invalid_reference');
      expect(one.body.details).toEqual([{ path: 'to', message: 'entity type "nowhere" not found' }]);
      const both = await create(freshName('dangling'), { from: 'ghost', to: 'nowhere' });
      expectError(both, 400, 'invalid_reference');
      expect(both.body.details.map((d: { path: string }) => d.path)).toEqual(['from', 'to']);
      // another project's entity type does not count
      const theirs = await api.call('POST', `/${other.org.slug}/${other.project.slug}/relationship-types`, {
        token: otherOwner,
        body: relationshipTypeBody('runs-on'),
      });
      expectError(theirs, 400, 'invalid_reference');
    });

    it('needs catalog:write: a viewer gets 403 forbidden', async () => {
      expectError(await api.call('POST', path, { token: viewer, body: relationshipTypeBody(freshName('nope')) }), 403, 'forbidden');
    });
  });

  describe('validation (400 validation_failed with details)', () => {
    const cases: [string, Record<string, unknown>, string[]][] = [
      ['missing required fields', { name: undefined, from: undefined, to: undefined, states: undefined }, ['name', 'from', 'to', 'states']],
      ['the wrong kind', { kind: 'EntityType' }, ['kind']],
      ['an unknown field', { fromEntityTypeName: 'service' }, ['(root)']],
      ['an unknown cardinality', { cardinality: 'some-to-some' }, ['cardinality']],
      ['empty states', { states: [] }, ['states']],
      ['duplicate states', { states: ['active', 'active'] }, ['states.1']],
      ['duplicate property names', { properties: [{ name: 'w', type: 'number' }, { name: 'w', type: 'string' }] }, ['properties.1.name']],
      ['a constraint that is not an object', { constraints: ['unique'] }, ['constraints.0']],
      ['a from breaking the name rules', { from: ' service' }, ['from']],
    ];

    it.each(cases)('refuses %s', async (_label, overrides, paths) => {
      const response = await api.call('POST', path, { token: admin, body: relationshipTypeBody(freshName('invalid'), overrides) });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details.map((d: { path: string }) => d.path).sort()).toEqual([...paths].sort());
    });
  });

  describe('GET', () => {
    it("lists the project's types by name", async () => {
      const response = await api.call('GET', path, { token: viewer });
      expect(response.status).toBe(200);
      const names = response.body.map((t: { name: string }) => t.name);
      expect(names).toEqual([...names].sort());
      expect(names).toEqual(expect.arrayContaining(['runs-on', 'uses']));
      for (const item of response.body) expect(Object.keys(item).sort()).toEqual(RELATIONSHIP_TYPE_FIELDS);
    });

    it('reads one type as created; 404 not_found when missing', async () => {
      const created = await create(freshName('read'));
      const response = await api.call('GET', `${path}/${created.body.name}`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual(created.body);
      expectError(await api.call('GET', `${path}/missing`, { token: viewer }), 404, 'not_found');
    });
  });

  describe('PUT', () => {
    it('replaces the definition wholesale and moves updatedAt', async () => {
      const name = freshName('replace');
      const created = await create(name, {
        displayName: 'Before',
        cardinality: 'one-to-one',
        properties: [{ name: 'w', type: 'number' }],
        constraints: [{ note: 'x' }],
      });
      clock.advance(5_000);
      const response = await put(name, { to: 'database', states: ['linked'] });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toEqual({
        ...created.body,
        displayName: null,
        cardinality: 'many-to-many',
        states: ['linked'],
        properties: [],
        constraints: [],
        toEntityTypeName: 'database',
        updatedAt: '2026-11-21T10:00:05.000Z',
      });
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).body).toEqual(response.body);
    });

    it('answers 404 not_found for a missing type', async () => {
      expectError(await put('ghost'), 404, 'not_found');
    });

    it('refuses a body whose name differs from the path: 400 validation_failed', async () => {
      const name = freshName('named');
      await create(name);
      const response = await api.call('PUT', `${path}/${name}`, { token: admin, body: relationshipTypeBody('renamed') });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([{ path: 'name', message: expect.stringContaining(name) }]);
    });

    it('refuses an end that is not an entity type: 400 invalid_reference', async () => {
      const name = freshName('moving');
      await create(name);
      const response = await put(name, { from: 'nowhere' });
      expectError(response, 400, 'invalid_reference');
      expect(response.body.details).toEqual([{ path: 'from', message: 'entity type "nowhere" not found' }]);
    });

    it('while relationships exist, keeps ends, cardinality and used states: 409 still_referenced', async () => {
      const name = freshName('busy');
      await create(name);
      await relate(name, 'draining');
      expectError(await put(name, { to: 'database' }), 409, 'still_referenced');
      expectError(await put(name, { cardinality: 'one-to-one' }), 409, 'still_referenced');
      const removed = await put(name, { states: ['active'] });
      expectError(removed, 409, 'still_referenced');
      expect(removed.body.error).toContain('"draining"');
      // the rest may change
      const ok = await put(name, { displayName: 'Busy', states: ['draining', 'gone'], properties: [{ name: 'w', type: 'number' }] });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    });
  });

  describe('DELETE', () => {
    it('deletes the type and its relationships: 200 { deleted: true, name }', async () => {
      const name = freshName('doomed');
      await create(name);
      const relationshipId = await relate(name);
      const response = await api.call('DELETE', `${path}/${name}`, { token: admin });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, name });
      expectError(await api.call('GET', `${path}/${name}`, { token: viewer }), 404, 'not_found');
      expect(await api.db.select().from(relationships).where(eq(relationships.id, relationshipId))).toEqual([]);
      expectError(await api.call('DELETE', `${path}/${name}`, { token: admin }), 404, 'not_found');
    });

    it('answers 404 not_found for a missing type', async () => {
      expectError(await api.call('DELETE', `${path}/missing`, { token: admin }), 404, 'not_found');
    });

    it('frees its entity types for deletion', async () => {
      const entityTypes = `/${tenant.org.slug}/${tenant.project.slug}/entity-types`;
      await api.call('POST', entityTypes, { token: admin, body: { kind: 'EntityType', name: 'rack', states: ['up'], initialState: 'up' } });
      const name = freshName('in-rack');
      await create(name, { to: 'rack' });
      expectError(await api.call('DELETE', `${entityTypes}/rack`, { token: admin }), 409, 'still_referenced');
      expect((await api.call('DELETE', `${path}/${name}`, { token: admin })).status).toBe(200);
      expect((await api.call('DELETE', `${entityTypes}/rack`, { token: admin })).status).toBe(200);
    });
  });

  it('racing an entity type delete, never leaves a relationship type pointing at nothing', async () => {
    const entityTypes = `/${tenant.org.slug}/${tenant.project.slug}/entity-types`;
    for (let i = 0; i < 8; i += 1) {
      const end = freshName('contested');
      await api.call('POST', entityTypes, { token: admin, body: { kind: 'EntityType', name: end, states: ['up'], initialState: 'up' } });
      const [created, deleted] = await Promise.all([
        create(freshName('racer'), { from: end, to: end }),
        api.call('DELETE', `${entityTypes}/${end}`, { token: admin }),
      ]);
      // exactly one wins, and the loser says why
      if (created.status === 201) expectError(deleted, 409, 'still_referenced');
      else {
        expectError(created, 400, 'invalid_reference');
        expect(deleted.status).toBe(200);
      }
    }
  });

  it('documents every route in /openapi.json', async () => {
    const document = (await api.call('GET', '/openapi.json')).body;
    expect(Object.keys(document.paths['/{o}/{p}/relationship-types']).sort()).toEqual(['get', 'post']);
    expect(Object.keys(document.paths['/{o}/{p}/relationship-types/{name}']).sort()).toEqual(['delete', 'get', 'put']);
    expect([...document.components.schemas.RelationshipType.required].sort()).toEqual(RELATIONSHIP_TYPE_FIELDS);
  });
});
