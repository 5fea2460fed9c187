import { and, asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entities, entityChanges, environments, relationships } from '../../src/db/schema';
import { createTenantWithRival, expectError, mintToken, type TenantWithRival } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { webhookAction } from '../support/run-fixtures';

/**
 * POST ENV/batch (src/modules/batch, docs/batch.md): a sync source's
 * entities and relationships in one transaction, with ownership. Runs on
 * PGlite, and on Postgres with TEST_DATABASE_URL (where the racing batches
 * really race).
 *
 * Catalog: `vm` (provisioning → running | failed, running → stopped,
 * stopped → running; `size` enum, `cpus` default 1), `host`, `keyed`
 * (unique `ip`); relationship types `runs-on` (vm → host, many-to-one,
 * `weight` default 1), `mirrors` (vm → vm, one-to-one), `links` (host → host).
 * Every test writes in an environment of its own.
 */

const SOURCE = 'terraform:lineage-a';
const OTHER = 'terraform:lineage-b';

describe('POST ENV/batch', () => {
  let api: TestApi;
  let t: TenantWithRival;
  let owner: string;
  let proj: string;
  let n = 0;

  interface Env {
    name: string;
    id: string;
    path: string;
  }

  async function freshEnv(): Promise<Env> {
    const name = `batch-${(++n).toString(36)}`;
    const response = await api.call('POST', `${proj}/envs`, { token: owner, body: { name } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return { name, id: response.body.id, path: `${proj}/envs/${name}` };
  }

  const batch = (env: Env, body: Record<string, unknown>, token: string | undefined = owner) =>
    api.call('POST', `${env.path}/batch`, { token, body: { source: SOURCE, ...body } });

  async function ok(response: Promise<ApiResponse>): Promise<any> {
    const answered = await response;
    expect(answered.status, JSON.stringify(answered.body)).toBe(200);
    return answered.body;
  }

  const getEntity = (env: Env, name: string) => api.call('GET', `${env.path}/entities/${encodeURIComponent(name)}`, { token: owner });

  async function changes(env: Env): Promise<{ seq: number; type: string; entity: any }[]> {
    const response = await api.call('GET', `${env.path}/changes?after=0&limit=1000`, { token: owner });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body.changes;
  }

  const changeSeq = async (env: Env) =>
    (await api.db.select({ seq: environments.changeSeq }).from(environments).where(eq(environments.id, env.id)))[0]!.seq;

  const storedEntities = (env: Env) => api.db.select().from(entities).where(eq(entities.envId, env.id)).orderBy(asc(entities.name));

  const storedRelationships = (env: Env) =>
    api.db.select().from(relationships).where(eq(relationships.envId, env.id)).orderBy(asc(relationships.createdAt));

  /** An entity made by hand (no syncSource) or by another source, through the single-entity API. */
  async function handMade(env: Env, name: string, fields: Record<string, unknown> = {}) {
    const response = await api.call('POST', `${env.path}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name, ...fields } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  }

  beforeAll(async () => {
    api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' } });
    t = await createTenantWithRival(api, { environments: ['staging'] });
    owner = t.tokens.owner;
    proj = `/${t.tenant.org.slug}/${t.tenant.project.slug}`;
    const made = async (path: string, body: unknown) => {
      const response = await api.call('POST', `${proj}/${path}`, { token: owner, body });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
    };
    await made('entity-types', {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed', 'stopped'],
      initialState: 'provisioning',
      properties: [
        { name: 'size', type: 'string', enum: ['small', 'large'] },
        { name: 'cpus', type: 'integer', default: 1 },
      ],
      constraints: [
        { kind: 'transition', from: 'provisioning', to: ['running', 'failed'] },
        { kind: 'transition', from: 'running', to: ['stopped'] },
        { kind: 'transition', from: 'stopped', to: ['running'] },
      ],
    });
    await made('entity-types', { kind: 'EntityType', name: 'host', states: ['up', 'down'], initialState: 'up' });
    await made('entity-types', {
      kind: 'EntityType',
      name: 'keyed',
      states: ['up'],
      initialState: 'up',
      properties: [{ name: 'ip', type: 'string' }],
      constraints: [{ kind: 'unique', properties: ['ip'] }],
    });
    await made('relationship-types', {
      kind: 'RelationshipType',
      name: 'runs-on',
      from: 'vm',
      to: 'host',
      cardinality: 'many-to-one',
      states: ['active', 'draining'],
      properties: [{ name: 'weight', type: 'integer', default: 1 }],
    });
    await made('relationship-types', { kind: 'RelationshipType', name: 'mirrors', from: 'vm', to: 'vm', cardinality: 'one-to-one', states: ['active'] });
    await made('relationship-types', { kind: 'RelationshipType', name: 'links', from: 'host', to: 'host', states: ['active'] });
    await made('actions', webhookAction('deploy', 'http://127.0.0.1:9/hooks/{{ entity.name }}'));
  });
  afterAll(() => api.close());

  describe('entities', () => {
    it('creates absent entities owned by the source: initial state, defaults filled, lastSyncedAt = observedAt', async () => {
      const env = await freshEnv();
      const observedAt = '2026-01-02T03:04:05.678Z';
      const body = await ok(
        batch(env, {
          observedAt,
          entities: [
            { entityType: 'vm', name: 'web-1', properties: { size: 'small' }, labels: { team: 'web' } },
            { entityType: 'vm', name: 'web-2', state: 'running' },
            { entityType: 'host', name: 'module.net/host.a' },
          ],
        }),
      );
      expect(body).toEqual({
        source: SOURCE,
        dryRun: false,
        entities: { created: ['web-1', 'web-2', 'module.net/host.a'], updated: [], unchanged: 0, deleted: [], alreadyGone: 0, conflicts: [] },
        relationships: { created: 0, updated: 0, unchanged: 0, deleted: 0, conflicts: [] },
      });
      const web1 = (await getEntity(env, 'web-1')).body;
      expect(web1).toMatchObject({
        entityTypeName: 'vm',
        state: 'provisioning',
        properties: { size: 'small', cpus: 1 },
        labels: { team: 'web' },
        syncSource: SOURCE,
        lastSyncedAt: observedAt,
      });
      expect((await getEntity(env, 'web-2')).body).toMatchObject({ state: 'running', properties: { cpus: 1 }, labels: {} });
      expect((await getEntity(env, 'module.net/host.a')).body).toMatchObject({ entityTypeName: 'host', state: 'up' });
    });

    it('defaults observedAt to now', async () => {
      const env = await freshEnv();
      const before = Date.now();
      await ok(batch(env, { entities: [{ entityType: 'host', name: 'h' }] }));
      const synced = Date.parse((await getEntity(env, 'h')).body.lastSyncedAt);
      expect(synced).toBeGreaterThanOrEqual(before - 1000);
      expect(synced).toBeLessThanOrEqual(Date.now() + 1000);
    });

    it('updates what the source owns and differs: properties and labels replaced, state moved, one entity.updated each', async () => {
      const env = await freshEnv();
      await ok(
        batch(env, {
          observedAt: '2026-01-01T00:00:00.000Z',
          entities: [
            { entityType: 'vm', name: 'a', properties: { size: 'small', cpus: 4 }, labels: { team: 'web', tier: '1' } },
            { entityType: 'vm', name: 'b', properties: { size: 'small' } },
            { entityType: 'vm', name: 'c' },
          ],
        }),
      );
      const before = (await getEntity(env, 'a')).body;
      const body = await ok(
        batch(env, {
          observedAt: '2026-01-01T01:00:00.000Z',
          entities: [
            { entityType: 'vm', name: 'a', properties: { size: 'large' }, labels: { team: 'api' } },
            { entityType: 'vm', name: 'b', state: 'running', properties: { size: 'small' } },
            { entityType: 'vm', name: 'c' },
          ],
        }),
      );
      expect(body.entities).toEqual({ created: [], updated: ['a', 'b'], unchanged: 1, deleted: [], alreadyGone: 0, conflicts: [] });
      const after = (await getEntity(env, 'a')).body;
      expect(after).toMatchObject({
        id: before.id,
        properties: { size: 'large', cpus: 1 },
        labels: { team: 'api' },
        state: 'provisioning',
        syncSource: SOURCE,
        lastSyncedAt: '2026-01-01T01:00:00.000Z',
        createdAt: before.createdAt,
      });
      expect(Date.parse(after.updatedAt)).toBeGreaterThanOrEqual(Date.parse(before.updatedAt));
      expect((await getEntity(env, 'b')).body.state).toBe('running');
      const log = await changes(env);
      expect(log.map((c) => [c.seq, c.type, c.entity.name])).toEqual([
        [1, 'entity.created', 'a'],
        [2, 'entity.created', 'b'],
        [3, 'entity.created', 'c'],
        [4, 'entity.updated', 'a'],
        [5, 'entity.updated', 'b'],
      ]);
      expect(log[3]!.entity).toEqual(after);
    });

    it('writes nothing for an unchanged re-import: no updatedAt, no lastSyncedAt, no change row', async () => {
      const env = await freshEnv();
      const items = [
        { entityType: 'vm', name: 'a', properties: { size: 'small' }, labels: { x: '1', y: '2' } },
        { entityType: 'vm', name: 'b', state: 'running', properties: { cpus: 1 } },
        { entityType: 'host', name: 'h' },
      ];
      await ok(batch(env, { observedAt: '2026-01-01T00:00:00.000Z', entities: items }));
      const rowsBefore = await storedEntities(env);
      const seqBefore = await changeSeq(env);
      // the same state, keys in another order, defaults spelled out, a later observation
      const body = await ok(
        batch(env, {
          observedAt: '2026-01-02T00:00:00.000Z',
          entities: [
            { entityType: 'vm', name: 'a', properties: { cpus: 1, size: 'small' }, labels: { y: '2', x: '1' } },
            { entityType: 'vm', name: 'b', properties: {} },
            { entityType: 'host', name: 'h', labels: {} },
          ],
        }),
      );
      expect(body.entities).toEqual({ created: [], updated: [], unchanged: 3, deleted: [], alreadyGone: 0, conflicts: [] });
      expect(await storedEntities(env)).toEqual(rowsBefore);
      expect(await changeSeq(env)).toBe(seqBefore);
      expect(await changes(env)).toHaveLength(3);
    });

    it('keeps a state moved by hand when the source does not name one', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a' }] }));
      expect((await api.call('PUT', `${env.path}/entities/a`, { token: owner, body: { state: 'running' } })).status).toBe(200);
      const body = await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a' }] }));
      expect(body.entities.unchanged).toBe(1);
      expect((await getEntity(env, 'a')).body.state).toBe('running');
    });

    it('never moves lastSyncedAt backwards on an update from an older observation', async () => {
      const env = await freshEnv();
      await ok(batch(env, { observedAt: '2026-01-02T00:00:00.000Z', entities: [{ entityType: 'vm', name: 'a' }] }));
      await ok(batch(env, { observedAt: '2026-01-01T00:00:00.000Z', entities: [{ entityType: 'vm', name: 'a', properties: { size: 'large' } }] }));
      expect((await getEntity(env, 'a')).body).toMatchObject({ properties: { size: 'large' }, lastSyncedAt: '2026-01-02T00:00:00.000Z' });
    });

    it('deletes what the source owns, with its relationships; absent names are already gone', async () => {
      const env = await freshEnv();
      await ok(
        batch(env, {
          entities: [
            { entityType: 'vm', name: 'a' },
            { entityType: 'vm', name: 'b' },
            { entityType: 'host', name: 'h' },
          ],
          relationships: [{ relationshipType: 'runs-on', from: 'a', to: 'h' }],
        }),
      );
      const a = (await getEntity(env, 'a')).body;
      const body = await ok(batch(env, { deleteEntities: ['h', 'a', 'never-was'] }));
      expect(body.entities).toEqual({ created: [], updated: [], unchanged: 0, deleted: ['h', 'a'], alreadyGone: 1, conflicts: [] });
      expect((await storedEntities(env)).map((e) => e.name)).toEqual(['b']);
      expect(await storedRelationships(env)).toEqual([]);
      const log = await changes(env);
      expect(log.slice(3).map((c) => [c.seq, c.type, c.entity])).toEqual([
        [4, 'entity.deleted', { id: expect.any(String), name: 'h', entityTypeName: 'host' }],
        [5, 'entity.deleted', { id: a.id, name: 'a', entityTypeName: 'vm' }],
      ]);
    });

    it('keeps the cells of a deleted entity on its change, as a single delete does', async () => {
      const env = await freshEnv();
      const cell = `cell-${env.name}`;
      expect((await api.call('POST', `${proj}/cells`, { token: owner, body: { kind: 'Cell', name: cell, entityType: 'vm' } })).status).toBe(201);
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a' }] }));
      const member = await api.call('POST', `${proj}/cells/${cell}/members`, { token: owner, body: { entityName: 'a', entityTypeName: 'vm', envName: env.name } });
      expect(member.status, JSON.stringify(member.body)).toBeLessThan(300);
      await ok(batch(env, { deleteEntities: ['a'] }));
      const [deleted] = await api.db
        .select()
        .from(entityChanges)
        .where(and(eq(entityChanges.envId, env.id), eq(entityChanges.type, 'entity.deleted')));
      expect(deleted!.cells).toEqual([cell]);
      const filtered = await api.call('GET', `${env.path}/changes?after=0&cell=${cell}`, { token: owner });
      expect(filtered.body.changes.map((c: any) => c.type)).toContain('entity.deleted');
    });
  });

  describe('ownership', () => {
    it('reports an entity created by hand as a conflict and leaves it as it is', async () => {
      const env = await freshEnv();
      const manual = await handMade(env, 'manual', { properties: { size: 'small' } });
      const body = await ok(batch(env, { entities: [{ entityType: 'vm', name: 'manual', properties: { size: 'large' } }] }));
      expect(body.entities.conflicts).toEqual([{ name: 'manual', reason: 'created by hand', syncSource: null }]);
      expect(body.entities.updated).toEqual([]);
      expect((await getEntity(env, 'manual')).body).toEqual(manual);
    });

    it("reports another source's entity as a conflict, for an upsert and for a delete", async () => {
      const env = await freshEnv();
      await ok(api.call('POST', `${env.path}/batch`, { token: owner, body: { source: OTHER, entities: [{ entityType: 'vm', name: 'other' }] } }));
      const other = (await getEntity(env, 'other')).body;
      const seq = await changeSeq(env);
      const body = await ok(batch(env, { entities: [{ entityType: 'vm', name: 'other', properties: { size: 'large' } }] }));
      expect(body.entities.conflicts).toEqual([{ name: 'other', reason: `owned by "${OTHER}"`, syncSource: OTHER }]);
      const deletion = await ok(batch(env, { deleteEntities: ['other'] }));
      expect(deletion.entities).toMatchObject({ deleted: [], alreadyGone: 0, conflicts: [{ name: 'other', reason: `owned by "${OTHER}"`, syncSource: OTHER }] });
      expect((await getEntity(env, 'other')).body).toEqual(other);
      expect(await changeSeq(env)).toBe(seq);
    });

    it('refuses to delete an entity created by hand', async () => {
      const env = await freshEnv();
      await handMade(env, 'manual');
      const body = await ok(batch(env, { deleteEntities: ['manual'] }));
      expect(body.entities.conflicts).toEqual([{ name: 'manual', reason: 'created by hand', syncSource: null }]);
      expect((await getEntity(env, 'manual')).status).toBe(200);
    });

    it('reports an owned entity of another type as a conflict', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'host', name: 'x' }] }));
      const body = await ok(batch(env, { entities: [{ entityType: 'vm', name: 'x' }] }));
      expect(body.entities.conflicts).toEqual([{ name: 'x', reason: 'different entity type', syncSource: SOURCE }]);
      expect((await getEntity(env, 'x')).body.entityTypeName).toBe('host');
    });

    it('writes the rest of a request around its conflicts', async () => {
      const env = await freshEnv();
      await handMade(env, 'manual');
      const body = await ok(
        batch(env, {
          entities: [
            { entityType: 'vm', name: 'mine' },
            { entityType: 'vm', name: 'manual' },
          ],
        }),
      );
      expect(body.entities).toMatchObject({ created: ['mine'], conflicts: [{ name: 'manual' }] });
    });
  });

  describe('dry run', () => {
    it('answers what the write would answer and writes nothing', async () => {
      const env = await freshEnv();
      await handMade(env, 'manual');
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'old' }, { entityType: 'vm', name: 'same' }, { entityType: 'host', name: 'h' }] }));
      const rows = await storedEntities(env);
      const relationshipRows = await storedRelationships(env);
      const seq = await changeSeq(env);
      const request = {
        entities: [
          { entityType: 'vm', name: 'new' },
          { entityType: 'vm', name: 'same' },
          { entityType: 'vm', name: 'manual', properties: { size: 'large' } },
          { entityType: 'vm', name: 'old', properties: { size: 'small' } },
        ],
        relationships: [{ relationshipType: 'runs-on', from: 'new', to: 'h' }],
        deleteEntities: ['gone'],
      };
      const dry = await ok(batch(env, { ...request, dryRun: true }));
      expect(dry.dryRun).toBe(true);
      expect(await storedEntities(env)).toEqual(rows);
      expect(await storedRelationships(env)).toEqual(relationshipRows);
      expect(await changeSeq(env)).toBe(seq);
      const real = await ok(batch(env, request));
      expect({ ...dry, dryRun: false }).toEqual(real);
      expect(real.entities).toMatchObject({ created: ['new'], updated: ['old'], unchanged: 1, alreadyGone: 1 });
      expect(real.relationships.created).toBe(1);
    });

    it('refuses as the write would', async () => {
      const env = await freshEnv();
      const response = await batch(env, { dryRun: true, entities: [{ entityType: 'vm', name: 'a', properties: { size: 'huge' } }] });
      expectError(response, 400, 'validation_failed');
    });
  });

  describe('refusals', () => {
    it('refuses the whole request when one item does not validate: nothing written, no change', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'keep' }, { entityType: 'vm', name: 'owned' }] }));
      const rows = await storedEntities(env);
      const seq = await changeSeq(env);
      const response = await batch(env, {
        entities: [
          { entityType: 'vm', name: 'fine' },
          { entityType: 'vm', name: 'bad', properties: { size: 'huge', nope: 1 } },
          { entityType: 'missing-type', name: 'odd' },
          { entityType: 'vm', name: 'lost', state: 'nowhere' },
          { entityType: 'vm', name: 'keep', properties: { size: 'large' } },
        ],
        deleteEntities: ['owned'],
      });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([
        { path: 'entities.1.properties.size', message: expect.stringContaining('must be one of') },
        { path: 'entities.1.properties.nope', message: 'is not declared by the type' },
        { path: 'entities.2.entityType', message: 'entity type "missing-type" does not exist in this project' },
        { path: 'entities.3.state', message: expect.stringContaining('is not one of') },
      ]);
      expect(await storedEntities(env)).toEqual(rows);
      expect(await changeSeq(env)).toBe(seq);
    });

    it('refuses a required property missing, as a single create does', async () => {
      const env = await freshEnv();
      const response = await batch(env, { entities: [{ entityType: 'vm', name: 'a', properties: { cpus: 'two' } }] });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([{ path: 'entities.0.properties.cpus', message: 'must be of type integer' }]);
    });

    it('refuses a state change the type does not allow (409 transition_not_allowed), nothing written', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a' }] }));
      const seq = await changeSeq(env);
      const response = await batch(env, {
        entities: [
          { entityType: 'vm', name: 'b' },
          { entityType: 'vm', name: 'a', state: 'stopped' },
        ],
      });
      expectError(response, 409, 'transition_not_allowed');
      expect(response.body.details).toEqual([{ path: 'entities.1.state', message: expect.stringContaining('provisioning → stopped') }]);
      expect((await storedEntities(env)).map((e) => [e.name, e.state])).toEqual([['a', 'provisioning']]);
      expect(await changeSeq(env)).toBe(seq);
    });

    it('refuses repeated names and contradictions in the body', async () => {
      const env = await freshEnv();
      const repeated = await batch(env, {
        entities: [
          { entityType: 'vm', name: 'a' },
          { entityType: 'vm', name: 'a' },
        ],
        deleteEntities: ['b', 'b'],
      });
      expectError(repeated, 400, 'validation_failed');
      expect(repeated.body.details.map((d: any) => d.path)).toEqual(['entities.1.name', 'deleteEntities.1']);
      const both = await batch(env, { entities: [{ entityType: 'vm', name: 'a' }], deleteEntities: ['a'] });
      expectError(both, 400, 'validation_failed');
      expect(both.body.details.map((d: any) => d.path)).toEqual(['deleteEntities.0']);
      const link = { relationshipType: 'runs-on', from: 'a', to: 'h' };
      const twice = await batch(env, { relationships: [link, link], deleteRelationships: [link] });
      expectError(twice, 400, 'validation_failed');
      expect(twice.body.details.map((d: any) => d.path)).toEqual(['relationships.1', 'deleteRelationships.0']);
      expect(await storedEntities(env)).toEqual([]);
    });

    it('refuses more than 1000 entities (clients chunk)', async () => {
      const env = await freshEnv();
      const response = await batch(env, { entities: Array.from({ length: 1001 }, (_, i) => ({ entityType: 'host', name: `h-${i}` })) });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([{ path: 'entities', message: expect.any(String) }]);
      expect(await storedEntities(env)).toEqual([]);
    });

    it('takes exactly 1000 entities', async () => {
      const env = await freshEnv();
      const body = await ok(batch(env, { entities: Array.from({ length: 1000 }, (_, i) => ({ entityType: 'host', name: `h-${i}` })) }));
      expect(body.entities.created).toHaveLength(1000);
      const log = await changes(env);
      expect(log.map((c) => c.seq)).toEqual(Array.from({ length: 1000 }, (_, i) => i + 1));
    });

    it('refuses a body over 1 MiB (413)', async () => {
      const env = await freshEnv();
      const response = await batch(env, { entities: [{ entityType: 'host', name: 'h', labels: Object.fromEntries(Array.from({ length: 1100 }, (_, i) => [`k${i}`, 'x'.repeat(1000)])) }] });
      expectError(response, 413, 'payload_too_large');
    });

    it('refuses an observedAt in the future, and a source out of bounds', async () => {
      const env = await freshEnv();
      const future = new Date(Date.now() + 60 * 60 * 1000).toISOString();
      const response = await batch(env, { observedAt: future, entities: [{ entityType: 'host', name: 'h' }] });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([{ path: 'observedAt', message: expect.any(String) }]);
      expectError(await batch(env, { source: '' }), 400, 'validation_failed');
      expectError(await api.call('POST', `${env.path}/batch`, { token: owner, body: {} }), 400, 'validation_failed');
      expectError(await batch(env, { unknownField: true }), 400, 'validation_failed');
      expect(await storedEntities(env)).toEqual([]);
    });
  });

  describe('change log', () => {
    it('logs one change per written entity, in sequence, each carrying the entity as stored', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a' }, { entityType: 'vm', name: 'b' }, { entityType: 'vm', name: 'c' }] }));
      await ok(
        batch(env, {
          entities: [
            { entityType: 'vm', name: 'a', properties: { size: 'large' } },
            { entityType: 'vm', name: 'b' },
            { entityType: 'vm', name: 'd' },
          ],
          deleteEntities: ['c'],
        }),
      );
      const log = await changes(env);
      expect(log.map((c) => [c.seq, c.type, c.entity.name])).toEqual([
        [1, 'entity.created', 'a'],
        [2, 'entity.created', 'b'],
        [3, 'entity.created', 'c'],
        [4, 'entity.deleted', 'c'],
        [5, 'entity.updated', 'a'],
        [6, 'entity.created', 'd'],
      ]);
      expect(log[4]!.entity).toEqual((await getEntity(env, 'a')).body);
      expect(log[5]!.entity).toEqual((await getEntity(env, 'd')).body);
      expect(await changeSeq(env)).toBe(6);
    });

    it('publishes the changes to a live stream after the commit', async () => {
      const env = await freshEnv();
      const base = await api.listen();
      const controller = new AbortController();
      const response = await fetch(`${base}${env.path}/entities/stream`, { headers: { authorization: `Bearer ${owner}` }, signal: controller.signal });
      expect(response.status).toBe(200);
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
      await ok(batch(env, { entities: [{ entityType: 'host', name: 'h1' }, { entityType: 'host', name: 'h2' }] }));
      let text = '';
      while (!(text.includes('id: 2') && text.includes('"h2"'))) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
      }
      controller.abort();
      expect(text).toContain('event: entity.created');
      expect(text).toMatch(/id: 1\n/);
      expect(text).toMatch(/id: 2\n/);
    });
  });

  describe('relationships', () => {
    it('creates, leaves unchanged, updates and deletes what the source owns', async () => {
      const env = await freshEnv();
      const hosts = [{ entityType: 'host', name: 'h1' }, { entityType: 'host', name: 'h2' }];
      const created = await ok(
        batch(env, {
          entities: [{ entityType: 'vm', name: 'a' }, { entityType: 'vm', name: 'b' }, ...hosts],
          relationships: [
            { relationshipType: 'runs-on', from: 'a', to: 'h1' },
            { relationshipType: 'runs-on', from: 'b', to: 'h1', properties: { weight: 3 }, labels: { zone: 'x' } },
            { relationshipType: 'links', from: 'h1', to: 'h2' },
          ],
        }),
      );
      expect(created.relationships).toEqual({ created: 3, updated: 0, unchanged: 0, deleted: 0, conflicts: [] });
      const stored = await storedRelationships(env);
      expect(stored.map((r) => [r.relationshipTypeName, r.state, r.properties, r.labels])).toEqual(
        expect.arrayContaining([
          ['runs-on', 'active', { weight: 1 }, {}],
          ['runs-on', 'active', { weight: 3 }, { zone: 'x' }],
          ['links', 'active', {}, {}],
        ]),
      );
      // the same again: nothing written
      const again = await ok(
        batch(env, {
          relationships: [
            { relationshipType: 'runs-on', from: 'a', to: 'h1', properties: { weight: 1 } },
            { relationshipType: 'runs-on', from: 'b', to: 'h1', properties: { weight: 3 }, labels: { zone: 'x' } },
            { relationshipType: 'links', from: 'h1', to: 'h2' },
          ],
        }),
      );
      expect(again.relationships).toEqual({ created: 0, updated: 0, unchanged: 3, deleted: 0, conflicts: [] });
      expect(await storedRelationships(env)).toEqual(stored);
      const changed = await ok(
        batch(env, {
          relationships: [
            { relationshipType: 'runs-on', from: 'a', to: 'h1', state: 'draining' },
            { relationshipType: 'runs-on', from: 'b', to: 'h1', properties: { weight: 5 } },
          ],
          deleteRelationships: [
            { relationshipType: 'links', from: 'h1', to: 'h2' },
            { relationshipType: 'links', from: 'h2', to: 'h1' },
            { relationshipType: 'runs-on', from: 'nobody', to: 'h1' },
          ],
        }),
      );
      expect(changed.relationships).toEqual({ created: 0, updated: 2, unchanged: 0, deleted: 1, conflicts: [] });
      const final = await storedRelationships(env);
      expect(final.map((r) => [r.relationshipTypeName, r.state, r.properties, r.labels])).toEqual(
        expect.arrayContaining([
          ['runs-on', 'draining', { weight: 1 }, {}],
          ['runs-on', 'active', { weight: 5 }, {}],
        ]),
      );
      expect(final).toHaveLength(2);
      // relationships are not entity changes
      expect((await changes(env)).map((c) => c.type)).toEqual(['entity.created', 'entity.created', 'entity.created', 'entity.created']);
    });

    it('links to anyone, but only from what the source owns', async () => {
      const env = await freshEnv();
      await handMade(env, 'manual');
      expect((await api.call('POST', `${env.path}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'host', name: 'shared' } })).status).toBe(201);
      const body = await ok(
        batch(env, {
          entities: [{ entityType: 'vm', name: 'mine' }],
          relationships: [
            { relationshipType: 'runs-on', from: 'mine', to: 'shared' },
            { relationshipType: 'runs-on', from: 'manual', to: 'shared' },
          ],
        }),
      );
      expect(body.relationships).toEqual({
        created: 1,
        updated: 0,
        unchanged: 0,
        deleted: 0,
        conflicts: [{ relationshipType: 'runs-on', from: 'manual', to: 'shared', reason: 'from entity "manual" was created by hand' }],
      });
      const manualLink = await api.call('POST', `${env.path}/relationships`, { token: owner, body: { relationshipType: 'runs-on', from: 'manual', to: 'shared' } });
      expect(manualLink.status).toBe(201);
      const unlink = await ok(batch(env, { deleteRelationships: [{ relationshipType: 'runs-on', from: 'manual', to: 'shared' }] }));
      expect(unlink.relationships).toMatchObject({
        deleted: 0,
        conflicts: [{ relationshipType: 'runs-on', from: 'manual', to: 'shared', reason: 'from entity "manual" was created by hand' }],
      });
      expect(await storedRelationships(env)).toHaveLength(2);
    });

    it('refuses a missing end, an end of the wrong type and an unknown type (400), nothing written', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'host', name: 'h' }] }));
      const seq = await changeSeq(env);
      const response = await batch(env, {
        entities: [{ entityType: 'vm', name: 'a' }],
        deleteEntities: ['h'],
        relationships: [
          { relationshipType: 'runs-on', from: 'a', to: 'h' },
          { relationshipType: 'runs-on', from: 'a', to: 'a' },
        ],
      });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual([
        { path: 'relationships.0.to', message: 'entity "h" does not exist in this environment' },
        { path: 'relationships.1.to', message: expect.stringContaining('is a "vm"') },
      ]);
      expect((await storedEntities(env)).map((e) => e.name)).toEqual(['h']);
      expect(await changeSeq(env)).toBe(seq);
      const unknown = await batch(env, { relationships: [{ relationshipType: 'nope', from: 'a', to: 'h', properties: {} }] });
      expectError(unknown, 400, 'validation_failed');
      expect(unknown.body.details).toEqual([{ path: 'relationships.0.relationshipType', message: expect.stringContaining('"nope" does not exist') }]);
      const badProperties = await batch(env, { relationships: [{ relationshipType: 'runs-on', from: 'a', to: 'h', properties: { weight: 'x' } }] });
      expect(badProperties.body.details).toEqual([{ path: 'relationships.0.properties.weight', message: 'must be of type integer' }]);
    });

    it('keeps cardinality exact: 409 cardinality_violation, nothing written; a request may replace the one it has', async () => {
      const env = await freshEnv();
      await ok(
        batch(env, {
          entities: ['a', 'b', 'c'].map((name) => ({ entityType: 'vm', name })),
          relationships: [{ relationshipType: 'mirrors', from: 'a', to: 'b' }],
        }),
      );
      const seq = await changeSeq(env);
      const taken = await batch(env, { entities: [{ entityType: 'vm', name: 'd' }], relationships: [{ relationshipType: 'mirrors', from: 'a', to: 'c' }] });
      expectError(taken, 409, 'cardinality_violation');
      expect(taken.body.details).toEqual([{ path: 'relationships.0', message: expect.stringContaining('"a" already has an outgoing "mirrors"') }]);
      const incoming = await batch(env, { relationships: [{ relationshipType: 'mirrors', from: 'c', to: 'b' }] });
      expectError(incoming, 409, 'cardinality_violation');
      expect(incoming.body.details).toEqual([{ path: 'relationships.0', message: expect.stringContaining('"b" already has an incoming "mirrors"') }]);
      const inRequest = await batch(env, {
        entities: [{ entityType: 'vm', name: 'd' }],
        relationships: [
          { relationshipType: 'mirrors', from: 'c', to: 'a' },
          { relationshipType: 'mirrors', from: 'c', to: 'd' },
        ],
      });
      expectError(inRequest, 409, 'cardinality_violation');
      // which of the two is refused depends on the order of their ends' ids
      expect(inRequest.body.details).toEqual([{ path: expect.stringMatching(/^relationships\.[01]$/), message: expect.stringContaining('"c" already has an outgoing "mirrors"') }]);
      expect((await storedEntities(env)).map((e) => e.name)).toEqual(['a', 'b', 'c']);
      expect(await changeSeq(env)).toBe(seq);
      const swapped = await ok(
        batch(env, {
          relationships: [{ relationshipType: 'mirrors', from: 'a', to: 'c' }],
          deleteRelationships: [{ relationshipType: 'mirrors', from: 'a', to: 'b' }],
        }),
      );
      expect(swapped.relationships).toMatchObject({ created: 1, deleted: 1 });
      const two = await batch(env, {
        relationships: [
          { relationshipType: 'mirrors', from: 'b', to: 'a' },
          { relationshipType: 'mirrors', from: 'c', to: 'a' },
        ],
      });
      expectError(two, 409, 'cardinality_violation');
    });
  });

  describe('unique constraints', () => {
    it('claims unique values as a single write does: taken by another entity, or twice in the request, is 409', async () => {
      const env = await freshEnv();
      const single = await api.call('POST', `${env.path}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'keyed', name: 'single', properties: { ip: '10.0.0.1' } } });
      expect(single.status).toBe(201);
      const taken = await batch(env, { entities: [{ entityType: 'keyed', name: 'k1', properties: { ip: '10.0.0.1' } }] });
      expectError(taken, 409, 'constraint_violation');
      expect(taken.body.details).toEqual([{ path: 'entities.0.properties.ip', message: expect.any(String) }]);
      const twice = await batch(env, {
        entities: [
          { entityType: 'keyed', name: 'k1', properties: { ip: '10.0.0.2' } },
          { entityType: 'keyed', name: 'k2', properties: { ip: '10.0.0.2' } },
        ],
      });
      expectError(twice, 409, 'constraint_violation');
      expect(twice.body.details.map((d: any) => d.path)).toEqual(['entities.1.properties.ip']);
      expect((await storedEntities(env)).map((e) => e.name)).toEqual(['single']);
      // what the batch claims, a single create finds taken
      await ok(batch(env, { entities: [{ entityType: 'keyed', name: 'k1', properties: { ip: '10.0.0.3' } }] }));
      const later = await api.call('POST', `${env.path}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'keyed', name: 'later', properties: { ip: '10.0.0.3' } } });
      expectError(later, 409, 'constraint_violation');
      // an update releases the old value and claims the new one; a delete releases its value
      await ok(batch(env, { entities: [{ entityType: 'keyed', name: 'k1', properties: { ip: '10.0.0.4' } }] }));
      expect((await api.call('POST', `${env.path}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'keyed', name: 'later', properties: { ip: '10.0.0.3' } } })).status).toBe(201);
      await ok(batch(env, { deleteEntities: ['k1'], entities: [{ entityType: 'keyed', name: 'k2', properties: { ip: '10.0.0.4' } }] }));
      expect((await getEntity(env, 'k2')).body.properties).toEqual({ ip: '10.0.0.4' });
    });
  });

  describe('runs', () => {
    it('completes an active run when a batch moves its entity to the action\'s onSuccess state', async () => {
      const env = await freshEnv();
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a' }] }));
      const run = await api.call('POST', `${env.path}/entities/a/actions/deploy`, { token: owner, body: {} });
      expect(run.status, JSON.stringify(run.body)).toBe(202);
      await ok(batch(env, { entities: [{ entityType: 'vm', name: 'a', state: 'running' }] }));
      const after = await api.call('GET', `${env.path}/action-runs/${run.body.id}`, { token: owner });
      expect(after.body.status).toBe('succeeded');
    });
  });

  describe('access', () => {
    const body = { source: SOURCE, entities: [{ entityType: 'host', name: 'h' }] };

    it('needs a token (401), data:write (403), and a visible environment (404)', async () => {
      const env = await freshEnv();
      expectError(await api.call('POST', `${env.path}/batch`, { body }), 401, 'unauthorized');
      expectError(await api.call('POST', `${env.path}/batch`, { token: t.tokens.viewer, body }), 403, 'forbidden');
      expect((await api.call('POST', `${env.path}/batch`, { token: t.tokens.member, body })).status).toBe(200);
      expectError(await api.call('POST', `${env.path}/batch`, { token: t.otherOwner, body }), 404, 'not_found');
      expectError(await api.call('POST', `${proj}/envs/no-such-env/batch`, { token: owner, body }), 404, 'not_found');
      const other = `/${t.other.org.slug}/${t.other.project.slug}/envs/default/batch`;
      expectError(await api.call('POST', other, { token: owner, body }), 404, 'not_found');
    });

    it('refuses a token pinned to another environment (403)', async () => {
      const pinned = await mintToken(api, t.tenant, { role: 'admin', envName: 'staging', as: owner });
      expectError(await api.call('POST', `${proj}/envs/default/batch`, { token: pinned, body }), 403, 'forbidden');
      expect((await api.call('POST', `${proj}/envs/staging/batch`, { token: pinned, body })).status).toBe(200);
    });

    it('refuses a cell-scoped token whatever the batch holds (403 cell_scope_violation)', async () => {
      const env = await freshEnv();
      const cell = `scope-${env.name}`;
      expect((await api.call('POST', `${proj}/cells`, { token: owner, body: { kind: 'Cell', name: cell, entityType: 'host' } })).status).toBe(201);
      const scoped = await mintToken(api, t.tenant, { role: 'admin', cellScopes: [cell], as: owner });
      expectError(await api.call('POST', `${env.path}/batch`, { token: scoped, body }), 403, 'cell_scope_violation');
      expectError(await api.call('POST', `${env.path}/batch`, { token: scoped, body: { source: SOURCE } }), 403, 'cell_scope_violation');
      expect(await storedEntities(env)).toEqual([]);
    });
  });

  describe('concurrency', () => {
    it('two batches of one source racing on the same names: no duplicate, no lost write, no 500', async () => {
      const env = await freshEnv();
      const names = Array.from({ length: 120 }, (_, i) => `vm-${String(i).padStart(3, '0')}`);
      // a few names exist already, owned; the rest are created by whichever batch comes first
      await ok(batch(env, { entities: names.slice(0, 20).map((name) => ({ entityType: 'vm', name })), relationships: [] }));
      const hosts = [{ entityType: 'host', name: 'h' }];
      const request = (size: string) =>
        batch(env, {
          entities: [...hosts, ...names.map((name) => ({ entityType: 'vm', name, properties: { size } }))],
          relationships: names.slice(0, 30).map((name) => ({ relationshipType: 'runs-on', from: name, to: 'h', properties: { weight: size === 'small' ? 1 : 2 } })),
        });
      for (let round = 0; round < 3; round++) {
        const responses = await Promise.all([request('small'), request('large'), request(round % 2 ? 'small' : 'large')]);
        for (const response of responses) expect(response.status, JSON.stringify(response.body).slice(0, 500)).toBe(200);
        // each name created once, by one of them: the others found it taken and compared against it
        const created = responses.flatMap((r) => r.body.entities.created as string[]).sort();
        expect(created).toEqual(round === 0 ? ['h', ...names.slice(20)] : []);
        for (const response of responses) {
          const { created: made, updated, unchanged, conflicts } = response.body.entities;
          expect(made.length + updated.length + unchanged).toBe(names.length + 1);
          expect(conflicts).toEqual([]);
        }
        const rows = await storedEntities(env);
        expect(rows.map((r) => r.name)).toEqual(['h', ...names]);
        // every write has its change, and the last change of each entity is what is stored
        const log = await changes(env);
        expect(log.map((c) => c.seq)).toEqual(log.map((_, i) => i + 1));
        const last = new Map<string, any>();
        for (const change of log) last.set(change.entity.name, change.entity);
        for (const row of rows) expect(last.get(row.name).properties, row.name).toEqual(row.properties);
        const links = await storedRelationships(env);
        expect(links).toHaveLength(30);
        const sizes = new Set(rows.filter((r) => r.name !== 'h').map((r) => (r.properties as any).size));
        expect(sizes.size).toBe(1);
      }
    });

    it('batches racing on the same relationships: each created once, the others compare against it', async () => {
      const env = await freshEnv();
      const vms = Array.from({ length: 60 }, (_, i) => `vm-${String(i).padStart(2, '0')}`);
      await ok(batch(env, { entities: [{ entityType: 'host', name: 'h' }, ...vms.map((name) => ({ entityType: 'vm', name }))] }));
      const request = (weight: number) =>
        batch(env, { relationships: vms.map((name) => ({ relationshipType: 'runs-on', from: name, to: 'h', properties: { weight } })) });
      const responses = await Promise.all([request(1), request(2), request(3)]);
      for (const response of responses) expect(response.status, JSON.stringify(response.body).slice(0, 500)).toBe(200);
      expect(responses.reduce((sum, r) => sum + r.body.relationships.created, 0)).toBe(vms.length);
      for (const response of responses) {
        const { created, updated, unchanged } = response.body.relationships;
        expect(created + updated + unchanged).toBe(vms.length);
      }
      const links = await storedRelationships(env);
      expect(links).toHaveLength(vms.length);
      // one request's weight everywhere: the last to commit
      expect(new Set(links.map((link) => (link.properties as { weight: number }).weight)).size).toBe(1);
    });
  });
});
