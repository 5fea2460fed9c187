import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cellMembers, cells, entities, entityTypes, environments, orgs, relationships } from '../../src/db/schema';
import type { Cardinality } from '../../src/modules/catalog-items';
import type { PropertyDefinition } from '../../src/modules/properties';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';
import { usingPostgres } from '../support/node-database';
import { countStatements } from '../support/statement-counter';

const RELATIONSHIP_FIELDS = [
  'createdAt',
  'envId',
  'fromEntityId',
  'id',
  'labels',
  'orgId',
  'projectId',
  'properties',
  'relationshipTypeName',
  'state',
  'toEntityId',
  'updatedAt',
];

describe(`relationships (${usingPostgres() ? 'Postgres' : 'PGlite'})`, () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let viewer: string;
  let env: string;
  const envIds: Record<string, string> = {};

  // factories: entity types and entities are inserted as their modules store them; relationship types go through their API
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

  async function entityType(name = fresh('type')): Promise<string> {
    await api.db.insert(entityTypes).values({
      orgId: tenant.org.id,
      projectId: tenant.project.id,
      name,
      states: ['active'],
      initialState: 'active',
    });
    return name;
  }

  /** Through the relationship-types API, so the definitions are what that module accepts and stores. */
  async function relationshipType(options: {
    name?: string;
    from: string;
    to: string;
    cardinality?: Cardinality;
    states?: string[];
    properties?: PropertyDefinition[];
    constraints?: Record<string, unknown>[];
  }): Promise<string> {
    const name = options.name ?? fresh('rel');
    const response = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/relationship-types`, {
      token: owner,
      body: {
        kind: 'RelationshipType',
        name,
        from: options.from,
        to: options.to,
        cardinality: options.cardinality ?? 'many-to-many',
        states: options.states ?? ['planned', 'live', 'retired'],
        properties: options.properties ?? [],
        constraints: options.constraints ?? [],
      },
    });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return name;
  }

  async function entity(type: string, options: { name?: string; envName?: string } = {}): Promise<{ id: string; name: string }> {
    const name = options.name ?? fresh('e');
    const [row] = await api.db
      .insert(entities)
      .values({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        envId: envIds[options.envName ?? 'default']!,
        entityTypeName: type,
        name,
        state: 'active',
      })
      .returning({ id: entities.id, name: entities.name });
    return row!;
  }

  const create = (body: Record<string, unknown>, token = owner, path = `${env}/relationships`) =>
    api.call('POST', path, { token, body });

  async function created(body: Record<string, unknown>, token = owner): Promise<any> {
    const response = await create(body, token);
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  }

  /** A many-to-many world: a type pair and a relationship type between them. */
  async function world(options: Partial<Parameters<typeof relationshipType>[0]> = {}) {
    const from = await entityType();
    const to = await entityType();
    const type = await relationshipType({ from, to, ...options });
    return { from, to, type };
  }

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    env = `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;
    await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'staging' } });
    for (const row of await api.db.select().from(environments).where(eq(environments.projectId, tenant.project.id))) {
      envIds[row.name] = row.id;
    }
    owner = await mintToken(api, tenant, { role: 'owner' });
    viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
  });
  afterAll(() => api.close());

  describe('POST ENV/relationships', () => {
    it('creates a relationship with exactly the SPEC fields, the first state and property defaults', async () => {
      const { from, to } = await world();
      const type = await relationshipType({
        from,
        to,
        properties: [
          { name: 'port', type: 'integer', required: true },
          { name: 'protocol', type: 'string', default: 'tcp', enum: ['tcp', 'udp'] },
        ],
      });
      const a = await entity(from);
      const b = await entity(to);
      const response = await create({ relationshipType: type, from: a.name, to: b.name, properties: { port: 5432 }, labels: { team: 'db' } });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(RELATIONSHIP_FIELDS);
      expect(response.body).toMatchObject({
        relationshipTypeName: type,
        fromEntityId: a.id,
        toEntityId: b.id,
        state: 'planned',
        properties: { port: 5432, protocol: 'tcp' },
        labels: { team: 'db' },
        envId: envIds.default,
        orgId: tenant.org.id,
        projectId: tenant.project.id,
      });
      expect(response.body.id).toMatch(/^[0-9a-f-]{36}$/);
      expect(response.body.createdAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      expect(response.body.updatedAt).toBe(response.body.createdAt);
    });

    it('takes an explicit state from the type and refuses one outside it (400 invalid_state)', async () => {
      const { from, to, type } = await world();
      const a = await entity(from);
      expect((await created({ relationshipType: type, from: a.name, to: (await entity(to)).name, state: 'live' })).state).toBe('live');
      expectError(await create({ relationshipType: type, from: a.name, to: (await entity(to)).name, state: 'gone' }), 400, 'invalid_state');
    });

    it('answers 404 for a missing relationship type or end entity', async () => {
      const { from, to, type } = await world();
      const a = await entity(from);
      const b = await entity(to);
      expectError(await create({ relationshipType: 'no-such-type', from: a.name, to: b.name }), 404, 'not_found');
      expectError(await create({ relationshipType: type, from: 'no-such-entity', to: b.name }), 404, 'not_found');
      expectError(await create({ relationshipType: type, from: a.name, to: 'no-such-entity' }), 404, 'not_found');
      // an entity of another environment is not in this one
      const elsewhere = await entity(to, { envName: 'staging' });
      expectError(await create({ relationshipType: type, from: a.name, to: elsewhere.name }), 404, 'not_found');
    });

    it("refuses ends whose entity types are not the relationship type's (400 type_mismatch)", async () => {
      const { from, to, type } = await world();
      const a = await entity(from);
      const b = await entity(to);
      expectError(await create({ relationshipType: type, from: b.name, to: a.name }), 400, 'type_mismatch');
      expectError(await create({ relationshipType: type, from: a.name, to: (await entity(from)).name }), 400, 'type_mismatch');
    });

    it('validates properties against the type (400 validation_failed with details)', async () => {
      const { from, to } = await world();
      const type = await relationshipType({
        from,
        to,
        properties: [
          { name: 'port', type: 'integer', required: true },
          { name: 'protocol', type: 'string', enum: ['tcp', 'udp'] },
        ],
      });
      const response = await create({
        relationshipType: type,
        from: (await entity(from)).name,
        to: (await entity(to)).name,
        properties: { protocol: 'icmp', extra: true },
      });
      expectError(response, 400, 'validation_failed');
      expect(response.body.details).toEqual(
        expect.arrayContaining([
          { path: 'properties.port', message: 'is required' },
          { path: 'properties.protocol', message: expect.stringContaining('must be one of') },
          { path: 'properties.extra', message: 'is not declared by the type' },
        ]),
      );
    });

    it('rejects unknown fields, missing required fields and malformed values (400 validation_failed)', async () => {
      const { from, to, type } = await world();
      const a = await entity(from);
      const b = await entity(to);
      expectError(await create({ relationshipType: type, from: a.name, to: b.name, kind: 'Relationship' }), 400, 'validation_failed');
      expectError(await create({ relationshipType: type, from: a.name }), 400, 'validation_failed');
      expectError(await create({ relationshipType: type, from: a.name, to: b.name, labels: { n: 1 } }), 400, 'validation_failed');
      expectError(await create({ relationshipType: type, from: a.name, to: b.name, properties: [] }), 400, 'validation_failed');
    });

    it('refuses the same type and pair twice (409 already_exists), for every cardinality', async () => {
      for (const cardinality of ['many-to-many', 'one-to-one', 'one-to-many', 'many-to-one'] as const) {
        const { from, to, type } = await world({ cardinality });
        const body = { relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name };
        await created(body);
        expectError(await create(body), 409, 'already_exists');
      }
    });

    it('needs data:write (viewer: 403 forbidden)', async () => {
      const { from, to, type } = await world();
      expectError(
        await create({ relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name }, viewer),
        403,
        'forbidden',
      );
    });
  });

  describe('cardinality', () => {
    it('one-to-one: one outgoing per from and one incoming per to', async () => {
      const { from, to, type } = await world({ cardinality: 'one-to-one' });
      const [a, c] = [await entity(from), await entity(from)];
      const [b, d] = [await entity(to), await entity(to)];
      await created({ relationshipType: type, from: a.name, to: b.name });
      expectError(await create({ relationshipType: type, from: a.name, to: d.name }), 409, 'cardinality_violation');
      expectError(await create({ relationshipType: type, from: c.name, to: b.name }), 409, 'cardinality_violation');
      await created({ relationshipType: type, from: c.name, to: d.name });
    });

    it('one-to-many: a from has many, each to has at most one incoming', async () => {
      const { from, to, type } = await world({ cardinality: 'one-to-many' });
      const [a, c] = [await entity(from), await entity(from)];
      const [b, d] = [await entity(to), await entity(to)];
      await created({ relationshipType: type, from: a.name, to: b.name });
      await created({ relationshipType: type, from: a.name, to: d.name });
      expectError(await create({ relationshipType: type, from: c.name, to: b.name }), 409, 'cardinality_violation');
    });

    it('many-to-one: each from has at most one outgoing, a to has many', async () => {
      const { from, to, type } = await world({ cardinality: 'many-to-one' });
      const [a, c] = [await entity(from), await entity(from)];
      const [b, d] = [await entity(to), await entity(to)];
      await created({ relationshipType: type, from: a.name, to: b.name });
      await created({ relationshipType: type, from: c.name, to: b.name });
      expectError(await create({ relationshipType: type, from: a.name, to: d.name }), 409, 'cardinality_violation');
    });

    it('many-to-many: any number either way', async () => {
      const { from, to, type } = await world({ cardinality: 'many-to-many' });
      const [a, c] = [await entity(from), await entity(from)];
      const [b, d] = [await entity(to), await entity(to)];
      for (const [x, y] of [[a, b], [a, d], [c, b], [c, d]] as const) await created({ relationshipType: type, from: x.name, to: y.name });
    });

    it('is per relationship type and per environment', async () => {
      const { from, to, type } = await world({ cardinality: 'one-to-one' });
      const other = await relationshipType({ from, to, cardinality: 'one-to-one' });
      const a = await entity(from);
      const b = await entity(to);
      await created({ relationshipType: type, from: a.name, to: b.name });
      await created({ relationshipType: other, from: a.name, to: b.name });
      const sa = await entity(from, { envName: 'staging' });
      const sb = await entity(to, { envName: 'staging' });
      const staging = `/${tenant.org.slug}/${tenant.project.slug}/envs/staging/relationships`;
      expect((await create({ relationshipType: type, from: sa.name, to: sb.name }, owner, staging)).status).toBe(201);
    });

    it('frees the slot when the relationship is deleted', async () => {
      const { from, to, type } = await world({ cardinality: 'one-to-one' });
      const a = await entity(from);
      const first = await created({ relationshipType: type, from: a.name, to: (await entity(to)).name });
      const next = (await entity(to)).name;
      expectError(await create({ relationshipType: type, from: a.name, to: next }), 409, 'cardinality_violation');
      expect((await api.call('DELETE', `${env}/relationships/${first.id}`, { token: owner })).status).toBe(200);
      await created({ relationshipType: type, from: a.name, to: next });
    });
  });

  describe('concurrent creates', () => {
    const tally = (responses: ApiResponse[]) =>
      responses.reduce<Record<string, number>>((counts, r) => {
        const key = r.status === 201 ? '201' : `${r.status} ${r.body?.code}`;
        counts[key] = (counts[key] ?? 0) + 1;
        return counts;
      }, {});

    it('of ten one-to-one relationships from the same entity: exactly one wins, nine are 409 cardinality_violation', async () => {
      const { from, to, type } = await world({ cardinality: 'one-to-one' });
      const a = await entity(from);
      const targets = [];
      for (let i = 0; i < 10; i += 1) targets.push(await entity(to));
      const responses = await Promise.all(targets.map((b) => create({ relationshipType: type, from: a.name, to: b.name })));
      expect(tally(responses)).toEqual({ '201': 1, '409 cardinality_violation': 9 });
      const stored = await api.db.select().from(relationships).where(eq(relationships.relationshipTypeName, type));
      expect(stored).toHaveLength(1);
    });

    it('of ten identical many-to-many relationships: exactly one wins, nine are 409 already_exists', async () => {
      const { from, to, type } = await world();
      const body = { relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name };
      const responses = await Promise.all(Array.from({ length: 10 }, () => create(body)));
      expect(tally(responses)).toEqual({ '201': 1, '409 already_exists': 9 });
    });

    it('of ten identical one-to-one relationships: a duplicate is already_exists, whichever constraint fires', async () => {
      const { from, to, type } = await world({ cardinality: 'one-to-one' });
      const body = { relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name };
      const responses = await Promise.all(Array.from({ length: 10 }, () => create(body)));
      expect(tally(responses)).toEqual({ '201': 1, '409 already_exists': 9 });
    });
  });

  describe('POST ENV/relationships in one statement', () => {
    // The first create of a type in a process goes the transactional way and remembers the type; from then on a
    // plain success is one statement (src/modules/relationships/fast-path.ts) and every other answer comes from
    // the transactional path, as before.
    const projectPath = () => `/${tenant.org.slug}/${tenant.project.slug}`;
    const tokensPath = () => `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;

    async function measured(call: () => Promise<ApiResponse>): Promise<{ response: ApiResponse; statements: number; transactions: number }> {
      let response!: ApiResponse;
      const counts = await countStatements(api.testDatabase.database, async () => {
        response = await call();
      });
      return { response, ...counts };
    }

    /** A world whose type this process has remembered, by one create through the transactional path. */
    async function warmWorld(options: Partial<Parameters<typeof relationshipType>[0]> = {}) {
      const w = await world(options);
      const end = await entity(w.from);
      const first = await measured(() => create({ relationshipType: w.type, from: end.name, to: 'no-such-entity' }));
      expectError(first.response, 404, 'not_found');
      expect(first.transactions).toBe(1);
      return w;
    }

    const storedOfType = (type: string) => api.db.select().from(relationships).where(eq(relationships.relationshipTypeName, type));

    it('answers a plain create in one statement, with what the transactional path answers', async () => {
      const { from, to } = await world();
      const type = await relationshipType({
        from,
        to,
        properties: [
          { name: 'port', type: 'integer', required: true },
          { name: 'protocol', type: 'string', default: 'tcp' },
        ],
      });
      const slow = await measured(() => create({ relationshipType: type, from: 'x', to: 'y' }));
      expect(slow.transactions).toBe(1);
      const [a, b] = [await entity(from), await entity(to)];
      const fast = await measured(() =>
        create({ relationshipType: type, from: a.name, to: b.name, properties: { port: 5432 }, labels: { team: 'db' } }),
      );
      expect(fast.response.status, JSON.stringify(fast.response.body)).toBe(201);
      expect({ statements: fast.statements, transactions: fast.transactions }).toEqual({ statements: 1, transactions: 0 });
      expect(Object.keys(fast.response.body).sort()).toEqual(RELATIONSHIP_FIELDS);
      expect(fast.response.body).toMatchObject({
        relationshipTypeName: type,
        fromEntityId: a.id,
        toEntityId: b.id,
        state: 'planned',
        properties: { port: 5432, protocol: 'tcp' },
        labels: { team: 'db' },
        envId: envIds.default,
        orgId: tenant.org.id,
        projectId: tenant.project.id,
      });
      expect(fast.response.body.updatedAt).toBe(fast.response.body.createdAt);
      expect((await api.call('GET', `${env}/relationships/${fast.response.body.id}`, { token: viewer })).body).toEqual(fast.response.body);
      const c = await entity(to);
      const explicit = await measured(() =>
        create({ relationshipType: type, from: a.name, to: c.name, state: 'live', properties: { port: 1 } }),
      );
      expect(explicit.statements).toBe(1);
      expect(explicit.response.body.state).toBe('live');
    });

    it('fills the exclusive ends from the cardinality, and answers each 409 as before, writing nothing', async () => {
      const expected = {
        'many-to-many': { fromExclusive: false, toExclusive: false },
        'one-to-one': { fromExclusive: true, toExclusive: true },
        'one-to-many': { fromExclusive: false, toExclusive: true },
        'many-to-one': { fromExclusive: true, toExclusive: false },
      } as const;
      for (const [cardinality, exclusive] of Object.entries(expected) as [Cardinality, { fromExclusive: boolean; toExclusive: boolean }][]) {
        const { from, to, type } = await warmWorld({ cardinality });
        const [a, b] = [await entity(from), await entity(to)];
        const made = await measured(() => create({ relationshipType: type, from: a.name, to: b.name }));
        expect(made.response.status, cardinality).toBe(201);
        expect(made.statements).toBe(1);
        const [row] = await storedOfType(type);
        expect({ fromExclusive: row!.fromExclusive, toExclusive: row!.toExclusive }, cardinality).toEqual({
          fromExclusive: exclusive.fromExclusive ? a.id : null,
          toExclusive: exclusive.toExclusive ? b.id : null,
        });
        expectError(await create({ relationshipType: type, from: a.name, to: b.name }), 409, 'already_exists');
        const outgoing = await create({ relationshipType: type, from: a.name, to: (await entity(to)).name });
        const incoming = await create({ relationshipType: type, from: (await entity(from)).name, to: b.name });
        if (exclusive.fromExclusive) expectError(outgoing, 409, 'cardinality_violation');
        else expect(outgoing.status, cardinality).toBe(201);
        if (exclusive.toExclusive) expectError(incoming, 409, 'cardinality_violation');
        else expect(incoming.status, cardinality).toBe(201);
        expect(await storedOfType(type)).toHaveLength(1 + Number(!exclusive.fromExclusive) + Number(!exclusive.toExclusive));
      }
    });

    it('leaves every answer but a plain 201 to the transactional path, unchanged', async () => {
      const { from, to, type } = await warmWorld({ properties: [{ name: 'port', type: 'integer', required: true }] });
      const [a, b] = [await entity(from), await entity(to)];
      const body = { relationshipType: type, from: a.name, to: b.name, properties: { port: 1 } };
      expectError(await create({ ...body, relationshipType: 'no-such-type' }), 404, 'not_found');
      expectError(await create({ ...body, from: 'no-such-entity' }), 404, 'not_found');
      expectError(await create({ ...body, to: 'no-such-entity' }), 404, 'not_found');
      expectError(await create({ ...body, to: (await entity(to, { envName: 'staging' })).name }), 404, 'not_found');
      expectError(await create(body, owner, `/${tenant.org.slug}/${tenant.project.slug}/envs/nowhere/relationships`), 404, 'not_found');
      // the one statement is tried and writes nothing; the transactional path answers
      const tried = await measured(() => create({ ...body, from: b.name, to: a.name }));
      expect({ statements: tried.statements, transactions: tried.transactions }).toEqual({ statements: 2, transactions: 1 });
      const backwards = tried.response;
      expectError(backwards, 400, 'type_mismatch');
      expect(backwards.body.error).toContain(`goes from "${from}" entities`);
      const wrongTo = await create({ ...body, to: (await entity(from)).name });
      expectError(wrongTo, 400, 'type_mismatch');
      expect(wrongTo.body.error).toContain(`goes to "${to}" entities`);
      expectError(await create({ ...body, state: 'gone' }), 400, 'invalid_state');
      const invalid = await create({ ...body, properties: { port: 'x' } });
      expectError(invalid, 400, 'validation_failed');
      expect(invalid.body.details).toEqual([{ path: 'properties.port', message: 'must be of type integer' }]);
      // authorization and the lookups first: an invalid create by a viewer is a 403, of a missing end a 404
      expectError(await create({ ...body, properties: {} }, viewer), 403, 'forbidden');
      expectError(await create({ ...body, from: 'no-such-entity', properties: {} }), 404, 'not_found');
      const pinned = await mintToken(api, tenant, { role: 'member', envName: 'staging', as: owner });
      expectError(await create(body, pinned), 403, 'forbidden');
      const minted = await api.call('POST', tokensPath(), { token: owner, body: { name: fresh('doomed'), role: 'member' } });
      expect((await api.call('DELETE', `${tokensPath()}/${minted.body.id}`, { token: owner })).status).toBe(200);
      expectError(await create(body, minted.body.token), 401, 'unauthorized');
      const expired = await seedToken(api, tenant, 'member', { expiresAt: new Date(Date.now() - 1000) });
      expectError(await create(body, expired), 401, 'unauthorized');
      expectError(await create(body, 'cp_not_a_token'), 401, 'unauthorized');
      await api.db.update(orgs).set({ suspendedAt: new Date() }).where(eq(orgs.id, tenant.org.id));
      try {
        expectError(await create(body), 403, 'org_suspended');
      } finally {
        await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id));
      }
      expect(await storedOfType(type)).toEqual([]);
      const made = await measured(() => create(body));
      expect(made.response.status).toBe(201);
      expect(made.statements).toBe(1);
    });

    it('validates against the type as it is now after a PUT, and a changed cardinality takes effect at once', async () => {
      const { from, to, type } = await warmWorld();
      const path = `${projectPath()}/relationship-types/${type}`;
      const definition = { kind: 'RelationshipType', name: type, from, to, states: ['planned', 'live', 'retired'] };
      const required = { ...definition, properties: [{ name: 'port', type: 'integer', required: true }] };
      expect((await api.call('PUT', path, { token: owner, body: required })).status).toBe(200);
      const a = await entity(from);
      expectError(await create({ relationshipType: type, from: a.name, to: (await entity(to)).name }), 400, 'validation_failed');
      // no relationships yet: the cardinality may change, and the next create must carry the exclusive ends
      const oneToOne = { ...required, cardinality: 'one-to-one', states: ['live'] };
      expect((await api.call('PUT', path, { token: owner, body: oneToOne })).status).toBe(200);
      const b = await entity(to);
      const first = await measured(() => create({ relationshipType: type, from: a.name, to: b.name, properties: { port: 1 } }));
      expect(first.response.status, JSON.stringify(first.response.body)).toBe(201);
      expect(first.transactions).toBe(1);
      expect(first.response.body.state).toBe('live');
      expect((await storedOfType(type))[0]).toMatchObject({ fromExclusive: a.id, toExclusive: b.id });
      const taken = await create({ relationshipType: type, from: a.name, to: (await entity(to)).name, properties: { port: 2 } });
      expectError(taken, 409, 'cardinality_violation');
      const [c, d] = [await entity(from), await entity(to)];
      const next = await measured(() => create({ relationshipType: type, from: c.name, to: d.name, properties: { port: 3 } }));
      expect(next.response.status).toBe(201);
      expect(next.statements).toBe(1);
    });

    it('takes a type deleted and made again under the same name as the new one', async () => {
      const { from, to, type } = await warmWorld();
      const path = `${projectPath()}/relationship-types/${type}`;
      expect((await api.call('DELETE', path, { token: owner })).status).toBe(200);
      await relationshipType({ name: type, from, to, cardinality: 'one-to-many', states: ['wired'] });
      const a = await entity(from);
      const b = await entity(to);
      const made = await create({ relationshipType: type, from: a.name, to: b.name });
      expect(made.status).toBe(201);
      expect(made.body.state).toBe('wired');
      expect((await storedOfType(type))[0]).toMatchObject({ fromExclusive: null, toExclusive: b.id });
    });

    it('keeps cardinality exact under concurrent creates of a remembered type', async () => {
      const tally = (responses: ApiResponse[]) =>
        responses.reduce<Record<string, number>>((counts, r) => {
          const key = r.status === 201 ? '201' : `${r.status} ${r.body?.code}`;
          counts[key] = (counts[key] ?? 0) + 1;
          return counts;
        }, {});
      const oneToOne = await warmWorld({ cardinality: 'one-to-one' });
      const a = await entity(oneToOne.from);
      const targets = [];
      for (let i = 0; i < 10; i += 1) targets.push(await entity(oneToOne.to));
      const responses = await Promise.all(targets.map((b) => create({ relationshipType: oneToOne.type, from: a.name, to: b.name })));
      expect(tally(responses)).toEqual({ '201': 1, '409 cardinality_violation': 9 });
      expect(await storedOfType(oneToOne.type)).toHaveLength(1);

      const manyToMany = await warmWorld();
      const body = { relationshipType: manyToMany.type, from: (await entity(manyToMany.from)).name, to: (await entity(manyToMany.to)).name };
      expect(tally(await Promise.all(Array.from({ length: 10 }, () => create(body))))).toEqual({ '201': 1, '409 already_exists': 9 });
      expect(await storedOfType(manyToMany.type)).toHaveLength(1);
    });

    it('leaves a cell-scoped token to the transactional path', async () => {
      const { from, to, type } = await warmWorld();
      const [a, b] = [await entity(from), await entity(to)];
      const cellName = fresh('scope-cell');
      await api.db.insert(cells).values({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        name: cellName,
        entityTypeName: from,
        placementPolicy: 'least-loaded',
        membershipMode: 'explicit',
      });
      const scoped = await mintToken(api, tenant, { role: 'member', cellScopes: [cellName], as: owner });
      const refused = await measured(() => create({ relationshipType: type, from: a.name, to: b.name }, scoped));
      expectError(refused.response, 403, 'cell_scope_violation');
      expect(refused.transactions).toBe(1);
      expect(await storedOfType(type)).toEqual([]);
    });
  });

  describe('GET ENV/relationships', () => {
    let type: string;
    let otherType: string;
    let ids: string[];
    let hub: { id: string; name: string };
    let spoke: { id: string; name: string };

    beforeAll(async () => {
      const w = await world();
      type = w.type;
      otherType = await relationshipType({ from: w.from, to: w.to });
      hub = await entity(w.from);
      spoke = await entity(w.to);
      ids = [];
      for (let i = 0; i < 5; i += 1) ids.push((await created({ relationshipType: type, from: hub.name, to: (await entity(w.to)).name })).id);
      ids.push((await created({ relationshipType: type, from: (await entity(w.from)).name, to: spoke.name })).id);
      ids.push((await created({ relationshipType: otherType, from: hub.name, to: spoke.name })).id);
    });

    const list = (query: string, token = viewer) => api.call('GET', `${env}/relationships${query}`, { token });

    it('filters by relationshipType, from and to (entity names)', async () => {
      const byType = await list(`?relationshipType=${type}`);
      expect(byType.status).toBe(200);
      expect(byType.body.map((r: any) => r.id)).toEqual(ids.slice(0, 6));
      expect(Object.keys(byType.body[0]).sort()).toEqual(RELATIONSHIP_FIELDS);
      expect((await list(`?from=${hub.name}`)).body.map((r: any) => r.id)).toEqual([...ids.slice(0, 5), ids[6]]);
      expect((await list(`?to=${spoke.name}`)).body.map((r: any) => r.id)).toEqual(ids.slice(5));
      expect((await list(`?from=${hub.name}&to=${spoke.name}&relationshipType=${otherType}`)).body.map((r: any) => r.id)).toEqual([ids[6]]);
    });

    it('answers an empty list for filters that name nothing', async () => {
      for (const query of ['?relationshipType=nope', '?from=nobody', '?to=nobody']) {
        const response = await list(query);
        expect(response.status).toBe(200);
        expect(response.body).toEqual([]);
      }
    });

    it('pages by keyset, oldest first, announcing each next page', async () => {
      const seen: string[] = [];
      let query = `?relationshipType=${type}&limit=2`;
      for (let pages = 0; pages < 10; pages += 1) {
        const response = await list(query);
        expect(response.status).toBe(200);
        expect(response.body.length).toBeLessThanOrEqual(2);
        seen.push(...response.body.map((r: any) => r.id));
        const cursor = response.headers.get('x-next-cursor');
        if (!cursor) {
          expect(response.headers.get('link')).toBeNull();
          break;
        }
        expect(response.headers.get('link')).toBe(`<${env}/relationships?relationshipType=${type}&limit=2&cursor=${cursor}>; rel="next"`);
        query = `?relationshipType=${type}&limit=2&cursor=${cursor}`;
      }
      expect(seen).toEqual(ids.slice(0, 6));
    });

    it('keeps rows created in the same transaction apart (ties on created_at break by id)', async () => {
      const w = await world();
      const a = await entity(w.from);
      const targets = [await entity(w.to), await entity(w.to), await entity(w.to)];
      const now = new Date();
      await api.db.insert(relationships).values(
        targets.map((b) => ({
          orgId: tenant.org.id,
          projectId: tenant.project.id,
          envId: envIds.default!,
          relationshipTypeName: w.type,
          fromEntityId: a.id,
          toEntityId: b.id,
          state: 'planned',
          createdAt: now,
        })),
      );
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const response = await list(`?relationshipType=${w.type}&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
        seen.push(...response.body.map((r: any) => r.id));
        cursor = response.headers.get('x-next-cursor');
      } while (cursor);
      expect(seen).toHaveLength(3);
      expect(new Set(seen).size).toBe(3);
      expect(seen).toEqual([...seen].sort());
    });

    it('defaults to 100 rows and refuses a limit outside 1–1000 or a foreign cursor (400 validation_failed)', async () => {
      expect((await list('?limit=1000')).status).toBe(200);
      for (const query of ['?limit=0', '?limit=1001', '?limit=ten', '?cursor=garbage', `?cursor=${btoa('["x","y"]')}`]) {
        expectError(await list(query), 400, 'validation_failed');
      }
    });

    it('lists only the environment in the path', async () => {
      const staging = await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs/staging/relationships?relationshipType=${type}`, {
        token: viewer,
      });
      expect(staging.status).toBe(200);
      expect(staging.body).toEqual([]);
      expectError(await api.call('GET', `/${tenant.org.slug}/${tenant.project.slug}/envs/nope/relationships`, { token: viewer }), 404, 'not_found');
    });
  });

  describe('GET, PUT, DELETE ENV/relationships/{id}', () => {
    it('gets one relationship by id', async () => {
      const { from, to, type } = await world();
      const made = await created({ relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name });
      const response = await api.call('GET', `${env}/relationships/${made.id}`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual(made);
    });

    it('answers 404 for an unknown id or one of another environment, 400 for an id that is not a UUID', async () => {
      const { from, to, type } = await world();
      const made = await created({ relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name });
      const staging = `/${tenant.org.slug}/${tenant.project.slug}/envs/staging/relationships/${made.id}`;
      for (const method of ['GET', 'PUT', 'DELETE']) {
        const body = method === 'PUT' ? {} : undefined;
        expectError(await api.call(method, `${env}/relationships/${crypto.randomUUID()}`, { token: owner, body }), 404, 'not_found');
        expectError(await api.call(method, staging, { token: owner, body }), 404, 'not_found');
        expectError(await api.call(method, `${env}/relationships/not-a-uuid`, { token: owner, body }), 400, 'validation_failed');
      }
    });

    it('updates state, properties and labels, each replacing the stored value', async () => {
      const { from, to } = await world();
      const type = await relationshipType({
        from,
        to,
        properties: [
          { name: 'port', type: 'integer' },
          { name: 'protocol', type: 'string', default: 'tcp' },
        ],
      });
      const made = await created({
        relationshipType: type,
        from: (await entity(from)).name,
        to: (await entity(to)).name,
        properties: { port: 1 },
        labels: { a: '1', b: '2' },
      });
      const path = `${env}/relationships/${made.id}`;
      const response = await api.call('PUT', path, { token: owner, body: { state: 'live', properties: { port: 2 }, labels: { c: '3' } } });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      const { updatedAt: _, ...unchanged } = made;
      expect(response.body).toMatchObject({ ...unchanged, state: 'live', properties: { port: 2, protocol: 'tcp' }, labels: { c: '3' } });
      expect(response.body.updatedAt >= made.updatedAt).toBe(true);
      // fields not given stay
      const labelsOnly = await api.call('PUT', path, { token: owner, body: { labels: {} } });
      expect(labelsOnly.body).toMatchObject({ state: 'live', properties: { port: 2, protocol: 'tcp' }, labels: {} });
      expect((await api.call('GET', path, { token: viewer })).body).toEqual(labelsOnly.body);
    });

    it('refuses an invalid update: state (400 invalid_state), properties (400 validation_failed), immutable or unknown fields', async () => {
      const { from, to } = await world();
      const type = await relationshipType({ from, to, properties: [{ name: 'port', type: 'integer' }] });
      const a = await entity(from);
      const made = await created({ relationshipType: type, from: a.name, to: (await entity(to)).name });
      const path = `${env}/relationships/${made.id}`;
      expectError(await api.call('PUT', path, { token: owner, body: { state: 'gone' } }), 400, 'invalid_state');
      const bad = await api.call('PUT', path, { token: owner, body: { properties: { port: 'x' } } });
      expectError(bad, 400, 'validation_failed');
      expect(bad.body.details).toEqual([{ path: 'properties.port', message: 'must be of type integer' }]);
      for (const body of [{ from: a.name }, { to: a.name }, { relationshipType: type }, { fromEntityId: a.id }]) {
        expectError(await api.call('PUT', path, { token: owner, body }), 400, 'validation_failed');
      }
      expectError(await api.call('PUT', path, { token: viewer, body: { state: 'live' } }), 403, 'forbidden');
      expect((await api.call('GET', path, { token: viewer })).body).toEqual(made);
    });

    it('enforces transition constraints of the type (409 transition_not_allowed)', async () => {
      const { from, to } = await world();
      const type = await relationshipType({ from, to, constraints: [{ kind: 'transition', from: 'planned', to: ['live'] }] });
      const made = await created({ relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name });
      const path = `${env}/relationships/${made.id}`;
      expectError(await api.call('PUT', path, { token: owner, body: { state: 'retired' } }), 409, 'transition_not_allowed');
      expect((await api.call('PUT', path, { token: owner, body: { state: 'live' } })).status).toBe(200);
      // staying in a state is not a transition
      expect((await api.call('PUT', path, { token: owner, body: { state: 'live', labels: { x: 'y' } } })).status).toBe(200);
    });

    it('deletes: 200 { deleted: true, id }, then 404', async () => {
      const { from, to, type } = await world();
      const made = await created({ relationshipType: type, from: (await entity(from)).name, to: (await entity(to)).name });
      const path = `${env}/relationships/${made.id}`;
      expectError(await api.call('DELETE', path, { token: viewer }), 403, 'forbidden');
      const response = await api.call('DELETE', path, { token: owner });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, id: made.id });
      expectError(await api.call('GET', path, { token: owner }), 404, 'not_found');
      expectError(await api.call('DELETE', path, { token: owner }), 404, 'not_found');
    });

    it('goes with either end: deleting an entity deletes its relationships', async () => {
      const { from, to, type } = await world();
      const a = await entity(from);
      const b = await entity(to);
      const made = await created({ relationshipType: type, from: a.name, to: b.name });
      const other = await created({ relationshipType: type, from: (await entity(from)).name, to: b.name });
      expect((await api.call('DELETE', `${env}/entities/${a.name}`, { token: owner })).status).toBe(200);
      expectError(await api.call('GET', `${env}/relationships/${made.id}`, { token: owner }), 404, 'not_found');
      expect((await api.call('GET', `${env}/relationships/${other.id}`, { token: owner })).status).toBe(200);
      expect((await api.call('DELETE', `${env}/entities/${b.name}`, { token: owner })).status).toBe(200);
      expectError(await api.call('GET', `${env}/relationships/${other.id}`, { token: owner }), 404, 'not_found');
    });
  });

  describe('GET ENV/entities/{name}/relationships', () => {
    it('lists every relationship touching the entity, both directions, with both end names', async () => {
      const service = await entityType();
      const type = await relationshipType({ from: service, to: service });
      const [a, b, c] = [await entity(service), await entity(service), await entity(service)];
      const out = await created({ relationshipType: type, from: b.name, to: c.name });
      const incoming = await created({ relationshipType: type, from: a.name, to: b.name });
      await created({ relationshipType: type, from: a.name, to: c.name });
      const response = await api.call('GET', `${env}/entities/${b.name}/relationships`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual([
        { ...out, fromEntityName: b.name, toEntityName: c.name },
        { ...incoming, fromEntityName: a.name, toEntityName: b.name },
      ]);
    });

    it('answers [] for an entity without relationships, 404 for a missing one', async () => {
      const lonely = await entity(await entityType());
      const response = await api.call('GET', `${env}/entities/${lonely.name}/relationships`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual([]);
      expectError(await api.call('GET', `${env}/entities/nobody/relationships`, { token: viewer }), 404, 'not_found');
      const staging = `/${tenant.org.slug}/${tenant.project.slug}/envs/staging/entities/${lonely.name}/relationships`;
      expectError(await api.call('GET', staging, { token: viewer }), 404, 'not_found');
    });

    it('takes names with / and : URL-encoded', async () => {
      const service = await entityType();
      const type = await relationshipType({ from: service, to: service });
      const a = await entity(service, { name: fresh('team/a:b') });
      const b = await entity(service);
      const made = await created({ relationshipType: type, from: a.name, to: b.name });
      const response = await api.call('GET', `${env}/entities/${encodeURIComponent(a.name)}/relationships`, { token: viewer });
      expect(response.status).toBe(200);
      expect(response.body).toEqual([{ ...made, fromEntityName: a.name, toEntityName: b.name }]);
    });
  });

  describe('cell scope', () => {
    // entities of `node` in the explicit cell `scope-cell` are inside; everything else is outside
    let scoped: string;
    let type: string;
    let inside: { id: string; name: string };
    let inside2: { id: string; name: string };
    let outside: { id: string; name: string };
    let outside2: { id: string; name: string };
    let insideOut: any;
    let outsideIn: any;
    let outsideOut: any;

    beforeAll(async () => {
      const node = await entityType();
      type = await relationshipType({ from: node, to: node });
      const cellName = fresh('scope-cell');
      const [cell] = await api.db
        .insert(cells)
        .values({
          orgId: tenant.org.id,
          projectId: tenant.project.id,
          name: cellName,
          entityTypeName: node,
          placementPolicy: 'least-loaded',
          membershipMode: 'explicit',
        })
        .returning();
      [inside, inside2, outside, outside2] = [await entity(node), await entity(node), await entity(node), await entity(node)];
      await api.db.insert(cellMembers).values([inside, inside2].map((e) => ({ cellId: cell!.id, envId: envIds.default!, entityId: e.id })));
      scoped = await mintToken(api, tenant, { role: 'member', cellScopes: [cellName], as: owner });
      insideOut = await created({ relationshipType: type, from: inside.name, to: outside.name });
      outsideIn = await created({ relationshipType: type, from: outside.name, to: inside.name });
      outsideOut = await created({ relationshipType: type, from: outside.name, to: outside2.name });
    });

    it('lists the relationships with either end in the cells', async () => {
      const response = await api.call('GET', `${env}/relationships?relationshipType=${type}`, { token: scoped });
      expect(response.status).toBe(200);
      expect(response.body.map((r: any) => r.id)).toEqual([insideOut.id, outsideIn.id]);
      const unscoped = await api.call('GET', `${env}/relationships?relationshipType=${type}`, { token: viewer });
      expect(unscoped.body.map((r: any) => r.id)).toEqual([insideOut.id, outsideIn.id, outsideOut.id]);
    });

    it('gets, updates and deletes only visible relationships; the others are 404', async () => {
      expect((await api.call('GET', `${env}/relationships/${insideOut.id}`, { token: scoped })).status).toBe(200);
      expect((await api.call('GET', `${env}/relationships/${outsideIn.id}`, { token: scoped })).status).toBe(200);
      const invisible = `${env}/relationships/${outsideOut.id}`;
      expectError(await api.call('GET', invisible, { token: scoped }), 404, 'not_found');
      expectError(await api.call('PUT', invisible, { token: scoped, body: { state: 'live' } }), 404, 'not_found');
      expectError(await api.call('DELETE', invisible, { token: scoped }), 404, 'not_found');
      expect((await api.call('GET', invisible, { token: owner })).body.state).toBe('planned');
      const updated = await api.call('PUT', `${env}/relationships/${outsideIn.id}`, { token: scoped, body: { state: 'live' } });
      expect(updated.status).toBe(200);
      expect(updated.body.state).toBe('live');
    });

    it('creates with at least one end in the cells; none is 403 cell_scope_violation', async () => {
      const inOut = await create({ relationshipType: type, from: inside2.name, to: outside2.name }, scoped);
      expect(inOut.status).toBe(201);
      expect((await api.call('DELETE', `${env}/relationships/${inOut.body.id}`, { token: scoped })).status).toBe(200);
      expect((await create({ relationshipType: type, from: outside2.name, to: inside2.name }, scoped)).status).toBe(201);
      expectError(await create({ relationshipType: type, from: outside2.name, to: outside.name }, scoped), 403, 'cell_scope_violation');
      const stored = await api.db
        .select()
        .from(relationships)
        .where(and(eq(relationships.fromEntityId, outside2.id), eq(relationships.toEntityId, outside.id)));
      expect(stored).toEqual([]);
    });

    it("lists an entity's relationships only when the entity is in the cells", async () => {
      const response = await api.call('GET', `${env}/entities/${inside.name}/relationships`, { token: scoped });
      expect(response.status).toBe(200);
      expect(response.body.map((r: any) => r.id)).toEqual([insideOut.id, outsideIn.id]);
      expectError(await api.call('GET', `${env}/entities/${outside.name}/relationships`, { token: scoped }), 404, 'not_found');
    });
  });
});
