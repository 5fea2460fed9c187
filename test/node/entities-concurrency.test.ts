import { and, asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entities, entityChanges, entityTypes, environments } from '../../src/db/schema';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';

/**
 * Concurrent writers. On PGlite (one session) the requests take turns; on
 * Postgres (TEST_DATABASE_URL) they really race, each on its own pooled
 * connection. The outcome must be the same on both.
 */
describe('entities under concurrent writes', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

  const envPath = (env: string) => `/${tenant.org.slug}/${tenant.project.slug}/envs/${env}/entities`;

  async function newEnv(): Promise<{ name: string; id: string }> {
    const name = fresh('race');
    const response = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token: owner, body: { name } });
    expect(response.status).toBe(201);
    return { name, id: response.body.id };
  }

  const changesOf = (envId: string) =>
    api.db.select().from(entityChanges).where(eq(entityChanges.envId, envId)).orderBy(asc(entityChanges.seq));

  const create = (env: string, body: Record<string, unknown>) =>
    api.call('POST', envPath(env), { token: owner, body: { kind: 'Entity', entityType: 'node', ...body } });

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    await api.db.insert(entityTypes).values({
      orgId: tenant.org.id,
      projectId: tenant.project.id,
      name: 'node',
      states: ['up', 'down'],
      initialState: 'up',
      properties: [{ name: 'ip', type: 'string' }, { name: 'n', type: 'integer' }],
      constraints: [{ kind: 'unique', properties: ['ip'] }],
    });
  });
  afterAll(() => api.close());

  it('of one name: exactly one create wins, the others are 409 already_exists', async () => {
    const env = await newEnv();
    const responses = await Promise.all(Array.from({ length: 8 }, () => create(env.name, { name: 'same' })));
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 409, 409, 409, 409, 409, 409, 409]);
    for (const response of responses.filter((r) => r.status === 409)) expect(response.body.code).toBe('already_exists');
    expect(await api.db.select().from(entities).where(eq(entities.envId, env.id))).toHaveLength(1);
    expect((await changesOf(env.id)).map((c) => [c.seq, c.type])).toEqual([[1, 'entity.created']]);
  });

  it('of one unique value: exactly one create wins, the others are 409 constraint_violation', async () => {
    const env = await newEnv();
    const responses = await Promise.all(
      Array.from({ length: 8 }, (_, i) => create(env.name, { name: `node-${i}`, properties: { ip: '10.0.0.1' } })),
    );
    const winners = responses.filter((r) => r.status === 201);
    expect(winners).toHaveLength(1);
    for (const response of responses.filter((r) => r.status !== 201)) {
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 409, code: 'constraint_violation' });
    }
    const rows = await api.db.select().from(entities).where(eq(entities.envId, env.id));
    expect(rows.map((r) => r.name)).toEqual([winners[0]!.body.name]);
    expect(await changesOf(env.id)).toHaveLength(1);
  });

  it('of one unique value by update: exactly one update wins', async () => {
    const env = await newEnv();
    for (let i = 0; i < 6; i++) expect((await create(env.name, { name: `u-${i}`, properties: { ip: `10.0.1.${i}` } })).status).toBe(201);
    const responses = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        api.call('PUT', `${envPath(env.name)}/u-${i}`, { token: owner, body: { properties: { ip: '10.9.9.9' } } }),
      ),
    );
    expect(responses.filter((r) => r.status === 200)).toHaveLength(1);
    expect(responses.filter((r) => r.status === 409 && r.body.code === 'constraint_violation')).toHaveLength(5);
    const holders = await api.db
      .select({ name: entities.name })
      .from(entities)
      .where(and(eq(entities.envId, env.id), eq(entities.properties, { ip: '10.9.9.9' })));
    expect(holders).toHaveLength(1);
    expect(await changesOf(env.id)).toHaveLength(7);
  });

  it('creates and updates in one environment get change sequences 1..N with no gap or duplicate', async () => {
    const env = await newEnv();
    const created = await Promise.all(Array.from({ length: 20 }, (_, i) => create(env.name, { name: `c-${i}` })));
    expect(created.every((r) => r.status === 201)).toBe(true);
    // twenty updates at once: ten entities once each, and one entity ten times
    const updates = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) =>
        api.call('PUT', `${envPath(env.name)}/c-${i}`, { token: owner, body: { properties: { n: i } } }),
      ),
      ...Array.from({ length: 10 }, (_, i) =>
        api.call('PUT', `${envPath(env.name)}/c-19`, { token: owner, body: { properties: { n: i }, state: i % 2 ? 'down' : 'up' } }),
      ),
    ]);
    expect(updates.map((r) => r.status)).toEqual(Array(20).fill(200));
    const changes = await changesOf(env.id);
    expect(changes.map((c) => c.seq)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    expect(changes.slice(0, 20).every((c) => c.type === 'entity.created')).toBe(true);
    expect(changes.slice(20).every((c) => c.type === 'entity.updated')).toBe(true);
    // the last logged state of c-19 is the state it has
    const lastOfC19 = changes.filter((c) => c.entityName === 'c-19').at(-1)!;
    const [row] = await api.db.select().from(entities).where(and(eq(entities.envId, env.id), eq(entities.name, 'c-19')));
    expect((lastOfC19.entity as { properties: unknown }).properties).toEqual(row!.properties);
    const [counter] = await api.db.select({ seq: environments.changeSeq }).from(environments).where(eq(environments.id, env.id));
    expect(counter!.seq).toBe(40);
  });

  it('racing a type update that removes a state: the entity is refused, or the type update is', async () => {
    const env = await newEnv();
    const typesPath = `/${tenant.org.slug}/${tenant.project.slug}/entity-types`;
    for (let round = 0; round < 5; round++) {
      const type = fresh('shifty');
      const definition = { kind: 'EntityType', name: type, states: ['a', 'b'], initialState: 'a' };
      expect((await api.call('POST', typesPath, { token: owner, body: definition })).status).toBe(201);
      const [entity, typeUpdate] = await Promise.all([
        create(env.name, { entityType: type, name: fresh('e'), state: 'b' }),
        api.call('PUT', `${typesPath}/${type}`, { token: owner, body: { ...definition, states: ['a'] } }),
      ]);
      const outcome = [entity.status, typeUpdate.status];
      // never both: an entity in a state its type no longer declares
      expect([[201, 409], [400, 200]], JSON.stringify([entity.body, typeUpdate.body])).toContainEqual(outcome);
      if (entity.status === 400) expect(entity.body.code).toBe('invalid_state');
      else expect(typeUpdate.body.code).toBe('still_referenced');
    }
  });

  it('creates in one statement racing a type update: no committed entity is in a state its committed type lacks', async () => {
    const env = await newEnv();
    const typesPath = `/${tenant.org.slug}/${tenant.project.slug}/entity-types`;
    for (let round = 0; round < 6; round++) {
      const type = fresh('racy');
      const definition = { kind: 'EntityType', name: type, states: ['a', 'b'], initialState: 'a' };
      expect((await api.call('POST', typesPath, { token: owner, body: definition })).status).toBe(201);
      // two creates first: from the second on, this process creates entities of the type in one statement
      for (let i = 0; i < 2; i++) expect((await create(env.name, { entityType: type, name: fresh('warm') })).status).toBe(201);
      const [typeUpdate, ...creates] = await Promise.all([
        api.call('PUT', `${typesPath}/${type}`, { token: owner, body: { ...definition, states: ['a'] } }),
        ...Array.from({ length: 6 }, () => create(env.name, { entityType: type, name: fresh('e'), state: 'b' })),
      ]);
      for (const response of creates) {
        expect([201, 400], JSON.stringify(response.body)).toContain(response.status);
        if (response.status === 400) expect(response.body.code).toBe('invalid_state');
      }
      const [committed] = await api.db.select({ states: entityTypes.states }).from(entityTypes).where(
        and(eq(entityTypes.projectId, tenant.project.id), eq(entityTypes.name, type)),
      );
      const rows = await api.db.select().from(entities).where(and(eq(entities.envId, env.id), eq(entities.entityTypeName, type)));
      // never an entity in a state the committed type does not declare
      for (const row of rows) expect(committed!.states, `${row.name} in ${row.state}`).toContain(row.state);
      // exactly the 201s were written
      const written = rows.filter((row) => row.state === 'b').map((row) => row.name).sort();
      expect(written).toEqual(creates.filter((r) => r.status === 201).map((r) => r.body.name).sort());
      if (typeUpdate.status === 200) expect(written).toEqual([]);
      else expect({ status: typeUpdate.status, code: typeUpdate.body.code }).toEqual({ status: 409, code: 'still_referenced' });
    }
    // every change is logged once, in sequence
    const changes = await changesOf(env.id);
    expect(changes.map((c) => c.seq)).toEqual(Array.from({ length: changes.length }, (_, i) => i + 1));
    expect(changes).toHaveLength((await api.db.select().from(entities).where(eq(entities.envId, env.id))).length);
  });

  it('a delete racing updates of the same entity: each request either applies and is logged, or is 404', async () => {
    const env = await newEnv();
    expect((await create(env.name, { name: 'victim' })).status).toBe(201);
    const responses = await Promise.all([
      ...Array.from({ length: 5 }, (_, i) => api.call('PUT', `${envPath(env.name)}/victim`, { token: owner, body: { properties: { n: i } } })),
      api.call('DELETE', `${envPath(env.name)}/victim`, { token: owner }),
      ...Array.from({ length: 5 }, (_, i) => api.call('PUT', `${envPath(env.name)}/victim`, { token: owner, body: { properties: { n: i } } })),
    ]);
    expect(responses.every((r) => r.status === 200 || r.status === 404)).toBe(true);
    const applied = responses.filter((r) => r.status === 200).length;
    const changes = await changesOf(env.id);
    expect(changes).toHaveLength(1 + applied);
    expect(changes.at(-1)!.type).toBe('entity.deleted');
    expect(changes.map((c) => c.seq)).toEqual(Array.from({ length: changes.length }, (_, i) => i + 1));
  });
});
