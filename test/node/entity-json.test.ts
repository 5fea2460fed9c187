import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entities } from '../../src/db/schema';
import { toEntity } from '../../src/modules/entities/service';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';

/**
 * The entity GET answers the Entity as Postgres writes it (entityJson,
 * src/modules/entities/driver-rows.ts), where every other answer is an
 * object through JSON.stringify: toEntity's, or entityOf's on a list page.
 * These tests store values chosen to break a JSON writer (quotes,
 * backslashes, control characters, line separators, astral characters,
 * integer-like keys, numbers JavaScript writes differently from Postgres,
 * nulls and sub-millisecond times) straight into an entity's row, and hold
 * every read to the same JSON value as toEntity makes of that row: the GET,
 * a cell-scoped token's GET (the usual way), and each kind of list page.
 */
describe('the Entity of a GET, as Postgres writes it, and of every other read', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let scoped: string;

  const envPath = () => `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;
  const get = (name: string, token: string) => api.call('GET', `${envPath()}/entities/${encodeURIComponent(name)}`, { token });
  const list = (query: string) => api.call('GET', `${envPath()}/entities?${query}`, { token: owner });

  /** toEntity of the entity's row as drizzle reads it: what every other answer is made from. */
  async function expected(name: string) {
    const [row] = await api.db.select().from(entities).where(eq(entities.name, name));
    return JSON.parse(JSON.stringify(toEntity(row!)));
  }

  /** Stores `values` into the entity's row as they are, past the API's validation. */
  async function store(name: string, values: Record<string, unknown>) {
    await api.db.update(entities).set(values).where(eq(entities.name, name));
  }

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    const projectPath = `/${tenant.org.slug}/${tenant.project.slug}`;
    const type = await api.call('POST', `${projectPath}/entity-types`, {
      body: { kind: 'EntityType', name: 'box', states: ['on', 'off'], initialState: 'on' },
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    const cell = await api.call('POST', `${projectPath}/cells`, {
      body: { kind: 'Cell', name: 'all', entityType: 'box', membership: { mode: 'derived', derivedFrom: { selector: { labels: { in: 'yes' } } } } },
    });
    expect(cell.status, JSON.stringify(cell.body)).toBe(201);
    for (const name of ['quotes', 'numbers', 'times', 'nulls', 'plain']) {
      const created = await api.call('POST', `${envPath()}/entities`, {
        body: { kind: 'Entity', entityType: 'box', name, labels: { in: 'yes' }, syncSource: 'cmdb', lastSyncedAt: '2026-11-20T10:00:00.123Z' },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
    }
    owner = await mintToken(api, tenant, { role: 'owner' });
    scoped = await mintToken(api, tenant, { role: 'viewer', cellScopes: ['all'], as: owner });
    await store('quotes', {
      state: 'o"n\\',
      syncSource: 'src\n"\\\u0001\u001f\u007fü\u2028\u2029😀',
      properties: {
        q: 'a"b\\c/d',
        ctl: '\u0001\u0008\u0009\u000a\u000c\u000d\u001f',
        wide: 'ü€😀\u2028\u2029',
        nested: { list: ['x', { y: '"' }], empty: {}, none: [] },
      },
      labels: { in: 'yes', '10': 'integer-like key', b: 'q"uote', '2': 'two' },
    });
    await store('numbers', {
      properties: { big: 1e21, small: 1e-7, third: 1 / 3, negZero: -0, max: Number.MAX_SAFE_INTEGER + 2, min: -1.7976931348623157e308, int: 42, t: true, f: false, n: null },
    });
    await store('times', {
      createdAt: sql`'2026-01-02 03:04:05.999999+00'::timestamptz`,
      updatedAt: sql`'2026-01-02 03:04:05.000999+00'::timestamptz`,
      lastSyncedAt: sql`'1970-01-01 00:00:00+00'::timestamptz`,
    });
    await store('nulls', { lastSyncedAt: null, syncSource: null, properties: {}, labels: { in: 'yes' } });
  });
  afterAll(() => api?.close());

  it('answers the GET with the JSON value toEntity makes of the row, as application/json', async () => {
    for (const name of ['quotes', 'numbers', 'times', 'nulls', 'plain']) {
      const response = await get(name, owner);
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      expect(response.body, name).toEqual(await expected(name));
    }
  });

  it('writes what toEntity writes where it can: times truncated to milliseconds, nulls, unicode unchanged', async () => {
    expect((await get('times', owner)).body).toMatchObject({
      createdAt: '2026-01-02T03:04:05.999Z',
      updatedAt: '2026-01-02T03:04:05.000Z',
      lastSyncedAt: '1970-01-01T00:00:00.000Z',
    });
    expect((await get('nulls', owner)).body).toMatchObject({ lastSyncedAt: null, syncSource: null, properties: {} });
    const quotes = (await get('quotes', owner)).body;
    expect(quotes.state).toBe('o"n\\');
    expect(quotes.syncSource).toBe('src\n"\\\u0001\u001f\u007fü\u2028\u2029😀');
    expect(quotes.labels).toEqual({ in: 'yes', '10': 'integer-like key', b: 'q"uote', '2': 'two' });
    expect((await get('numbers', owner)).body.properties).toEqual({
      big: 1e21, small: 1e-7, third: 1 / 3, negZero: 0, max: Number.MAX_SAFE_INTEGER + 2, min: -1.7976931348623157e308, int: 42, t: true, f: false, n: null,
    });
  });

  it('answers the usual way (a cell-scoped token) with the same JSON value', async () => {
    for (const name of ['quotes', 'numbers', 'times', 'nulls']) {
      const response = await get(name, scoped);
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body, name).toEqual((await get(name, owner)).body);
    }
  });

  it('answers each kind of page with the same Entities, in name order', async () => {
    const all = await Promise.all(['nulls', 'numbers', 'plain', 'quotes', 'times'].map(expected));
    // an index range in one statement, a label filter in two, and a page split by its cursor
    for (const query of ['limit=10', 'entityType=box', 'label=in:yes', 'updatedSince=2026-06-01T00:00:00.000Z&label=in:yes']) {
      const page = await list(query);
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/^application\/json/);
      expect(page.body, query).toEqual(query.startsWith('updatedSince') ? all.filter((e) => e.name !== 'times') : all);
    }
    const first = await list('limit=2&label=in:yes');
    expect(first.body).toEqual(all.slice(0, 2));
    const rest = await list(`limit=10&label=in:yes&cursor=${first.headers.get('x-next-cursor')}`);
    expect(rest.body).toEqual(all.slice(2));
    expect((await list('namePrefix=nobody')).body).toEqual([]);
  });

  it("answers the usual way's pages (a cell filter, a cell-scoped token) with the same Entities", async () => {
    const all = await Promise.all(['nulls', 'numbers', 'plain', 'quotes', 'times'].map(expected));
    const byCell = await list('cell=all');
    expect(byCell.status, JSON.stringify(byCell.body)).toBe(200);
    expect(byCell.body).toEqual(all);
    for (const query of ['limit=10', 'label=in:yes']) {
      const scopedPage = await api.call('GET', `${envPath()}/entities?${query}`, { token: scoped });
      expect(scopedPage.status, JSON.stringify(scopedPage.body)).toBe(200);
      expect(scopedPage.body, query).toEqual(all);
    }
  });
});
