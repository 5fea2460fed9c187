import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cells, entities } from '../../src/db/schema';
import { cellFactories } from '../support/cell-fixtures';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { usingPostgres } from '../support/node-database';

interface Recommendation {
  rank: number;
  entityName: string;
  entityId: string;
  score: number;
  eligible: boolean;
  reasons: string[];
}

describe(`cell recommendations (${usingPostgres() ? 'Postgres' : 'PGlite'})`, () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let proj: string;
  let make: ReturnType<typeof cellFactories>;

  const call = (method: string, path: string, body?: unknown, token: string = owner) =>
    api.call(method, `${proj}${path}`, { token, body });
  const createCell = async (name: string, fields: Record<string, unknown> = {}) => {
    const response = await call('POST', '/cells', { kind: 'Cell', name, entityType: 'node', ...fields });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
  };
  const addMembers = async (cell: string, names: string[], envName = 'default') => {
    for (const entityName of names) {
      const response = await call('POST', `/cells/${cell}/members`, { entityName, entityTypeName: 'node', envName });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
    }
  };
  const recommend = async (cell: string, query = '', token = owner) => {
    const response = await call('GET', `/cells/${cell}/recommendations${query}`, undefined, token);
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body as { cell: string; placementPolicy: string; envName: string; recommendations: Recommendation[] };
  };
  const order = (body: { recommendations: Recommendation[] }) => body.recommendations.map((r) => r.entityName);
  const counter = async (cell: string) =>
    (await api.db.select({ c: cells.placementCounter }).from(cells).where(eq(cells.name, cell)))[0]!.c;

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    await api.call('POST', `${proj}/envs`, { body: { name: 'staging' } });
    owner = await mintToken(api, tenant, { role: 'owner' });
    make = cellFactories(api, tenant);
    await make.entityType('node', {
      metrics: [
        { name: 'cpu', unit: '%', capacity: 100 },
        { name: 'mem', unit: 'GiB', capacity: 64 },
        { name: 'disk', unit: 'GiB' }, // no capacity: never counts toward the load
      ],
    });
  });
  afterAll(() => api.close());

  describe('least-loaded', () => {
    beforeAll(async () => {
      const a = await make.entity('ll-a', 'node');
      const b = await make.entity('ll-b', 'node');
      const c = await make.entity('ll-c', 'node', { state: 'draining' });
      const d = await make.entity('ll-d', 'node', { labels: { zone: 'z1' } });
      await make.entity('ll-e', 'node'); // no metrics: load 0
      const f = await make.entity('ll-f', 'node');
      await make.metric(a, 'cpu', 50);
      await make.metric(a, 'mem', 32); // 0.5 + 0.5
      await make.metric(b, 'cpu', 10); // 0.1, mem missing counts 0
      await make.metric(b, 'disk', 900);
      await make.metric(c, 'cpu', 5); // 0.05, but draining
      await make.metric(d, 'cpu', 90); // 0.9, over the cpu constraint
      await make.metric(d, 'mem', 16); // + 0.25
      await make.metric(f, 'mem', 6.4); // 0.1, ties with ll-b
      // ll-e: no metrics at all, load 0
      await createCell('ll');
      await addMembers('ll', ['ll-a', 'll-b', 'll-c', 'll-d', 'll-e', 'll-f']);
      await createCell('ll-strict', {
        constraints: [
          { key: 'state', operator: 'eq', value: 'active' },
          { key: 'metrics.cpu', operator: 'lt', value: 80 },
        ],
      });
      await addMembers('ll-strict', ['ll-a', 'll-b', 'll-c', 'll-d', 'll-e', 'll-f']);
    });

    it('ranks by Σ metric/capacity, lowest first, ties by name', async () => {
      const body = await recommend('ll');
      expect(body).toMatchObject({ cell: 'll', placementPolicy: 'least-loaded', envName: 'default' });
      expect(order(body)).toEqual(['ll-e', 'll-c', 'll-b', 'll-f', 'll-a', 'll-d']);
      const scores = Object.fromEntries(body.recommendations.map((r) => [r.entityName, r.score]));
      expect(scores['ll-e']).toBe(0);
      expect(scores['ll-c']).toBeCloseTo(0.05, 12);
      expect(scores['ll-b']).toBeCloseTo(0.1, 12);
      expect(scores['ll-f']).toBeCloseTo(0.1, 12);
      expect(scores['ll-a']).toBeCloseTo(1, 12);
      expect(scores['ll-d']).toBeCloseTo(1.15, 12);
      expect(body.recommendations.map((r) => r.rank)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(body.recommendations.every((r) => r.eligible && r.reasons.length === 0)).toBe(true);
      const [first] = body.recommendations;
      expect(Object.keys(first!).sort()).toEqual(['eligible', 'entityId', 'entityName', 'rank', 'reasons', 'score']);
      const [row] = await api.db.select().from(entities).where(eq(entities.name, 'll-e'));
      expect(first!.entityId).toBe(row!.id);
    });

    it('ranks ineligible members last (by load), with every constraint they fail', async () => {
      const body = await recommend('ll-strict');
      expect(order(body)).toEqual(['ll-b', 'll-a', 'll-e', 'll-c', 'll-f', 'll-d']);
      expect(body.recommendations.map((r) => r.eligible)).toEqual([true, true, false, false, false, false]);
      expect(body.recommendations.map((r) => r.rank)).toEqual([1, 2, 3, 4, 5, 6]);
      // a metric never reported satisfies no bound: its load counts 0, but `lt 80` cannot be shown to hold
      expect(body.recommendations[2]).toMatchObject({ entityName: 'll-e', score: 0, reasons: ['metrics.cpu lt 80 (is absent)'] });
      expect(body.recommendations[3]).toMatchObject({ entityName: 'll-c', reasons: ['state eq "active" (is "draining")'] });
      expect(body.recommendations[5]).toMatchObject({ entityName: 'll-d', reasons: ['metrics.cpu lt 80 (is 90)'] });
      expect(body.recommendations[5]!.score).toBeCloseTo(1.15, 12);
    });

    it('follows the current data: a state changed elsewhere changes the ranking', async () => {
      await api.db.update(entities).set({ state: 'active' }).where(eq(entities.name, 'll-c'));
      await api.db.update(entities).set({ state: 'draining' }).where(eq(entities.name, 'll-d'));
      const body = await recommend('ll-strict');
      expect(order(body).slice(0, 3)).toEqual(['ll-c', 'll-b', 'll-a']);
      expect(body.recommendations.at(-1)).toMatchObject({
        entityName: 'll-d',
        eligible: false,
        reasons: ['state eq "active" (is "draining")', 'metrics.cpu lt 80 (is 90)'],
      });
      await api.db.update(entities).set({ state: 'draining' }).where(eq(entities.name, 'll-c'));
      await api.db.update(entities).set({ state: 'active' }).where(eq(entities.name, 'll-d'));
    });

    it('evaluates label and property constraints too', async () => {
      await createCell('ll-zoned', {
        constraints: [
          { key: 'labels.zone', operator: 'exists' },
          { key: 'properties.size', operator: 'notExists' },
        ],
      });
      await addMembers('ll-zoned', ['ll-a', 'll-d']);
      const body = await recommend('ll-zoned');
      expect(order(body)).toEqual(['ll-d', 'll-a']);
      expect(body.recommendations[1]).toMatchObject({ eligible: false, reasons: ['labels.zone exists (is absent)'] });
    });

    it('does not touch the placement counter', async () => {
      await recommend('ll');
      expect(await counter('ll')).toBe(0);
    });
  });

  describe('round-robin', () => {
    beforeAll(async () => {
      for (const name of ['rr-c', 'rr-a', 'rr-b', 'rr-x']) await make.entity(name, 'node');
      await api.db.update(entities).set({ labels: { broken: 'yes' } }).where(eq(entities.name, 'rr-x'));
      await createCell('rr', {
        placementPolicy: 'round-robin',
        constraints: [{ key: 'labels.broken', operator: 'notExists' }],
      });
      await addMembers('rr', ['rr-c', 'rr-a', 'rr-b', 'rr-x']);
    });

    it('rotates the eligible members (by name) one step per call; ineligible ones stay last', async () => {
      const seen: string[][] = [];
      for (let i = 0; i < 4; i++) seen.push(order(await recommend('rr')));
      expect(seen).toEqual([
        ['rr-a', 'rr-b', 'rr-c', 'rr-x'],
        ['rr-b', 'rr-c', 'rr-a', 'rr-x'],
        ['rr-c', 'rr-a', 'rr-b', 'rr-x'],
        ['rr-a', 'rr-b', 'rr-c', 'rr-x'],
      ]);
      expect(await counter('rr')).toBe(4);
      const body = await recommend('rr');
      expect(body.placementPolicy).toBe('round-robin');
      expect(body.recommendations.map((r) => [r.rank, r.score, r.eligible])).toEqual([
        [1, 0, true],
        [2, 1, true],
        [3, 2, true],
        [4, 3, false],
      ]);
      expect(body.recommendations[3]!.reasons).toEqual(['labels.broken notExists (is "yes")']);
    });

    it('advances the counter on every call, members or not', async () => {
      await createCell('rr-empty', { placementPolicy: 'round-robin' });
      expect((await recommend('rr-empty')).recommendations).toEqual([]);
      expect((await recommend('rr-empty')).recommendations).toEqual([]);
      expect(await counter('rr-empty')).toBe(2);
    });

    it('gives 20 concurrent calls 20 distinct counter values: each of 4 members is first exactly 5 times', async () => {
      const names = ['cc-1', 'cc-2', 'cc-3', 'cc-4'];
      for (const name of names) await make.entity(name, 'node');
      await createCell('rr-busy', { placementPolicy: 'round-robin' });
      await addMembers('rr-busy', names);
      const bodies = await Promise.all(Array.from({ length: 20 }, () => recommend('rr-busy')));
      const firsts = new Map<string, number>();
      for (const body of bodies) {
        const first = body.recommendations[0]!.entityName;
        firsts.set(first, (firsts.get(first) ?? 0) + 1);
      }
      expect(Object.fromEntries(firsts)).toEqual({ 'cc-1': 5, 'cc-2': 5, 'cc-3': 5, 'cc-4': 5 });
      // and each call's rotation is whole: a call never mixes two counter values
      const rotations = new Set(bodies.map((body) => order(body).join(',')));
      expect(rotations).toEqual(new Set(['cc-1,cc-2,cc-3,cc-4', 'cc-2,cc-3,cc-4,cc-1', 'cc-3,cc-4,cc-1,cc-2', 'cc-4,cc-1,cc-2,cc-3']));
      expect(await counter('rr-busy')).toBe(20);
    });
  });

  describe('random', () => {
    beforeAll(async () => {
      for (const name of ['rn-a', 'rn-b', 'rn-c', 'rn-off']) await make.entity(name, 'node');
      await api.db.update(entities).set({ state: 'retired' }).where(eq(entities.name, 'rn-off'));
      await createCell('rn', {
        placementPolicy: 'random',
        constraints: [{ key: 'state', operator: 'ne', value: 'retired' }],
      });
      await addMembers('rn', ['rn-a', 'rn-b', 'rn-c', 'rn-off']);
    });

    it('shuffles the eligible members; every one comes first sometimes; ineligible ones stay last', async () => {
      const firsts = new Set<string>();
      const orders = new Set<string>();
      for (let i = 0; i < 120; i++) {
        const body = await recommend('rn');
        const names = order(body);
        expect([...names.slice(0, 3)].sort()).toEqual(['rn-a', 'rn-b', 'rn-c']);
        expect(body.recommendations.map((r) => [r.rank, r.score])).toEqual([
          [1, 0],
          [2, 1],
          [3, 2],
          [4, 3],
        ]);
        expect(body.recommendations[3]).toMatchObject({ entityName: 'rn-off', eligible: false, reasons: ['state ne "retired" (is "retired")'] });
        firsts.add(names[0]!);
        orders.add(names.join(','));
      }
      // 120 uniform draws of 6 orders: missing one has probability ≈ 6·(5/6)^120 < 1e-8
      expect(firsts).toEqual(new Set(['rn-a', 'rn-b', 'rn-c']));
      expect(orders.size).toBe(6);
      expect(await counter('rn')).toBe(0);
    });
  });

  describe('environments, scopes and errors', () => {
    beforeAll(async () => {
      await make.entity('ev-d', 'node');
      await make.entity('ev-s', 'node', { env: 'staging' });
      await createCell('ev');
      await addMembers('ev', ['ev-d']);
      await addMembers('ev', ['ev-s'], 'staging');
    });

    it('ranks the members of the chosen environment (default, envName or envId)', async () => {
      expect(order(await recommend('ev'))).toEqual(['ev-d']);
      const staging = await recommend('ev', '?envName=staging');
      expect(staging.envName).toBe('staging');
      expect(order(staging)).toEqual(['ev-s']);
      expect(order(await recommend('ev', `?envId=${await make.envId('staging')}`))).toEqual(['ev-s']);
    });

    it('answers 404 for an unknown cell and 400 environment_not_found for an unknown environment', async () => {
      expectError(await call('GET', '/cells/ghost/recommendations'), 404, 'not_found');
      expectError(await call('GET', '/cells/ev/recommendations?envName=nope'), 400, 'environment_not_found');
      expectError(await call('GET', `/cells/ev/recommendations?envId=${crypto.randomUUID()}`), 400, 'environment_not_found');
    });

    it('holds a pinned token to its environment and lets a viewer read', async () => {
      const pinned = await mintToken(api, tenant, { role: 'viewer', envName: 'staging', as: owner });
      expectError(await call('GET', '/cells/ev/recommendations', undefined, pinned), 403, 'forbidden');
      expect(order(await recommend('ev', '?envName=staging', pinned))).toEqual(['ev-s']);
    });

    it('ranks for a cell-scoped token only the members inside its cells', async () => {
      await make.entity('ev-2', 'node');
      await addMembers('ev', ['ev-2']);
      await createCell('ev-scope');
      await addMembers('ev-scope', ['ev-2']);
      const scoped = await mintToken(api, tenant, { role: 'viewer', cellScopes: ['ev-scope'], as: owner });
      expect(order(await recommend('ev'))).toEqual(['ev-2', 'ev-d']);
      expect(order(await recommend('ev', '', scoped))).toEqual(['ev-2']);
    });
  });
});
