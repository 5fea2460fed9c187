import { and, asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entityChanges, environments, orgs } from '../../src/db/schema';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';
import { countStatements } from '../support/statement-counter';

/**
 * GET of an entity and POST of an entity are answered in one statement when
 * the answer is a plain success (src/modules/entities/fast-paths.ts); every
 * other answer comes from the usual path. These tests warm the fast paths up
 * (the type definition a create validates against is remembered per process),
 * check that they are taken, and then that each change of the token, the
 * tenancy or the type is seen by the very next request, with the answer the
 * usual path gives.
 */
describe('entity read and create in one statement', () => {
  const clock = manualClock(new Date('2026-11-21T10:00:00.000Z'));
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

  const projectPath = () => `/${tenant.org.slug}/${tenant.project.slug}`;
  const entitiesPath = (env = 'default') => `${projectPath()}/envs/${env}/entities`;
  const typesPath = () => `${projectPath()}/entity-types`;
  const tokensPath = () => `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;

  const get = (name: string, token: string, env = 'default') => api.call('GET', `${entitiesPath(env)}/${name}`, { token });
  const create = (body: Record<string, unknown>, token: string, env = 'default') =>
    api.call('POST', entitiesPath(env), { token, body: { kind: 'Entity', entityType: 'host', ...body } });

  /** The statements a call sends: one and no transaction is the fast path. */
  async function measured<T>(call: () => Promise<T>): Promise<{ result: T; statements: number; transactions: number }> {
    let result!: T;
    const counts = await countStatements(api.testDatabase.database, async () => {
      result = await call();
    });
    return { result, ...counts };
  }

  const hostType = {
    kind: 'EntityType',
    name: 'host',
    states: ['up', 'down', 'gone'],
    initialState: 'up',
    properties: [
      { name: 'ip', type: 'string' },
      { name: 'zone', type: 'string', default: 'z1' },
    ],
    constraints: [{ kind: 'unique', properties: ['ip'] }],
  };

  async function envId(name: string): Promise<string> {
    const [env] = await api.db
      .select({ id: environments.id })
      .from(environments)
      .where(and(eq(environments.projectId, tenant.project.id), eq(environments.name, name)));
    return env!.id;
  }

  const changesOf = async (env: string) =>
    api.db.select().from(entityChanges).where(eq(entityChanges.envId, await envId(env))).orderBy(asc(entityChanges.seq));

  /** A create and a read that take the fast paths from here on (the type is remembered after the first create). */
  async function warmUp(token: string, env = 'default'): Promise<string> {
    const name = fresh('warm');
    expect((await create({ name }, token, env)).status).toBe(201);
    const second = await measured(() => create({ name: fresh('warm') }, token, env));
    expect(second.result.status, JSON.stringify(second.result.body)).toBe(201);
    expect({ statements: second.statements, transactions: second.transactions }).toEqual({ statements: 1, transactions: 0 });
    // the first read after an access change anywhere checks the token in full, once (src/auth/plain-callers.ts)
    expect((await get(name, token, env)).status).toBe(200);
    const read = await measured(() => get(name, token, env));
    expect(read.result.status).toBe(200);
    expect(read.statements).toBe(1);
    return name;
  }

  beforeAll(async () => {
    api = await createTestApi({ clock });
    tenant = await createTenant(api);
    expect((await api.call('POST', `${projectPath()}/envs`, { body: { name: 'staging' } })).status).toBe(201);
    owner = await mintToken(api, tenant, { role: 'owner' });
    expect((await api.call('POST', typesPath(), { token: owner, body: hostType })).status).toBe(201);
  });
  afterAll(() => api.close());

  it('answers a plain read and a plain create in one statement each, with what the usual path answers', async () => {
    await warmUp(owner);
    const name = fresh('plain');
    const created = await measured(() => create({ name, properties: { ip: '10.0.0.1' }, labels: { team: 'a' } }, owner));
    expect(created.statements).toBe(1);
    expect(created.result.status).toBe(201);
    expect(created.result.body).toMatchObject({
      name,
      entityTypeName: 'host',
      state: 'up',
      properties: { ip: '10.0.0.1', zone: 'z1' },
      labels: { team: 'a' },
      lastSyncedAt: null,
      syncSource: null,
      createdAt: clock.now().toISOString(),
      updatedAt: clock.now().toISOString(),
      orgId: tenant.org.id,
      projectId: tenant.project.id,
      envId: await envId('default'),
    });
    const read = await get(name, owner);
    expect(read.status).toBe(200);
    expect(read.body).toEqual(created.result.body);
  });

  it('writes the change-log row with the same entity and the next sequence, as the transactional path does', async () => {
    const env = 'staging';
    // the first create of a type in a process goes the transactional way; the second one, in one statement
    const slow = await measured(() => create({ name: fresh('slow'), properties: { ip: '10.1.0.1' }, lastSyncedAt: '2026-11-21T09:00:00.000Z', syncSource: 'cmdb' }, owner, env));
    const fast = await measured(() => create({ name: fresh('fast'), properties: { ip: '10.1.0.2' }, lastSyncedAt: '2026-11-21T09:30:00.000Z', syncSource: 'cmdb' }, owner, env));
    expect(slow.result.status).toBe(201);
    expect(fast.result.status).toBe(201);
    expect(fast.transactions).toBe(0);
    const changes = await changesOf(env);
    const last = changes.slice(-2);
    expect(last.map((c) => c.seq)).toEqual([changes.length - 1, changes.length]);
    for (const [change, response] of [
      [last[0]!, slow.result.body],
      [last[1]!, fast.result.body],
    ] as const) {
      expect(change).toMatchObject({ type: 'entity.created', entityId: response.id, entityName: response.name, entityTypeName: 'host' });
      expect(change.entity).toEqual(response);
    }
    const [counter] = await api.db.select({ seq: environments.changeSeq }).from(environments).where(eq(environments.id, await envId(env)));
    expect(counter!.seq).toBe(changes.length);
  });

  it('answers 409 already_exists for a taken name, and 409 constraint_violation for a taken unique value, writing nothing', async () => {
    await warmUp(owner);
    const name = fresh('taken');
    expect((await create({ name, properties: { ip: '10.2.0.1' } }, owner)).status).toBe(201);
    const before = (await changesOf('default')).length;
    expectError(await create({ name, properties: { ip: '10.2.0.2' } }, owner), 409, 'already_exists');
    const clash = await create({ name: fresh('clash'), properties: { ip: '10.2.0.1' } }, owner);
    expectError(clash, 409, 'constraint_violation');
    expect(clash.body.details).toEqual([{ path: 'properties.ip', message: 'must be unique in the environment' }]);
    expect(await changesOf('default')).toHaveLength(before);
    // and the fast path still works afterwards
    expect((await measured(() => create({ name: fresh('after'), properties: { ip: '10.2.0.3' } }, owner))).statements).toBe(1);
  });

  it('refuses a revoked token on the very next read and create (401)', async () => {
    const minted = await api.call('POST', tokensPath(), { token: owner, body: { name: fresh('doomed'), role: 'member' } });
    const token = minted.body.token as string;
    const name = await warmUp(token);
    expect((await api.call('DELETE', `${tokensPath()}/${minted.body.id}`, { token: owner })).status).toBe(200);
    expectError(await get(name, token), 401, 'unauthorized');
    expectError(await create({ name: fresh('late') }, token), 401, 'unauthorized');
  });

  it('refuses an expired token on the very next read and create (401), and takes one until then', async () => {
    const expiresAt = new Date(clock.now().getTime() + 60_000);
    const token = await mintToken(api, tenant, { role: 'member', expiresAt: expiresAt.toISOString(), as: owner });
    const name = await warmUp(token);
    clock.set(new Date(expiresAt.getTime() - 1));
    expect((await get(name, token)).status).toBe(200);
    clock.set(expiresAt);
    expectError(await get(name, token), 401, 'unauthorized');
    expectError(await create({ name: fresh('late') }, token), 401, 'unauthorized');
    clock.set(new Date('2026-11-21T10:00:00.000Z'));
  });

  it('answers a token pinned to another environment 403, and takes it in its own', async () => {
    const pinned = await mintToken(api, tenant, { role: 'member', envName: 'staging', as: owner });
    const name = await warmUp(pinned, 'staging');
    expect((await create({ name: fresh('other') }, owner)).status).toBe(201);
    const other = await warmUp(owner);
    expectError(await get(other, pinned), 403, 'forbidden');
    expectError(await create({ name: fresh('pinned') }, pinned), 403, 'forbidden');
    expect((await get(name, pinned, 'staging')).status).toBe(200);
  });

  it('answers a role without data:write 403 on create, and reads for it in one statement', async () => {
    const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
    const name = await warmUp(owner);
    const read = await measured(() => get(name, viewer));
    expect(read.result.status).toBe(200);
    expect(read.statements).toBe(1);
    expectError(await create({ name: fresh('viewer') }, viewer), 403, 'forbidden');
  });

  it('answers an unknown entity, environment or type 404', async () => {
    await warmUp(owner);
    expectError(await get('nope', owner), 404, 'not_found');
    expectError(await get('nope', owner, 'nowhere'), 404, 'not_found');
    expectError(await create({ name: fresh('x') }, owner, 'nowhere'), 404, 'not_found');
    expectError(await create({ name: fresh('x'), entityType: 'nope' }, owner), 404, 'not_found');
  });

  it('answers a suspended organization 403 org_suspended on the very next read and create', async () => {
    const name = await warmUp(owner);
    await api.db.update(orgs).set({ suspendedAt: clock.now() }).where(eq(orgs.id, tenant.org.id));
    try {
      expectError(await get(name, owner), 403, 'org_suspended');
      expectError(await create({ name: fresh('suspended') }, owner), 403, 'org_suspended');
    } finally {
      await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id));
    }
    expect((await get(name, owner)).status).toBe(200);
  });

  it('answers a request that does not validate 400 after authorizing it, as before', async () => {
    await warmUp(owner);
    expectError(await create({ name: fresh('bad'), state: 'sideways' }, owner), 400, 'invalid_state');
    expectError(await create({ name: fresh('bad'), properties: { ip: 7 } }, owner), 400, 'validation_failed');
    expectError(await create({ name: fresh('bad'), lastSyncedAt: '2026-11-21T11:00:00.000Z' }, owner), 400, 'validation_failed');
    // authorization first: a viewer's invalid create is a 403, not a 400
    const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
    expectError(await create({ name: fresh('bad'), state: 'sideways' }, viewer), 403, 'forbidden');
  });

  it('validates the next create against a changed type: a new required property, a removed state', async () => {
    const typeName = fresh('shifting');
    const definition = { ...hostType, name: typeName, constraints: [] };
    expect((await api.call('POST', typesPath(), { token: owner, body: definition })).status).toBe(201);
    expect((await create({ entityType: typeName, name: fresh('s'), state: 'down' }, owner)).status).toBe(201);
    expect((await measured(() => create({ entityType: typeName, name: fresh('s'), state: 'down' }, owner))).statements).toBe(1);

    const required = { ...definition, properties: [...definition.properties, { name: 'rack', type: 'string', required: true }] };
    expect((await api.call('PUT', `${typesPath()}/${typeName}`, { token: owner, body: required })).status).toBe(200);
    expectError(await create({ entityType: typeName, name: fresh('s') }, owner), 400, 'validation_failed');
    const withRack = await create({ entityType: typeName, name: fresh('s'), properties: { rack: 'r1' } }, owner);
    expect(withRack.status).toBe(201);
    expect(withRack.body.properties).toEqual({ rack: 'r1', zone: 'z1' });

    // a state no entity is in can be removed; the next create into it is refused
    const fewer = { ...required, states: ['up', 'down'] };
    expect((await api.call('PUT', `${typesPath()}/${typeName}`, { token: owner, body: fewer })).status).toBe(200);
    expectError(await create({ entityType: typeName, name: fresh('s'), state: 'gone', properties: { rack: 'r1' } }, owner), 400, 'invalid_state');
    expect((await measured(() => create({ entityType: typeName, name: fresh('s'), properties: { rack: 'r2' } }, owner))).statements).toBe(1);
  });

  it('leaves a cell-scoped token to the usual path: 404 for reads outside its cells, 403 cell_scope_violation for such creates', async () => {
    const cell = await api.call('POST', `${projectPath()}/cells`, {
      token: owner,
      body: { kind: 'Cell', name: fresh('team'), entityType: 'host', membership: { mode: 'derived', derivedFrom: { selector: { labels: { team: 'in' } } } } },
    });
    expect(cell.status, JSON.stringify(cell.body)).toBe(201);
    const scoped = await mintToken(api, tenant, { role: 'member', cellScopes: [cell.body.name], as: owner });
    await warmUp(owner);
    const inside = fresh('inside');
    const outside = fresh('outside');
    expect((await create({ name: inside, labels: { team: 'in' } }, owner)).status).toBe(201);
    expect((await create({ name: outside, labels: { team: 'out' } }, owner)).status).toBe(201);
    expect((await get(inside, scoped)).status).toBe(200);
    expectError(await get(outside, scoped), 404, 'not_found');
    expect((await create({ name: fresh('in'), labels: { team: 'in' } }, scoped)).status).toBe(201);
    const before = (await changesOf('default')).length;
    expectError(await create({ name: fresh('out'), labels: { team: 'out' } }, scoped), 403, 'cell_scope_violation');
    expect(await changesOf('default')).toHaveLength(before);
  });
});
