import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cellMembers, cells, entities, relationships } from '../../src/db/schema';
import { cellFactories } from '../support/cell-fixtures';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

const CELL_FIELDS = [
  'constraints',
  'createdAt',
  'deploymentTarget',
  'displayName',
  'entityTypeName',
  'membershipDerivedFrom',
  'membershipMode',
  'name',
  'orgId',
  'parentCells',
  'placementPolicy',
  'projectId',
  'updatedAt',
];
const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

describe('cells', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let proj: string;
  let make: ReturnType<typeof cellFactories>;
  let n = 0;
  const unique = (base: string) => `${base}-${++n}`;

  const call = (method: string, path: string, body?: unknown, token: string = owner) =>
    api.call(method, `${proj}${path}`, { token, body });
  const cellBody = (name: string, fields: Record<string, unknown> = {}) => ({ kind: 'Cell', name, entityType: 'vm', ...fields });
  const createCell = async (name: string, fields: Record<string, unknown> = {}) => {
    const response = await call('POST', '/cells', cellBody(name, fields));
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  };
  const memberNames = async (cell: string, query = '', token = owner) => {
    const response = await call('GET', `/cells/${encodeURIComponent(cell)}/members${query}`, undefined, token);
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body.map((e: { name: string }) => e.name);
  };
  const addMember = (cell: string, entityName: string, fields: Record<string, unknown> = {}, query = '', token = owner) =>
    call('POST', `/cells/${encodeURIComponent(cell)}/members${query}`, { entityName, entityTypeName: 'vm', ...fields }, token);

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    await api.call('POST', `${proj}/envs`, { body: { name: 'staging' } });
    owner = await mintToken(api, tenant, { role: 'owner' });
    make = cellFactories(api, tenant);
    await make.entityType('vm');
    await make.entityType('host');
    await make.relationshipType('hosts', 'host', 'vm');
    await make.relationshipType('runs-on', 'vm', 'host');
  });
  afterAll(() => api.close());

  describe('create, read, list', () => {
    it('creates an explicit cell with the defaults and answers exactly the Cell fields', async () => {
      const response = await call('POST', '/cells', cellBody('plain'));
      expect(response.status).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(CELL_FIELDS);
      expect(response.body).toMatchObject({
        name: 'plain',
        displayName: null,
        placementPolicy: 'least-loaded',
        constraints: [],
        parentCells: [],
        deploymentTarget: null,
        entityTypeName: 'vm',
        membershipMode: 'explicit',
        membershipDerivedFrom: null,
        orgId: tenant.org.id,
        projectId: tenant.project.id,
      });
      expect(response.body.createdAt).toMatch(RFC3339_MS);
      expect(response.body.updatedAt).toMatch(RFC3339_MS);
      expect((await call('GET', '/cells/plain')).body).toEqual(response.body);
    });

    it('stores every field of the request', async () => {
      await createCell('region-eu');
      const derivedFrom = { selector: { labels: { tier: 'gold' }, states: ['active'] } };
      const constraints = [
        { key: 'state', operator: 'eq', value: 'active' },
        { key: 'metrics.cpu', operator: 'lt', value: 80 },
        { key: 'labels.zone', operator: 'exists' },
      ];
      const body = await createCell('full', {
        displayName: 'Full cell',
        placementPolicy: 'round-robin',
        constraints,
        parentCells: ['region-eu', 'region-eu'],
        membership: { mode: 'derived', derivedFrom },
        deploymentTarget: 'k8s://eu-west-1',
      });
      expect(body).toMatchObject({
        name: 'full',
        displayName: 'Full cell',
        placementPolicy: 'round-robin',
        constraints,
        parentCells: ['region-eu'],
        deploymentTarget: 'k8s://eu-west-1',
        membershipMode: 'derived',
        membershipDerivedFrom: derivedFrom,
      });
    });

    it('accepts an explicit membership object and a derived relationship membership', async () => {
      expect((await createCell('explicit-said', { membership: { mode: 'explicit' } })).membershipMode).toBe('explicit');
      const derivedFrom = { relationship: { type: 'hosts', entity: 'h-1', direction: 'outgoing' } };
      const body = await createCell('by-host', { membership: { mode: 'derived', derivedFrom } });
      expect(body.membershipDerivedFrom).toEqual(derivedFrom);
    });

    it('lists the cells by name; GET of an unknown cell is 404', async () => {
      const list = await call('GET', '/cells');
      expect(list.status).toBe(200);
      const names = list.body.map((c: { name: string }) => c.name);
      expect(names).toEqual([...names].sort());
      expect(names).toEqual(expect.arrayContaining(['plain', 'full', 'region-eu']));
      expectError(await call('GET', '/cells/nope'), 404, 'not_found');
    });

    it('serves names with / and : URL-encoded', async () => {
      await createCell('eu/west:1');
      expect((await call('GET', `/cells/${encodeURIComponent('eu/west:1')}`)).body.name).toBe('eu/west:1');
    });

    it('refuses a duplicate name: 409 already_exists', async () => {
      expectError(await call('POST', '/cells', cellBody('plain')), 409, 'already_exists');
    });

    it('refuses a missing entity type: 400 invalid_reference', async () => {
      expectError(await call('POST', '/cells', cellBody('c', { entityType: 'ghost' })), 400, 'invalid_reference');
    });

    it('refuses a derived relationship type that does not exist, or leads elsewhere: 400 invalid_reference', async () => {
      const derived = (relationship: object) => cellBody(unique('rel'), { membership: { mode: 'derived', derivedFrom: { relationship } } });
      expectError(await call('POST', '/cells', derived({ type: 'ghost', entity: 'h-1' })), 400, 'invalid_reference');
      // hosts goes host → vm: incoming members would be hosts, not vms
      expectError(await call('POST', '/cells', derived({ type: 'hosts', entity: 'h-1', direction: 'incoming' })), 400, 'invalid_reference');
      expect((await call('POST', '/cells', derived({ type: 'runs-on', entity: 'h-1', direction: 'incoming' }))).status).toBe(201);
    });

    it('refuses a selector state the entity type does not have: 400 invalid_reference', async () => {
      const body = cellBody('s', { membership: { mode: 'derived', derivedFrom: { selector: { states: ['runing'] } } } });
      expectError(await call('POST', '/cells', body), 400, 'invalid_reference');
    });

    it('refuses an empty selector: 400 validation_failed', async () => {
      for (const selector of [{}, { labels: {} }, { states: [], properties: {} }]) {
        const body = cellBody('empty', { membership: { mode: 'derived', derivedFrom: { selector } } });
        expectError(await call('POST', '/cells', body), 400, 'validation_failed');
      }
      expectError(await call('POST', '/cells', cellBody('empty', { membership: { mode: 'derived' } })), 400, 'validation_failed');
    });

    it('validates the request strictly: 400 validation_failed', async () => {
      const bad = [
        { name: 'x', entityType: 'vm' },
        { kind: 'Entity', name: 'x', entityType: 'vm' },
        cellBody('x', { extra: true }),
        cellBody('-x'),
        { kind: 'Cell', name: 'x' },
        cellBody('x', { placementPolicy: 'fastest' }),
        cellBody('x', { constraints: [{ key: 'color', operator: 'eq', value: 1 }] }),
        cellBody('x', { constraints: [{ key: 'state', operator: 'eq' }] }),
        cellBody('x', { membership: { mode: 'sometimes' } }),
        cellBody('x', { membership: { mode: 'explicit', derivedFrom: { selector: { states: ['active'] } } } }),
      ];
      for (const body of bad) {
        const response = await call('POST', '/cells', body);
        expectError(response, 400, 'validation_failed');
        expect(response.body.details.length).toBeGreaterThan(0);
      }
    });

    it('refuses a missing parent cell: 404 not_found', async () => {
      expectError(await call('POST', '/cells', cellBody('orphan', { parentCells: ['region-eu', 'ghost'] })), 404, 'not_found');
    });

    it('refuses a cell as its own parent: 400 invalid_reference', async () => {
      expectError(await call('POST', '/cells', cellBody('selfish', { parentCells: ['selfish'] })), 400, 'invalid_reference');
    });
  });

  describe('replace', () => {
    it('replaces wholesale: omitted fields go back to their defaults', async () => {
      const before = await createCell('swap', {
        displayName: 'Swap',
        placementPolicy: 'random',
        constraints: [{ key: 'state', operator: 'eq', value: 'active' }],
        parentCells: ['region-eu'],
        deploymentTarget: 't',
      });
      await new Promise((resolve) => setTimeout(resolve, 5));
      const response = await call('PUT', '/cells/swap', cellBody('swap', { entityType: 'host' }));
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({
        name: 'swap',
        displayName: null,
        placementPolicy: 'least-loaded',
        constraints: [],
        parentCells: [],
        deploymentTarget: null,
        entityTypeName: 'host',
        membershipMode: 'explicit',
        createdAt: before.createdAt,
      });
      expect(Date.parse(response.body.updatedAt)).toBeGreaterThan(Date.parse(before.updatedAt));
      expect((await call('GET', '/cells/swap')).body).toEqual(response.body);
    });

    it('404s an unknown cell and refuses a body naming another cell', async () => {
      expectError(await call('PUT', '/cells/ghost', cellBody('ghost')), 404, 'not_found');
      expectError(await call('PUT', '/cells/plain', cellBody('other')), 400, 'validation_failed');
    });

    it('checks references as create does', async () => {
      expectError(await call('PUT', '/cells/plain', cellBody('plain', { entityType: 'ghost' })), 400, 'invalid_reference');
      expectError(await call('PUT', '/cells/plain', cellBody('plain', { parentCells: ['ghost'] })), 404, 'not_found');
      expectError(await call('PUT', '/cells/plain', cellBody('plain', { parentCells: ['plain'] })), 400, 'invalid_reference');
      const derived = { mode: 'derived', derivedFrom: { relationship: { type: 'ghost', entity: 'x' } } };
      expectError(await call('PUT', '/cells/plain', cellBody('plain', { membership: derived })), 400, 'invalid_reference');
    });

    it('refuses parents that would form a cycle: 400 invalid_reference', async () => {
      await createCell('cy-a');
      await createCell('cy-b', { parentCells: ['cy-a'] });
      await createCell('cy-c', { parentCells: ['cy-b'] });
      const direct = await call('PUT', '/cells/cy-a', cellBody('cy-a', { parentCells: ['cy-b'] }));
      expectError(direct, 400, 'invalid_reference');
      expect(direct.body.error).toContain('cy-a → cy-b → cy-a');
      expectError(await call('PUT', '/cells/cy-a', cellBody('cy-a', { parentCells: ['region-eu', 'cy-c'] })), 400, 'invalid_reference');
      // a diamond is not a cycle
      await createCell('cy-d', { parentCells: ['cy-a'] });
      expect((await call('PUT', '/cells/cy-c', cellBody('cy-c', { parentCells: ['cy-b', 'cy-d'] }))).status).toBe(200);
      expect((await call('GET', '/cells/cy-a')).body.parentCells).toEqual([]);
    });

    it('lets only one of two concurrent PUTs that would close a cycle commit', async () => {
      for (let round = 0; round < 5; round++) {
        const [a, b] = [unique('race-a'), unique('race-b')];
        await createCell(a);
        await createCell(b);
        const answers = await Promise.all([
          call('PUT', `/cells/${a}`, cellBody(a, { parentCells: [b] })),
          call('PUT', `/cells/${b}`, cellBody(b, { parentCells: [a] })),
        ]);
        expect(answers.map((r) => r.status).sort()).toEqual([200, 400]);
        expect(answers.find((r) => r.status === 400)!.body.code).toBe('invalid_reference');
      }
    });

    it('never lets a child be created under a parent deleted at the same time', async () => {
      for (let round = 0; round < 5; round++) {
        const [parent, child] = [unique('race-parent'), unique('race-child')];
        await createCell(parent);
        const [created, deleted] = await Promise.all([
          call('POST', '/cells', cellBody(child, { parentCells: [parent] })),
          call('DELETE', `/cells/${parent}`),
        ]);
        // either the child came first (delete refused) or the delete did (parent missing)
        expect([
          [201, 409],
          [404, 200],
        ]).toContainEqual([created.status, deleted.status]);
      }
    });

    it('keeps explicit members across a replace, and drops them when the cell turns derived', async () => {
      await make.entity('keep-1', 'vm');
      await createCell('keeper');
      expect((await addMember('keeper', 'keep-1')).status).toBe(201);
      expect((await call('PUT', '/cells/keeper', cellBody('keeper', { displayName: 'K' }))).status).toBe(200);
      expect(await memberNames('keeper')).toEqual(['keep-1']);
      const derived = { mode: 'derived', derivedFrom: { selector: { labels: { nobody: 'x' } } } };
      expect((await call('PUT', '/cells/keeper', cellBody('keeper', { membership: derived }))).status).toBe(200);
      expect(await memberNames('keeper')).toEqual([]);
      expect((await call('PUT', '/cells/keeper', cellBody('keeper'))).status).toBe(200);
      expect(await memberNames('keeper')).toEqual([]);
    });

    it('leaves no explicit member behind when a member add races the turn to derived', async () => {
      const derived = { mode: 'derived', derivedFrom: { selector: { labels: { nobody: 'x' } } } };
      for (let round = 0; round < 10; round++) {
        const cell = unique('turning');
        const vm = await make.entity(unique('turning-vm'), 'vm');
        await createCell(cell);
        const [added, replaced] = await Promise.all([
          addMember(cell, vm.name),
          call('PUT', `/cells/${cell}`, cellBody(cell, { membership: derived })),
        ]);
        expect(replaced.status).toBe(200);
        expect([201, 409]).toContain(added.status);
        const [row] = await api.db.select().from(cells).where(eq(cells.name, cell));
        expect(await api.db.select().from(cellMembers).where(eq(cellMembers.cellId, row!.id))).toEqual([]);
      }
    });

    it('keeps the round-robin counter', async () => {
      await createCell('counted', { placementPolicy: 'round-robin' });
      await api.db.update(cells).set({ placementCounter: 7 }).where(eq(cells.name, 'counted'));
      expect((await call('PUT', '/cells/counted', cellBody('counted', { placementPolicy: 'round-robin' }))).status).toBe(200);
      const [row] = await api.db.select().from(cells).where(eq(cells.name, 'counted'));
      expect(row!.placementCounter).toBe(7);
    });
  });

  describe('delete', () => {
    it('deletes a cell and its memberships: { deleted: true, name }', async () => {
      const vm = await make.entity('del-1', 'vm');
      const cell = await createCell('doomed');
      expect((await addMember('doomed', 'del-1')).status).toBe(201);
      const response = await call('DELETE', '/cells/doomed');
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, name: 'doomed' });
      expectError(await call('GET', '/cells/doomed'), 404, 'not_found');
      expectError(await call('DELETE', '/cells/doomed'), 404, 'not_found');
      expect(await api.db.select().from(cellMembers).where(eq(cellMembers.entityId, vm.id))).toEqual([]);
      expect(cell.name).toBe('doomed');
    });

    it("refuses to delete another cell's parent: 409 still_referenced", async () => {
      await createCell('mother');
      await createCell('child', { parentCells: ['mother'] });
      const response = await call('DELETE', '/cells/mother');
      expectError(response, 409, 'still_referenced');
      expect(response.body.error).toContain('child');
      expect((await call('DELETE', '/cells/child')).status).toBe(200);
      expect((await call('DELETE', '/cells/mother')).status).toBe(200);
    });
  });

  describe('explicit members', () => {
    it('adds (201, no body), lists by name, removes (200, no body)', async () => {
      await make.entity('m-b', 'vm');
      await make.entity('m-a', 'vm');
      await createCell('crew');
      const added = await addMember('crew', 'm-b');
      expect(added.status).toBe(201);
      expect(added.body).toBeUndefined();
      expect((await addMember('crew', 'm-a')).status).toBe(201);

      const listed = await call('GET', '/cells/crew/members');
      expect(listed.status).toBe(200);
      expect(listed.body.map((e: { name: string }) => e.name)).toEqual(['m-a', 'm-b']);
      expect(Object.keys(listed.body[0]).sort()).toEqual(
        ['createdAt', 'entityTypeName', 'envId', 'id', 'labels', 'lastSyncedAt', 'name', 'orgId', 'projectId', 'properties', 'state', 'syncSource', 'updatedAt'],
      );
      expect(listed.body[0]).toMatchObject({ entityTypeName: 'vm', envId: await make.envId(), state: 'active' });

      const removed = await call('DELETE', '/cells/crew/members/m-b');
      expect(removed.status).toBe(200);
      expect(removed.body).toBeUndefined();
      expect(await memberNames('crew')).toEqual(['m-a']);
    });

    it('adding a member twice is idempotent (201, one membership)', async () => {
      await make.entity('twice', 'vm');
      await createCell('dup-crew');
      expect((await addMember('dup-crew', 'twice')).status).toBe(201);
      expect((await addMember('dup-crew', 'twice')).status).toBe(201);
      expect(await memberNames('dup-crew')).toEqual(['twice']);
    });

    it('removing an entity that is not a member is a no-op (200); a missing entity is 404', async () => {
      await make.entity('loner', 'vm');
      expect((await call('DELETE', '/cells/crew/members/loner')).status).toBe(200);
      expectError(await call('DELETE', '/cells/crew/members/ghost'), 404, 'not_found');
    });

    it('404s an unknown cell or entity', async () => {
      expectError(await call('GET', '/cells/ghost/members'), 404, 'not_found');
      expectError(await addMember('ghost', 'm-a'), 404, 'not_found');
      expectError(await call('DELETE', '/cells/ghost/members/m-a'), 404, 'not_found');
      expectError(await addMember('crew', 'ghost'), 404, 'not_found');
    });

    it("refuses an entityTypeName that is not the entity's or the cell's: 400 type_mismatch", async () => {
      await make.entity('h-x', 'host');
      expectError(await addMember('crew', 'm-a', { entityTypeName: 'host' }), 400, 'type_mismatch');
      expectError(await addMember('crew', 'h-x', { entityTypeName: 'vm' }), 400, 'type_mismatch');
      expectError(await addMember('crew', 'h-x', { entityTypeName: 'host' }), 400, 'type_mismatch');
    });

    it('validates the body: 400 validation_failed', async () => {
      expectError(await call('POST', '/cells/crew/members', { entityName: 'm-a' }), 400, 'validation_failed');
      expectError(await addMember('crew', 'm-a', { envId: 'not-a-uuid' }), 400, 'validation_failed');
      expectError(await addMember('crew', 'm-a', { extra: 1 }), 400, 'validation_failed');
    });

    it('refuses member writes on a derived cell: 409 membership_derived', async () => {
      await createCell('golden', { membership: { mode: 'derived', derivedFrom: { selector: { labels: { tier: 'gold' } } } } });
      expectError(await addMember('golden', 'm-a'), 409, 'membership_derived');
      expectError(await call('DELETE', '/cells/golden/members/m-a'), 409, 'membership_derived');
    });
  });

  describe('environments of member calls', () => {
    let stagingId: string;
    beforeAll(async () => {
      stagingId = await make.envId('staging');
      await make.entity('st-1', 'vm', { env: 'staging' });
      await make.entity('df-1', 'vm');
      await createCell('envs');
    });

    it('acts on `default` unless envName or envId says otherwise', async () => {
      expect((await addMember('envs', 'df-1')).status).toBe(201);
      expectError(await addMember('envs', 'st-1'), 404, 'not_found');
      expect((await addMember('envs', 'st-1', { envName: 'staging' })).status).toBe(201);
      expect(await memberNames('envs')).toEqual(['df-1']);
      expect(await memberNames('envs', '?envName=staging')).toEqual(['st-1']);
      expect(await memberNames('envs', `?envId=${stagingId}`)).toEqual(['st-1']);
      expect(await memberNames('envs', `?envId=${stagingId}&envName=staging`)).toEqual(['st-1']);
      expect((await call('DELETE', '/cells/envs/members/st-1?envName=staging')).status).toBe(200);
      expect(await memberNames('envs', '?envName=staging')).toEqual([]);
    });

    it("takes the body's environment over the query's on add", async () => {
      expect((await addMember('envs', 'st-1', { envId: stagingId }, '?envName=nope')).status).toBe(201);
      expect((await addMember('envs', 'df-1', {}, '?envName=staging')).status).toBe(404);
      expect(await memberNames('envs', '?envName=staging')).toEqual(['st-1']);
    });

    it('answers 400 environment_not_found for an unknown environment', async () => {
      const unknownId = crypto.randomUUID();
      expectError(await call('GET', '/cells/envs/members?envName=nope'), 400, 'environment_not_found');
      expectError(await call('GET', `/cells/envs/members?envId=${unknownId}`), 400, 'environment_not_found');
      expectError(await call('GET', `/cells/envs/members?envId=${stagingId}&envName=default`), 400, 'environment_not_found');
      expectError(await addMember('envs', 'df-1', { envName: 'nope' }), 400, 'environment_not_found');
      expectError(await addMember('envs', 'df-1', {}, `?envId=${unknownId}`), 400, 'environment_not_found');
      expectError(await call('DELETE', '/cells/envs/members/df-1?envName=nope'), 400, 'environment_not_found');
    });

    it("holds a pinned token to its environment: 403 forbidden elsewhere", async () => {
      const pinned = await mintToken(api, tenant, { role: 'admin', envName: 'staging', as: owner });
      expectError(await call('GET', '/cells/envs/members', undefined, pinned), 403, 'forbidden');
      expect(await memberNames('envs', '?envName=staging', pinned)).toEqual(['st-1']);
      expectError(await addMember('envs', 'df-1', {}, '', pinned), 403, 'forbidden');
      expectError(await call('DELETE', '/cells/envs/members/df-1', undefined, pinned), 403, 'forbidden');
      expect((await call('DELETE', '/cells/envs/members/st-1?envName=staging', undefined, pinned)).status).toBe(200);
    });

    it('lets a viewer list members but not change them', async () => {
      const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
      expect(await memberNames('envs', '', viewer)).toEqual(['df-1']);
      expectError(await addMember('envs', 'df-1', {}, '', viewer), 403, 'forbidden');
      expectError(await call('DELETE', '/cells/envs/members/df-1', undefined, viewer), 403, 'forbidden');
      expectError(await call('POST', '/cells', cellBody('v'), viewer), 403, 'forbidden');
    });
  });

  describe('derived membership, always current', () => {
    // entity rows are changed directly below: the cells are never touched
    it('by label selector', async () => {
      await make.entity('lb-1', 'vm', { labels: { tier: 'gold', zone: 'a' } });
      await make.entity('lb-2', 'vm', { labels: { tier: 'silver' } });
      await make.entity('lb-h', 'host', { labels: { tier: 'gold' } });
      await make.entity('lb-s', 'vm', { labels: { tier: 'gold' }, env: 'staging' });
      await createCell('gold', { membership: { mode: 'derived', derivedFrom: { selector: { labels: { tier: 'gold' } } } } });
      expect(await memberNames('gold')).toEqual(['lb-1']);
      expect(await memberNames('gold', '?envName=staging')).toEqual(['lb-s']);

      await api.db.update(entities).set({ labels: { tier: 'gold' } }).where(eq(entities.name, 'lb-2'));
      expect(await memberNames('gold')).toEqual(['lb-1', 'lb-2']);
      await api.db.update(entities).set({ labels: { tier: 'silver', zone: 'a' } }).where(eq(entities.name, 'lb-1'));
      expect(await memberNames('gold')).toEqual(['lb-2']);
    });

    it('by states, properties, and all of them together', async () => {
      await make.entity('st-a', 'vm', { state: 'draining', properties: { region: 'eu', size: 4 }, labels: { team: 'x' } });
      await make.entity('st-b', 'vm', { state: 'active', properties: { region: 'us', size: 4 } });
      await make.entity('st-c', 'vm', { state: 'retired', properties: { region: 'eu', size: 8 } });
      await createCell('draining', { membership: { mode: 'derived', derivedFrom: { selector: { states: ['draining', 'retired'] } } } });
      await createCell('eu', { membership: { mode: 'derived', derivedFrom: { selector: { properties: { region: 'eu' } } } } });
      await createCell('eu-draining-x', {
        membership: {
          mode: 'derived',
          derivedFrom: { selector: { states: ['draining'], properties: { region: 'eu' }, labels: { team: 'x' } } },
        },
      });
      expect(await memberNames('draining')).toEqual(expect.arrayContaining(['st-a', 'st-c']));
      expect(await memberNames('draining')).not.toContain('st-b');
      expect(await memberNames('eu')).toEqual(['st-a', 'st-c']);
      expect(await memberNames('eu-draining-x')).toEqual(['st-a']);

      await api.db.update(entities).set({ state: 'draining' }).where(eq(entities.name, 'st-b'));
      await api.db.update(entities).set({ properties: { region: 'eu', size: 4 } }).where(eq(entities.name, 'st-b'));
      expect(await memberNames('draining')).toContain('st-b');
      expect(await memberNames('eu')).toEqual(['st-a', 'st-b', 'st-c']);
      await api.db.update(entities).set({ state: 'active' }).where(eq(entities.name, 'st-a'));
      expect(await memberNames('eu-draining-x')).toEqual([]);
    });

    it('by relationship, outgoing and incoming, per environment', async () => {
      const host = await make.entity('rh-1', 'host');
      const otherHost = await make.entity('rh-2', 'host');
      const vm1 = await make.entity('rv-1', 'vm');
      const vm2 = await make.entity('rv-2', 'vm');
      const vm3 = await make.entity('rv-3', 'vm');
      await createCell('on-rh-1', {
        membership: { mode: 'derived', derivedFrom: { relationship: { type: 'hosts', entity: 'rh-1' } } },
      });
      await createCell('runs-on-rh-1', {
        membership: { mode: 'derived', derivedFrom: { relationship: { type: 'runs-on', entity: 'rh-1', direction: 'incoming' } } },
      });
      expect(await memberNames('on-rh-1')).toEqual([]);

      await make.relate('hosts', host, vm1);
      await make.relate('hosts', host, vm2);
      await make.relate('hosts', otherHost, vm3);
      await make.relate('runs-on', vm3, host);
      await make.relate('runs-on', vm1, otherHost);
      expect(await memberNames('on-rh-1')).toEqual(['rv-1', 'rv-2']);
      expect(await memberNames('runs-on-rh-1')).toEqual(['rv-3']);

      await api.db.delete(relationships).where(eq(relationships.toEntityId, vm2.id));
      expect(await memberNames('on-rh-1')).toEqual(['rv-1']);

      // the same names in staging are other entities: nothing crosses environments
      const stagingHost = await make.entity('rh-1s', 'host', { env: 'staging' });
      const stagingVm = await make.entity('rv-s', 'vm', { env: 'staging' });
      await make.relate('hosts', stagingHost, stagingVm);
      expect(await memberNames('on-rh-1', '?envName=staging')).toEqual([]);
    });
  });

  describe('a cell-scoped token', () => {
    let scoped: string;
    beforeAll(async () => {
      for (const name of ['sc-in', 'sc-out', 'sc-child']) await make.entity(name, 'vm');
      await createCell('scope');
      await createCell('scope-child', { parentCells: ['scope'] });
      await createCell('wide');
      await createCell('elsewhere');
      expect((await addMember('scope', 'sc-in')).status).toBe(201);
      expect((await addMember('scope-child', 'sc-child')).status).toBe(201);
      for (const name of ['sc-in', 'sc-out', 'sc-child']) expect((await addMember('wide', name)).status).toBe(201);
      scoped = await mintToken(api, tenant, { role: 'admin', cellScopes: ['scope'], as: owner });
    });

    it('sees only the members inside its cells and the cells beneath them', async () => {
      expect(await memberNames('wide')).toEqual(['sc-child', 'sc-in', 'sc-out']);
      expect(await memberNames('wide', '', scoped)).toEqual(['sc-child', 'sc-in']);
      expect(await memberNames('scope-child', '', scoped)).toEqual(['sc-child']);
    });

    it('may not add an entity from outside its cells: 403 cell_scope_violation', async () => {
      expectError(await addMember('scope', 'sc-out', {}, '', scoped), 403, 'cell_scope_violation');
      expectError(await addMember('elsewhere', 'sc-out', {}, '', scoped), 403, 'cell_scope_violation');
      expect(await memberNames('scope')).toEqual(['sc-in']);
      expect((await addMember('elsewhere', 'sc-in', {}, '', scoped)).status).toBe(201);
    });

    it('may not remove what it cannot see, nor take an entity out of its cells', async () => {
      expectError(await call('DELETE', '/cells/wide/members/sc-out', undefined, scoped), 403, 'cell_scope_violation');
      expectError(await call('DELETE', '/cells/scope/members/sc-in', undefined, scoped), 403, 'cell_scope_violation');
      expect(await memberNames('scope')).toEqual(['sc-in']);
      // sc-in stays in scope through `scope`, so leaving `elsewhere` is fine
      expect((await call('DELETE', '/cells/elsewhere/members/sc-in', undefined, scoped)).status).toBe(200);
    });
  });

  it('publishes every cell route in the OpenAPI document', async () => {
    const doc = (await api.call('GET', '/openapi.json')).body;
    expect(Object.keys(doc.paths['/{o}/{p}/cells']).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/{o}/{p}/cells/{name}']).sort()).toEqual(['delete', 'get', 'put']);
    expect(Object.keys(doc.paths['/{o}/{p}/cells/{name}/members']).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/{o}/{p}/cells/{name}/members/{entityName}'])).toEqual(['delete']);
    expect(Object.keys(doc.paths['/{o}/{p}/cells/{name}/recommendations'])).toEqual(['get']);
    expect(doc.components.schemas).toHaveProperty('Cell');
    expect(doc.components.schemas).toHaveProperty('CellRequest');
    expect(doc.components.schemas).toHaveProperty('CellRecommendations');
  });
});
