import { and, asc, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cellMembers, cells, entities, entityChanges, entityMetrics, entityTypes, environments } from '../../src/db/schema';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';

const ENTITY_FIELDS = [
  'createdAt', 'entityTypeName', 'envId', 'id', 'labels', 'lastSyncedAt', 'name', 'orgId', 'projectId',
  'properties', 'state', 'syncSource', 'updatedAt',
].sort();

describe('entities', () => {
  const clock = manualClock(new Date('2026-11-21T10:00:00.000Z'));
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let viewer: string;
  let defaultEnvId: string;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

  const envPath = (env = 'default') => `/${tenant.org.slug}/${tenant.project.slug}/envs/${env}/entities`;
  const entityPath = (name: string, env = 'default') => `${envPath(env)}/${encodeURIComponent(name)}`;

  /** An entity type row, inserted directly: the entity-types API is another module's. */
  async function entityType(name: string, fields: Partial<typeof entityTypes.$inferInsert> = {}) {
    await api.db.insert(entityTypes).values({
      orgId: tenant.org.id,
      projectId: tenant.project.id,
      name,
      states: ['active', 'retired'],
      initialState: 'active',
      ...fields,
    });
  }

  async function envId(name: string): Promise<string> {
    const [env] = await api.db
      .select({ id: environments.id })
      .from(environments)
      .where(and(eq(environments.projectId, tenant.project.id), eq(environments.name, name)));
    return env!.id;
  }

  const changesOf = (env: string) =>
    api.db.select().from(entityChanges).where(eq(entityChanges.envId, env)).orderBy(asc(entityChanges.seq));

  async function create(body: Record<string, unknown>, options: { token?: string; env?: string } = {}) {
    return api.call('POST', envPath(options.env), { token: options.token ?? owner, body: { kind: 'Entity', ...body } });
  }

  async function created(body: Record<string, unknown>, options: { token?: string; env?: string } = {}) {
    const response = await create(body, options);
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  }

  beforeAll(async () => {
    api = await createTestApi({ clock });
    tenant = await createTenant(api);
    await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'staging' } });
    owner = await mintToken(api, tenant, { role: 'owner' });
    viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
    defaultEnvId = await envId('default');
    await entityType('vm', {
      states: ['provisioning', 'running', 'stopped', 'retired'],
      initialState: 'provisioning',
      properties: [
        { name: 'region', type: 'string', required: true },
        { name: 'size', type: 'string', enum: ['small', 'large'], default: 'small' },
        { name: 'cores', type: 'integer' },
        { name: 'tags', type: 'array' },
      ],
      metrics: [{ name: 'cpu', min: 0, max: 1 }, { name: 'mem', unit: 'MiB' }],
      constraints: [
        { kind: 'transition', from: 'provisioning', to: ['running'] },
        { kind: 'transition', from: 'running', to: ['stopped', 'retired'] },
        { kind: 'transition', from: 'stopped', to: ['running', 'retired'] },
      ],
      syncTracked: true,
      syncFreshness: { maxAgeSeconds: 600 },
    });
    await entityType('db', {
      states: ['up', 'down'],
      initialState: 'up',
      properties: [
        { name: 'host', type: 'string' },
        { name: 'port', type: 'integer' },
        { name: 'dns', type: 'string' },
      ],
      constraints: [
        { kind: 'unique', properties: ['host', 'port'] },
        { kind: 'unique', properties: ['dns'] },
      ],
    });
    await entityType('plain');
    await entityType('tracked', { syncTracked: true });
  });
  afterAll(() => api.close());

  describe('POST ENV/entities', () => {
    it('creates an entity with exactly the fields of SPEC, the initial state and filled defaults', async () => {
      const name = fresh('web');
      const response = await create({ entityType: 'vm', name, properties: { region: 'eu' }, labels: { team: 'payments' } });
      expect(response.status).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(ENTITY_FIELDS);
      expect(response.body).toMatchObject({
        entityTypeName: 'vm',
        name,
        state: 'provisioning',
        properties: { region: 'eu', size: 'small' },
        labels: { team: 'payments' },
        lastSyncedAt: null,
        syncSource: null,
        createdAt: '2026-11-21T10:00:00.000Z',
        updatedAt: '2026-11-21T10:00:00.000Z',
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        envId: defaultEnvId,
      });
      expect(response.body.id).toMatch(/^[0-9a-f-]{36}$/);
    });

    it('takes an explicit state, sync fields and a name with / and :', async () => {
      const name = fresh('team/app:web');
      const body = await created({
        entityType: 'vm',
        name,
        state: 'running',
        properties: { region: 'us', size: 'large', cores: 4 },
        syncSource: 'terraform',
        lastSyncedAt: '2026-11-21T09:00:00Z',
      });
      expect(body).toMatchObject({ state: 'running', syncSource: 'terraform', lastSyncedAt: '2026-11-21T09:00:00.000Z' });
      const read = await api.call('GET', entityPath(name), { token: viewer });
      expect(read.status).toBe(200);
      expect(read.body).toEqual(body);
    });

    it('writes one entity.created change carrying the full entity, in the same transaction', async () => {
      const env = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token: owner, body: { name: fresh('log') } });
      const id = await envId(env.body.name);
      const first = await created({ entityType: 'plain', name: 'a' }, { env: env.body.name });
      const second = await created({ entityType: 'plain', name: 'b' }, { env: env.body.name });
      const changes = await changesOf(id);
      expect(changes.map((c) => [c.seq, c.type, c.entityName])).toEqual([
        [1, 'entity.created', 'a'],
        [2, 'entity.created', 'b'],
      ]);
      expect(changes[0]!.entity).toEqual(first);
      expect(changes[1]!.entity).toEqual(second);
      expect(changes[0]).toMatchObject({ entityId: first.id, entityTypeName: 'plain' });
    });

    it('is 404 not_found for an unknown entity type', async () => {
      expectError(await create({ entityType: 'nope', name: fresh('x') }), 404, 'not_found');
    });

    it('is 400 invalid_state for a state the type does not declare', async () => {
      expectError(await create({ entityType: 'vm', name: fresh('x'), state: 'flying', properties: { region: 'eu' } }), 400, 'invalid_state');
    });

    it('is 400 validation_failed with details for properties that do not match the type', async () => {
      const response = await create({
        entityType: 'vm',
        name: fresh('x'),
        properties: { size: 'huge', cores: 1.5, colour: 'red' },
      });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual(
        expect.arrayContaining([
          { path: 'properties.size', message: expect.stringContaining('must be one of') },
          { path: 'properties.cores', message: 'must be of type integer' },
          { path: 'properties.colour', message: 'is not declared by the type' },
          { path: 'properties.region', message: 'is required' },
        ]),
      );
    });

    it.each([
      ['an unknown field', { entityType: 'plain', name: 'x1', colour: 'red' }],
      ['no kind', { kind: undefined, entityType: 'plain', name: 'x2' }],
      ['another kind', { kind: 'Cell', entityType: 'plain', name: 'x3' }],
      ['no name', { entityType: 'plain' }],
      ['no entityType', { name: 'x4' }],
      ['a name breaking the name rules', { entityType: 'plain', name: '-bad' }],
      ['a reserved name', { entityType: 'plain', name: 'metrics' }],
      ['a label key with ":"', { entityType: 'plain', name: 'x5', labels: { 'a:b': 'c' } }],
      ['a non-string label', { entityType: 'plain', name: 'x6', labels: { a: 1 } }],
      ['a lastSyncedAt that is not a date-time', { entityType: 'plain', name: 'x7', lastSyncedAt: 'yesterday' }],
    ])('is 400 validation_failed for %s', async (_label, body) => {
      expectError(await create(body), 400, 'validation_failed');
    });

    it('is 400 validation_failed for a lastSyncedAt in the future', async () => {
      const response = await create({ entityType: 'plain', name: fresh('x'), lastSyncedAt: '2026-11-21T11:00:00.000Z' });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details[0].path).toBe('lastSyncedAt');
      // within the allowed clock skew
      await created({ entityType: 'plain', name: fresh('x'), lastSyncedAt: '2026-11-21T10:04:00.000Z' });
    });

    it('is 409 already_exists for a taken name, in any type, and writes nothing', async () => {
      const name = fresh('taken');
      const original = await created({ entityType: 'plain', name });
      const before = (await changesOf(defaultEnvId)).length;
      expectError(await create({ entityType: 'db', name, properties: { dns: fresh('dns') } }), 409, 'already_exists');
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expect((await api.call('GET', entityPath(name), { token: owner })).body).toEqual(original);
    });

    it('allows the same name in another environment', async () => {
      const name = fresh('twin');
      await created({ entityType: 'plain', name });
      const twin = await created({ entityType: 'plain', name }, { env: 'staging' });
      expect(twin.envId).toBe(await envId('staging'));
    });

    it('is 409 constraint_violation for a duplicate of a unique constraint, and writes nothing', async () => {
      const host = fresh('host');
      await created({ entityType: 'db', name: fresh('db'), properties: { host, port: 5432 } });
      const before = (await changesOf(defaultEnvId)).length;
      const name = fresh('db');
      const response = await create({ entityType: 'db', name, properties: { host, port: 5432 } });
      expectError(response, 409, 'constraint_violation');
      expect(response.body.details).toEqual([{ path: 'properties.host,port', message: 'must be unique in the environment' }]);
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expectError(await api.call('GET', entityPath(name), { token: owner }), 404, 'not_found');
      // another port, or the same pair in another environment, is fine
      await created({ entityType: 'db', name, properties: { host, port: 5433 } });
      await created({ entityType: 'db', name: fresh('db'), properties: { host, port: 5432 } }, { env: 'staging' });
    });

    it('checks each unique constraint, and an absent property claims no value', async () => {
      const dns = fresh('dns');
      await created({ entityType: 'db', name: fresh('db'), properties: { dns } });
      expectError(await create({ entityType: 'db', name: fresh('db'), properties: { dns, host: fresh('h'), port: 1 } }), 409, 'constraint_violation');
      // neither dns nor host/port: no keys, so any number of these may exist
      await created({ entityType: 'db', name: fresh('db') });
      await created({ entityType: 'db', name: fresh('db') });
    });

    it('is 403 forbidden for a viewer', async () => {
      expectError(await create({ entityType: 'plain', name: fresh('x') }, { token: viewer }), 403, 'forbidden');
    });
  });

  describe('GET ENV/entities/{name}', () => {
    it('is 404 not_found for an unknown name, and for an entity of another environment', async () => {
      expectError(await api.call('GET', entityPath('nobody'), { token: viewer }), 404, 'not_found');
      const name = fresh('elsewhere');
      await created({ entityType: 'plain', name }, { env: 'staging' });
      expectError(await api.call('GET', entityPath(name), { token: viewer }), 404, 'not_found');
      expect((await api.call('GET', entityPath(name, 'staging'), { token: viewer })).status).toBe(200);
    });

    it('is 404 not_found for an unknown environment', async () => {
      expectError(await api.call('GET', entityPath('x', 'nowhere'), { token: viewer }), 404, 'not_found');
    });
  });

  describe('PUT ENV/entities/{name}', () => {
    const put = (name: string, body: unknown, token = owner) => api.call('PUT', entityPath(name), { token, body });

    it('moves along declared transitions and refuses the others (409 transition_not_allowed)', async () => {
      const name = fresh('vm');
      await created({ entityType: 'vm', name, properties: { region: 'eu' } });
      expectError(await put(name, { state: 'stopped' }), 409, 'transition_not_allowed');
      expectError(await put(name, { state: 'flying' }), 400, 'invalid_state');
      expect((await put(name, { state: 'running' })).body.state).toBe('running');
      // staying put is not a transition
      expect((await put(name, { state: 'running' })).status).toBe(200);
      expect((await put(name, { state: 'stopped' })).body.state).toBe('stopped');
      expectError(await put(name, { state: 'provisioning' }), 409, 'transition_not_allowed');
    });

    it('allows any change between declared states when the type declares no transitions', async () => {
      const name = fresh('p');
      await created({ entityType: 'plain', name, state: 'retired' });
      expect((await put(name, { state: 'active' })).body.state).toBe('active');
    });

    it('replaces properties and labels when given, fills defaults again, and leaves the rest', async () => {
      const name = fresh('vm');
      const before = await created({ entityType: 'vm', name, properties: { region: 'eu', size: 'large', cores: 2 }, labels: { a: '1', b: '2' } });
      clock.advance(60_000);
      const response = await put(name, { properties: { region: 'us' } });
      expect(response.status).toBe(200);
      expect(Object.keys(response.body).sort()).toEqual(ENTITY_FIELDS);
      expect(response.body).toMatchObject({
        id: before.id,
        state: 'provisioning',
        properties: { region: 'us', size: 'small' },
        labels: { a: '1', b: '2' },
        createdAt: before.createdAt,
        updatedAt: '2026-11-21T10:01:00.000Z',
      });
      expect((await put(name, { labels: { c: '3' } })).body.labels).toEqual({ c: '3' });
      const invalid = await put(name, { properties: { size: 'large' } });
      expectError(invalid, 400, 'validation_failed');
      expect(invalid.body.details).toEqual([{ path: 'properties.region', message: 'is required' }]);
    });

    it('renames, and a taken name is 409 already_exists', async () => {
      const name = fresh('old');
      const entity = await created({ entityType: 'plain', name });
      const other = fresh('other');
      await created({ entityType: 'plain', name: other });
      const before = (await changesOf(defaultEnvId)).length;
      expectError(await put(name, { name: other }), 409, 'already_exists');
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      const renamed = fresh('new');
      const response = await put(name, { name: renamed });
      expect(response.body).toMatchObject({ id: entity.id, name: renamed });
      expectError(await api.call('GET', entityPath(name), { token: owner }), 404, 'not_found');
      expect((await api.call('GET', entityPath(renamed), { token: owner })).body.id).toBe(entity.id);
      expectError(await put(renamed, { name: 'stream' }), 400, 'validation_failed');
    });

    it('re-checks unique constraints on new properties, keeping its own values free', async () => {
      const dns = fresh('dns');
      const name = fresh('db');
      await created({ entityType: 'db', name, properties: { dns } });
      const otherDns = fresh('dns');
      await created({ entityType: 'db', name: fresh('db'), properties: { dns: otherDns } });
      expect((await put(name, { properties: { dns, port: 1 } })).status).toBe(200);
      const before = (await changesOf(defaultEnvId)).length;
      expectError(await put(name, { properties: { dns: otherDns } }), 409, 'constraint_violation');
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expect((await api.call('GET', entityPath(name), { token: owner })).body.properties).toEqual({ dns, port: 1 });
      // its old value is released once it changes
      expect((await put(name, { properties: { dns: fresh('dns') } })).status).toBe(200);
      await created({ entityType: 'db', name: fresh('db'), properties: { dns } });
    });

    it('writes one entity.updated change with the full entity', async () => {
      const name = fresh('p');
      await created({ entityType: 'plain', name });
      const response = await put(name, { labels: { x: 'y' } });
      const [last] = (await changesOf(defaultEnvId)).slice(-1);
      expect(last).toMatchObject({ type: 'entity.updated', entityName: name, entity: response.body });
    });

    it('is 404 for an unknown entity and 400 for unknown fields', async () => {
      expectError(await put('nobody', { state: 'active' }), 404, 'not_found');
      const name = fresh('p');
      await created({ entityType: 'plain', name });
      expectError(await put(name, { entityType: 'vm' }), 400, 'validation_failed');
      expectError(await put(name, { state: 'active' }, viewer), 403, 'forbidden');
    });
  });

  describe('DELETE ENV/entities/{name}', () => {
    it('deletes, logs entity.deleted with { id, name, entityTypeName }, and frees the name and unique values', async () => {
      const name = fresh('gone');
      const dns = fresh('dns');
      const entity = await created({ entityType: 'db', name, properties: { dns } });
      await api.db.insert(entityMetrics).values({ entityId: entity.id, name: 'x', value: 1 });
      const response = await api.call('DELETE', entityPath(name), { token: owner });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, name });
      const [last] = (await changesOf(defaultEnvId)).slice(-1);
      expect(last).toMatchObject({ type: 'entity.deleted', entityId: entity.id, entity: { id: entity.id, name, entityTypeName: 'db' } });
      expectError(await api.call('GET', entityPath(name), { token: owner }), 404, 'not_found');
      expect(await api.db.select().from(entityMetrics).where(eq(entityMetrics.entityId, entity.id))).toEqual([]);
      expectError(await api.call('DELETE', entityPath(name), { token: owner }), 404, 'not_found');
      await created({ entityType: 'db', name, properties: { dns } });
    });
  });

  describe('GET ENV/entities', () => {
    let bulkEnv: string;
    const list = (query: string, token = viewer) => api.call('GET', `${envPath(bulkEnv)}${query}`, { token });
    const names = (response: { body: { name: string }[] }) => response.body.map((e) => e.name);
    let all: string[];

    beforeAll(async () => {
      bulkEnv = fresh('bulk');
      await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token: owner, body: { name: bulkEnv } });
      all = [];
      for (let i = 0; i < 250; i++) {
        const name = `e-${String(i).padStart(3, '0')}`;
        all.push(name);
        const state = i % 2 === 0 ? 'active' : 'retired';
        const labels: Record<string, string> = { parity: i % 2 === 0 ? 'even' : 'odd', tens: String(Math.floor(i / 10)) };
        if (i % 5 === 0) labels.five = 'yes';
        await created(
          { entityType: 'plain', name, state, labels, ...(i % 50 === 0 ? { syncSource: 'importer' } : {}) },
          { env: bulkEnv },
        );
      }
      clock.advance(3_600_000);
      // two entities updated an hour later, and a few of other types
      await api.call('PUT', entityPath('e-007', bulkEnv), { token: owner, body: { labels: { touched: 'yes' } } });
      await api.call('PUT', entityPath('e-123', bulkEnv), { token: owner, body: { labels: { touched: 'yes' } } });
      await created({ entityType: 'tracked', name: 'web_1' }, { env: bulkEnv });
      await created({ entityType: 'tracked', name: 'web-1' }, { env: bulkEnv });
      await created({ entityType: 'tracked', name: 'webx1' }, { env: bulkEnv });
      all.push('web-1', 'web_1', 'webx1');
      all.sort();
    });

    it('walks every entity exactly once, in name order, through X-Next-Cursor and Link', async () => {
      const seen: string[] = [];
      let query = '?limit=100';
      let pages = 0;
      for (;;) {
        const response = await list(query);
        expect(response.status).toBe(200);
        pages += 1;
        seen.push(...names(response));
        for (const entity of response.body) expect(Object.keys(entity).sort()).toEqual(ENTITY_FIELDS);
        const cursor = response.headers.get('x-next-cursor');
        if (!cursor) {
          expect(response.headers.get('link')).toBeNull();
          break;
        }
        const link = response.headers.get('link')!;
        expect(link).toMatch(/^<\/.+>; rel="next"$/);
        const next = new URL(link.slice(1, link.indexOf('>')), 'http://x');
        expect(next.searchParams.get('cursor')).toBe(cursor);
        expect(next.searchParams.get('limit')).toBe('100');
        query = next.search;
      }
      expect(pages).toBe(3);
      expect(seen).toEqual(all);
    });

    it('pages 100 by default, at most 1000', async () => {
      const first = await list('');
      expect(first.body).toHaveLength(100);
      expect(first.headers.get('x-next-cursor')).toBeTruthy();
      const everything = await list('?limit=1000');
      expect(names(everything)).toEqual(all);
      expect(everything.headers.get('x-next-cursor')).toBeNull();
    });

    it.each(['limit=0', 'limit=1001', 'limit=abc', 'limit=1.5', 'cursor=garbage', 'cursor=WyJhIiwiYiJd', 'updatedSince=today', 'label=nocolon'])(
      'is 400 validation_failed for %s',
      async (query) => {
        expectError(await list(`?${query}`), 400, 'validation_failed');
      },
    );

    it('filters by entityType, state, labels (AND), syncSource and updatedSince', async () => {
      expect(names(await list('?entityType=tracked'))).toEqual(['web-1', 'web_1', 'webx1']);
      expect(names(await list('?state=retired&limit=1000'))).toHaveLength(125);
      expect(names(await list('?label=tens:3'))).toEqual(['e-030', 'e-031', 'e-032', 'e-033', 'e-034', 'e-035', 'e-036', 'e-037', 'e-038', 'e-039']);
      expect(names(await list('?label=tens:3&label=parity:odd'))).toEqual(['e-031', 'e-033', 'e-035', 'e-037', 'e-039']);
      expect(names(await list('?label=tens:3&label=five:yes'))).toEqual(['e-030', 'e-035']);
      expect(names(await list('?label=tens:3&label=tens:4'))).toEqual([]);
      expect(names(await list('?label=tens:3&state=active&label=parity:even'))).toEqual(['e-030', 'e-032', 'e-034', 'e-036', 'e-038']);
      expect(names(await list('?syncSource=importer'))).toEqual(['e-000', 'e-050', 'e-100', 'e-150', 'e-200']);
      const since = encodeURIComponent('2026-11-21T10:30:00.000Z');
      expect(names(await list(`?updatedSince=${since}&entityType=plain`))).toEqual(['e-007', 'e-123']);
    });

    it('filters by a name prefix, matching % and _ literally', async () => {
      expect(names(await list('?namePrefix=e-12'))).toEqual(['e-120', 'e-121', 'e-122', 'e-123', 'e-124', 'e-125', 'e-126', 'e-127', 'e-128', 'e-129']);
      expect(names(await list('?namePrefix=web_'))).toEqual(['web_1']);
      expect(names(await list('?namePrefix=web'))).toEqual(['web-1', 'web_1', 'webx1']);
      expect(names(await list('?namePrefix=e%25'))).toEqual([]);
    });

    it('relies on a database that sorts names by code point (the namePrefix index range)', async () => {
      const sample = ['web1', 'web-1', 'Web', 'web_1', 'web.1', 'WEB:2', 'a/b', 'a-b', 'ab', '0x'];
      // both drivers (PGlite, node-postgres) answer { rows }
      const { rows } = (await api.db.execute(
        sql`select array_agg(x order by x) as sorted from unnest(${sql.raw(`array[${sample.map((s) => `'${s}'`).join(',')}]`)}::text[]) x`,
      )) as unknown as { rows: { sorted: string[] }[] };
      expect(rows[0]!.sorted).toEqual([...sample].sort());
    });

    it('pages through a filtered list', async () => {
      const first = await list('?label=parity:odd&limit=60');
      expect(first.body).toHaveLength(60);
      const second = await list(`?label=parity:odd&limit=60&cursor=${first.headers.get('x-next-cursor')}`);
      const third = await list(`?label=parity:odd&limit=60&cursor=${second.headers.get('x-next-cursor')}`);
      expect(third.headers.get('x-next-cursor')).toBeNull();
      // e-007 and e-123 had their labels replaced
      const odd = all.filter((name) => /^e-\d+$/.test(name) && Number(name.slice(2)) % 2 === 1 && !['e-007', 'e-123'].includes(name));
      expect([...names(first), ...names(second), ...names(third)]).toEqual(odd);
    });

    it('filters by cell membership, and an unknown cell is 404 not_found', async () => {
      const [cell] = await api.db
        .insert(cells)
        .values({
          orgId: tenant.org.id,
          projectId: tenant.project.id,
          name: fresh('list-cell'),
          entityTypeName: 'plain',
          placementPolicy: 'least-loaded',
          membershipMode: 'explicit',
        })
        .returning();
      const env = await envId(bulkEnv);
      const members = await api.db
        .select({ id: entities.id })
        .from(entities)
        .where(and(eq(entities.envId, env), eq(entities.entityTypeName, 'plain')))
        .orderBy(asc(entities.name))
        .limit(3);
      await api.db.insert(cellMembers).values(members.map((m) => ({ cellId: cell!.id, envId: env, entityId: m.id })));
      expect(names(await list(`?cell=${cell!.name}`))).toEqual(['e-000', 'e-001', 'e-002']);
      expect(names(await list(`?cell=${cell!.name}&state=retired`))).toEqual(['e-001']);
      expectError(await list('?cell=no-such-cell'), 404, 'not_found');
    });
  });

  describe('metrics', () => {
    let vm: { id: string; name: string; updatedAt: string };
    const metricPath = (name: string, metric: string) => `${entityPath(name)}/metrics/${metric}`;

    beforeAll(async () => {
      vm = await created({ entityType: 'vm', name: fresh('metered'), properties: { region: 'eu' } });
    });

    it('sets a value (upsert) without touching the entity or the change log', async () => {
      const before = (await changesOf(defaultEnvId)).length;
      clock.advance(1000);
      const response = await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: { value: 0.25 } });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ entityName: vm.name, metric: 'cpu', value: 0.25, updatedAt: clock.now().toISOString() });
      const again = await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: { value: 0.5 } });
      expect(again.body.value).toBe(0.5);
      await api.call('PUT', metricPath(vm.name, 'mem'), { token: owner, body: { value: 2048 } });
      expect((await api.call('GET', `${entityPath(vm.name)}/metrics`, { token: viewer })).body).toEqual({ cpu: 0.5, mem: 2048 });
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expect((await api.call('GET', entityPath(vm.name), { token: viewer })).body.updatedAt).toBe(vm.updatedAt);
    });

    it('is 400 unknown_metric for a metric the type does not declare', async () => {
      expectError(await api.call('PUT', metricPath(vm.name, 'disk'), { token: owner, body: { value: 1 } }), 400, 'unknown_metric');
    });

    it('is 400 validation_failed outside min/max or for a body that is not { value: number }', async () => {
      const high = await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: { value: 1.5 } });
      expectError(high, 400, 'validation_failed');
      expect(high.body.details).toEqual([{ path: 'value', message: 'must be at most 1' }]);
      expectError(await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: { value: -0.1 } }), 400, 'validation_failed');
      expectError(await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: { value: '1' } }), 400, 'validation_failed');
      expectError(await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: {} }), 400, 'validation_failed');
      expectError(await api.call('PUT', metricPath(vm.name, 'cpu'), { token: owner, body: { value: 1, at: 2 } }), 400, 'validation_failed');
    });

    it('is 404 for an unknown entity', async () => {
      expectError(await api.call('PUT', metricPath('nobody', 'cpu'), { token: owner, body: { value: 1 } }), 404, 'not_found');
      expectError(await api.call('GET', `${entityPath('nobody')}/metrics`, { token: owner }), 404, 'not_found');
    });

    it('reads many entities at once, leaving out unknown names', async () => {
      const quiet = await created({ entityType: 'vm', name: fresh('quiet'), properties: { region: 'eu' } });
      const response = await api.call('GET', `${envPath()}/metrics?names=${vm.name},${quiet.name},nobody`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ [vm.name]: { cpu: 0.5, mem: 2048 }, [quiet.name]: {} });
      const onlyCpu = await api.call('GET', `${envPath()}/metrics?names=${vm.name},${quiet.name}&metrics=cpu,nope`, { token: viewer });
      expect(onlyCpu.body).toEqual({ [vm.name]: { cpu: 0.5 }, [quiet.name]: {} });
    });

    it('is 400 validation_failed for more than 500 names or none', async () => {
      const many = Array.from({ length: 501 }, (_, i) => `n${i}`).join(',');
      expectError(await api.call('GET', `${envPath()}/metrics?names=${many}`, { token: viewer }), 400, 'validation_failed');
      const fiveHundred = Array.from({ length: 500 }, (_, i) => `n${i}`).join(',');
      expect((await api.call('GET', `${envPath()}/metrics?names=${fiveHundred}`, { token: viewer })).body).toEqual({});
      expectError(await api.call('GET', `${envPath()}/metrics`, { token: viewer }), 400, 'validation_failed');
      expectError(await api.call('GET', `${envPath()}/metrics?names=,,`, { token: viewer }), 400, 'validation_failed');
    });
  });

  describe('sync stamp and drift', () => {
    const stamp = (name: string, body: unknown) => api.call('POST', `${entityPath(name)}/sync-stamp`, { token: owner, body });
    const drift = (name: string) => api.call('GET', `${entityPath(name)}/drift`, { token: viewer });

    it('stamps now by default, as an entity update', async () => {
      const name = fresh('vm');
      await created({ entityType: 'vm', name, properties: { region: 'eu' } });
      clock.advance(5000);
      const response = await stamp(name, { source: 'terraform' });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ name, lastSyncedAt: clock.now().toISOString(), syncSource: 'terraform' });
      const [last] = (await changesOf(defaultEnvId)).slice(-1);
      expect(last).toMatchObject({ type: 'entity.updated', entityName: name });
      expect(last!.entity).toMatchObject({ lastSyncedAt: clock.now().toISOString(), syncSource: 'terraform', updatedAt: clock.now().toISOString() });
    });

    it('takes observedAt, never moves backwards, and refuses the future', async () => {
      const name = fresh('vm');
      await created({ entityType: 'vm', name, properties: { region: 'eu' } });
      const at = new Date(clock.now().getTime() - 60_000).toISOString();
      expect((await stamp(name, { source: 'a', observedAt: at })).body).toEqual({ name, lastSyncedAt: at, syncSource: 'a' });
      const before = (await changesOf(defaultEnvId)).length;
      const older = new Date(clock.now().getTime() - 120_000).toISOString();
      expect((await stamp(name, { source: 'b', observedAt: older })).body).toEqual({ name, lastSyncedAt: at, syncSource: 'a' });
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      const future = new Date(clock.now().getTime() + 10 * 60_000).toISOString();
      expectError(await stamp(name, { source: 'c', observedAt: future }), 400, 'validation_failed');
      expectError(await stamp(name, {}), 400, 'validation_failed');
      expectError(await stamp(name, { source: 'c', extra: 1 }), 400, 'validation_failed');
      expectError(await stamp('nobody', { source: 'c' }), 404, 'not_found');
    });

    it('reports untracked, never-synced, in-sync and stale against the type freshness', async () => {
      const plain = fresh('p');
      await created({ entityType: 'plain', name: plain });
      const untracked = await drift(plain);
      expect(untracked.status).toBe(200);
      expect(Object.keys(untracked.body).sort()).toEqual(['driftStatus', 'lastSyncedAt', 'message', 'name', 'syncSource']);
      expect(untracked.body).toMatchObject({ name: plain, driftStatus: 'untracked', lastSyncedAt: null, syncSource: null });

      const name = fresh('vm');
      await created({ entityType: 'vm', name, properties: { region: 'eu' } });
      expect((await drift(name)).body.driftStatus).toBe('never-synced');
      await stamp(name, { source: 'terraform' });
      const fresh1 = await drift(name);
      expect(fresh1.body).toMatchObject({ driftStatus: 'in-sync', syncSource: 'terraform', lastSyncedAt: clock.now().toISOString() });
      expect(fresh1.body.message).toContain('600');
      clock.advance(600_000);
      expect((await drift(name)).body.driftStatus).toBe('in-sync');
      clock.advance(1000);
      expect((await drift(name)).body.driftStatus).toBe('stale');
    });

    it('uses 3600 s when a sync-tracked type sets no freshness', async () => {
      const name = fresh('t');
      await created({ entityType: 'tracked', name });
      await stamp(name, { source: 's' });
      clock.advance(3_599_000);
      expect((await drift(name)).body.driftStatus).toBe('in-sync');
      clock.advance(2000);
      expect((await drift(name)).body).toMatchObject({ driftStatus: 'stale', message: expect.stringContaining('3600') });
      expectError(await drift('nobody'), 404, 'not_found');
    });
  });

  describe('a cell-scoped token', () => {
    let scoped: string;
    let inExplicit: { id: string; name: string };
    let inChild: { id: string; name: string };
    let inDerived: { id: string; name: string };
    let outside: { id: string; name: string };

    async function cell(name: string, fields: Partial<typeof cells.$inferInsert>) {
      const [row] = await api.db
        .insert(cells)
        .values({
          orgId: tenant.org.id,
          projectId: tenant.project.id,
          name,
          entityTypeName: 'svc',
          placementPolicy: 'least-loaded',
          membershipMode: 'explicit',
          ...fields,
        })
        .returning();
      return row!;
    }

    beforeAll(async () => {
      await entityType('svc', { metrics: [{ name: 'cpu' }] });
      const teamA = await cell('team-a', {});
      const child = await cell('team-a-child', { parentCells: ['team-a'] });
      await cell('team-b', { membershipMode: 'derived', membershipDerivedFrom: { selector: { labels: { team: 'b' } } } });
      await cell('team-c', {});
      inExplicit = await created({ entityType: 'svc', name: fresh('svc-a') });
      inChild = await created({ entityType: 'svc', name: fresh('svc-child') });
      inDerived = await created({ entityType: 'svc', name: fresh('svc-b'), labels: { team: 'b' } });
      outside = await created({ entityType: 'svc', name: fresh('svc-out'), labels: { team: 'c' } });
      await api.db.insert(cellMembers).values([
        { cellId: teamA.id, envId: defaultEnvId, entityId: inExplicit.id },
        { cellId: child.id, envId: defaultEnvId, entityId: inChild.id },
      ]);
      scoped = await mintToken(api, tenant, { role: 'member', cellScopes: ['team-a', 'team-b'], as: owner });
    });

    it('reads only entities in its cells (and their child cells); others are 404', async () => {
      for (const entity of [inExplicit, inChild, inDerived]) {
        expect((await api.call('GET', entityPath(entity.name), { token: scoped })).status).toBe(200);
      }
      expectError(await api.call('GET', entityPath(outside.name), { token: scoped }), 404, 'not_found');
      expectError(await api.call('GET', `${entityPath(outside.name)}/metrics`, { token: scoped }), 404, 'not_found');
      expectError(await api.call('GET', `${entityPath(outside.name)}/drift`, { token: scoped }), 404, 'not_found');
    });

    it('lists only entities in its cells', async () => {
      const response = await api.call('GET', `${envPath()}?limit=1000`, { token: scoped });
      expect(response.body.map((e: { name: string }) => e.name).sort()).toEqual([inExplicit.name, inChild.name, inDerived.name].sort());
      const byCell = await api.call('GET', `${envPath()}?cell=team-c`, { token: scoped });
      expect(byCell.body).toEqual([]);
    });

    it('reads batch metrics only of entities in its cells', async () => {
      await api.call('PUT', `${entityPath(outside.name)}/metrics/cpu`, { token: owner, body: { value: 9 } });
      await api.call('PUT', `${entityPath(inDerived.name)}/metrics/cpu`, { token: scoped, body: { value: 3 } });
      const response = await api.call('GET', `${envPath()}/metrics?names=${outside.name},${inDerived.name},${inExplicit.name}`, { token: scoped });
      expect(response.body).toEqual({ [inDerived.name]: { cpu: 3 }, [inExplicit.name]: {} });
    });

    it('creates entities that fall in its cells, and nothing else (403 cell_scope_violation, nothing written)', async () => {
      const before = (await changesOf(defaultEnvId)).length;
      const name = fresh('svc-new');
      expectError(await create({ entityType: 'svc', name }, { token: scoped }), 403, 'cell_scope_violation');
      expectError(await create({ entityType: 'svc', name, labels: { team: 'c' } }, { token: scoped }), 403, 'cell_scope_violation');
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expectError(await api.call('GET', entityPath(name), { token: owner }), 404, 'not_found');
      const body = await created({ entityType: 'svc', name, labels: { team: 'b' } }, { token: scoped });
      expect(body.name).toBe(name);
    });

    it('cannot update an entity outside its cells, nor move one out of them', async () => {
      const before = (await changesOf(defaultEnvId)).length;
      expectError(await api.call('PUT', entityPath(outside.name), { token: scoped, body: { labels: { team: 'b' } } }), 403, 'cell_scope_violation');
      expectError(await api.call('PUT', entityPath(inDerived.name), { token: scoped, body: { labels: { team: 'c' } } }), 403, 'cell_scope_violation');
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expect((await api.call('GET', entityPath(inDerived.name), { token: owner })).body.labels).toEqual({ team: 'b' });
      expect((await api.call('GET', entityPath(outside.name), { token: owner })).body.labels).toEqual({ team: 'c' });
      const ok = await api.call('PUT', entityPath(inExplicit.name), { token: scoped, body: { labels: { note: 'x' } } });
      expect(ok.status).toBe(200);
    });

    it('cannot delete, stamp or set metrics on an entity outside its cells (403 cell_scope_violation)', async () => {
      const before = (await changesOf(defaultEnvId)).length;
      expectError(await api.call('DELETE', entityPath(outside.name), { token: scoped }), 403, 'cell_scope_violation');
      expectError(await api.call('POST', `${entityPath(outside.name)}/sync-stamp`, { token: scoped, body: { source: 's' } }), 403, 'cell_scope_violation');
      expectError(await api.call('PUT', `${entityPath(outside.name)}/metrics/cpu`, { token: scoped, body: { value: 1 } }), 403, 'cell_scope_violation');
      expect((await changesOf(defaultEnvId)).length).toBe(before);
      expect((await api.call('GET', `${entityPath(outside.name)}/metrics`, { token: owner })).body).toEqual({ cpu: 9 });
      expect((await api.call('GET', entityPath(outside.name), { token: owner })).body.lastSyncedAt).toBeNull();
      // unknown names stay 404
      expectError(await api.call('DELETE', entityPath('nobody'), { token: scoped }), 404, 'not_found');
    });

    it('deletes entities in its cells', async () => {
      const name = fresh('svc-del');
      await created({ entityType: 'svc', name, labels: { team: 'b' } });
      expect((await api.call('DELETE', entityPath(name), { token: scoped })).status).toBe(200);
    });

    it('sees nothing when its cells do not exist', async () => {
      const ghost = await mintToken(api, tenant, { role: 'member', cellScopes: ['no-such-cell'], as: owner });
      expect((await api.call('GET', envPath(), { token: ghost })).body).toEqual([]);
      expectError(await api.call('GET', entityPath(inExplicit.name), { token: ghost }), 404, 'not_found');
    });
  });

  it('publishes every entity route in /openapi.json', async () => {
    const doc = await api.call('GET', '/openapi.json');
    const base = '/{o}/{p}/envs/{envName}/entities';
    expect(Object.keys(doc.body.paths[base]).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.body.paths[`${base}/metrics`])).toEqual(['get']);
    expect(Object.keys(doc.body.paths[`${base}/{name}`]).sort()).toEqual(['delete', 'get', 'put']);
    expect(Object.keys(doc.body.paths[`${base}/{name}/metrics`])).toEqual(['get']);
    expect(Object.keys(doc.body.paths[`${base}/{name}/metrics/{metricName}`])).toEqual(['put']);
    expect(Object.keys(doc.body.paths[`${base}/{name}/sync-stamp`])).toEqual(['post']);
    expect(Object.keys(doc.body.paths[`${base}/{name}/drift`])).toEqual(['get']);
  });
});
