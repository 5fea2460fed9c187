import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cellMembers, cells, entities, entityTypes, environments } from '../../src/db/schema';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';

/**
 * GET ENV/entities against an oracle: every filter, alone and combined, walked
 * page by page through its cursors, must give exactly the matching entities
 * in name order. The environment is large enough (and analyzed) for the
 * planner to read different filters different ways (an ordered index range,
 * a walk of the name order, the labels' GIN index with a sort), and each page
 * shape runs often enough on Postgres for named statements to reach their
 * generic plans (src/modules/entities/list.ts).
 */

const ENTITY_COUNT = 2400;
const NOW = new Date('2026-11-21T10:00:00.000Z');
const DAY = 86_400_000;

type Row = {
  id: string;
  name: string;
  entityTypeName: string;
  state: string;
  labels: Record<string, string>;
  syncSource: string | null;
  updatedAt: Date;
};

/** One filter of the list: its query parameters, and the test the oracle applies. */
type Filter = { query: [string, string][]; matches(row: Row): boolean };

describe('GET ENV/entities filters, page by page', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let envId: string;
  let rows: Row[];
  let members: Set<string>;
  const path = () => `/${tenant.org.slug}/${tenant.project.slug}/envs/default/entities`;

  const derivedSelector = { labels: { tier: 'gold' }, states: ['up', 'down'] };
  const filters: Record<string, Filter> = {
    'entityType=svc': { query: [['entityType', 'svc']], matches: (r) => r.entityTypeName === 'svc' },
    'entityType=job': { query: [['entityType', 'job']], matches: (r) => r.entityTypeName === 'job' },
    'state=up': { query: [['state', 'up']], matches: (r) => r.state === 'up' },
    'state=down': { query: [['state', 'down']], matches: (r) => r.state === 'down' },
    'state=absent': { query: [['state', 'absent']], matches: () => false },
    'label tier:gold': { query: [['label', 'tier:gold']], matches: (r) => r.labels.tier === 'gold' },
    'label team:rare': { query: [['label', 'team:rare']], matches: (r) => r.labels.team === 'rare' },
    'label tier:gold and region:eu': {
      query: [['label', 'tier:gold'], ['label', 'region:eu']],
      matches: (r) => r.labels.tier === 'gold' && r.labels.region === 'eu',
    },
    'label tier:gold and tier:bronze': { query: [['label', 'tier:gold'], ['label', 'tier:bronze']], matches: () => false },
    'cell edge (explicit)': { query: [['cell', 'edge']], matches: (r) => r.entityTypeName === 'svc' && members.has(r.id) },
    'cell gold (derived)': {
      query: [['cell', 'gold']],
      matches: (r) => r.entityTypeName === 'svc' && r.labels.tier === 'gold' && derivedSelector.states.includes(r.state),
    },
    'namePrefix=svc-012': { query: [['namePrefix', 'svc-012']], matches: (r) => r.name.startsWith('svc-012') },
    'namePrefix=job_': { query: [['namePrefix', 'job_']], matches: (r) => r.name.startsWith('job_') },
    'syncSource=terraform': { query: [['syncSource', 'terraform']], matches: (r) => r.syncSource === 'terraform' },
    'syncSource=k8s': { query: [['syncSource', 'k8s']], matches: (r) => r.syncSource === 'k8s' },
    'updatedSince 3 days': {
      query: [['updatedSince', new Date(NOW.getTime() - 3 * DAY).toISOString()]],
      matches: (r) => r.updatedAt.getTime() >= NOW.getTime() - 3 * DAY,
    },
    'updatedSince 50 days': {
      query: [['updatedSince', new Date(NOW.getTime() - 50 * DAY).toISOString()]],
      matches: (r) => r.updatedAt.getTime() >= NOW.getTime() - 50 * DAY,
    },
  };

  const both = (...names: string[]): Filter => ({
    query: names.flatMap((name) => filters[name]!.query),
    matches: (row) => names.every((name) => filters[name]!.matches(row)),
  });

  /** Every page of `filter` at `limit`, following X-Next-Cursor, as the names of each page. */
  async function walk(filter: Filter, limit: number, token = owner): Promise<string[][]> {
    const pages: string[][] = [];
    let cursor: string | null = null;
    do {
      const params = new URLSearchParams([...filter.query, ['limit', String(limit)]]);
      if (cursor) params.set('cursor', cursor);
      const response: ApiResponse<{ name: string }[]> = await api.call('GET', `${path()}?${params}`, { token });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      pages.push(response.body.map((entity) => entity.name));
      cursor = response.headers.get('x-next-cursor');
    } while (cursor);
    return pages;
  }

  /** The filter's matches in name order, cut into pages of `limit` (one empty page when none match). */
  function expectedPages(filter: Filter, limit: number, visible: (row: Row) => boolean = () => true): string[][] {
    const names = rows.filter((row) => visible(row) && filter.matches(row)).map((row) => row.name);
    const pages: string[][] = [];
    for (let i = 0; i < names.length; i += limit) pages.push(names.slice(i, i + limit));
    return pages.length === 0 ? [[]] : pages;
  }

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    [{ id: envId }] = (await api.db
      .select({ id: environments.id })
      .from(environments)
      .where(and(eq(environments.projectId, tenant.project.id), eq(environments.name, 'default')))) as [{ id: string }];
    for (const name of ['svc', 'job']) {
      await api.db.insert(entityTypes).values({
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        name,
        states: ['up', 'down', 'gone'],
        initialState: 'up',
      });
    }
    // Attributes from a hash of n, so no filter follows name order, inserted in hash order, so the heap does not
    // either. `job_` names sort among `job-` and `jobx` ones, and the namePrefix range must not take either.
    await api.db.execute(sql`
      insert into entities (org_id, project_id, env_id, entity_type_name, name, state, labels, sync_source, created_at, updated_at)
      select ${tenant.org.id}, ${tenant.project.id}, ${envId},
        case when h % 10 < 7 then 'svc' else 'job' end,
        case when h % 10 < 7 then 'svc-' else (array['job-', 'job_', 'jobx'])[1 + (h / 10) % 3] end || lpad(n::text, 5, '0'),
        case when (h / 30) % 100 < 75 then 'up' when (h / 30) % 100 < 95 then 'down' else 'gone' end,
        jsonb_build_object('region', case when (h / 3000) % 2 = 0 then 'eu' else 'us' end,
                           'tier', case when (h / 6000) % 4 = 0 then 'gold' else 'bronze' end)
          || case when (h / 24000) % 50 = 0 then '{"team":"rare"}'::jsonb else '{}'::jsonb end,
        case when (h / 1200000) % 10 < 4 then 'terraform' when (h / 1200000) % 10 < 5 then 'k8s' end,
        ${NOW.toISOString()}::timestamptz - interval '100 days',
        ${NOW.toISOString()}::timestamptz - ((h / 12000000) % 100) * interval '1 day' - (h % 86400) * interval '1 second'
      from (select n, ('x' || substr(md5(n::text), 1, 15))::bit(60)::bigint as h from generate_series(1, ${ENTITY_COUNT}) n) s
      order by md5(h::text)`);
    // and a few of another environment, which no list of this one may show
    await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { token: owner, body: { name: 'other' } });
    for (const name of ['svc-01200', 'job-00001', 'zzz']) {
      const response = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs/other/entities`, {
        token: owner,
        body: { kind: 'Entity', entityType: 'svc', name, labels: { tier: 'gold', team: 'rare' }, syncSource: 'k8s' },
      });
      expect(response.status).toBe(201);
    }
    rows = (await api.db
      .select({
        id: entities.id,
        name: entities.name,
        entityTypeName: entities.entityTypeName,
        state: entities.state,
        labels: entities.labels,
        syncSource: entities.syncSource,
        updatedAt: entities.updatedAt,
      })
      .from(entities)
      .where(eq(entities.envId, envId))) as Row[];
    rows.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

    const [edge] = await api.db
      .insert(cells)
      .values([
        { name: 'edge', membershipMode: 'explicit' as const },
        { name: 'gold', membershipMode: 'derived' as const, membershipDerivedFrom: { selector: derivedSelector } },
      ].map((cell) => ({ orgId: tenant.org.id, projectId: tenant.project.id, entityTypeName: 'svc', placementPolicy: 'least-loaded' as const, ...cell })))
      .returning();
    // one in six entities of any type listed in the explicit cell: only its type's count as members
    const listed = rows.filter((_, i) => i % 6 === 0);
    await api.db.insert(cellMembers).values(listed.map((row) => ({ cellId: edge!.id, envId, entityId: row.id })));
    members = new Set(listed.map((row) => row.id));
    await api.db.execute(sql`analyze`);
  });
  afterAll(() => api.close());

  it('has a data set where every filter matches some entities but not all (bar the empty ones)', () => {
    for (const [name, filter] of Object.entries(filters)) {
      const count = rows.filter(filter.matches).length;
      if (['state=absent', 'label tier:gold and tier:bronze'].includes(name)) {
        expect(count, name).toBe(0);
      } else {
        expect(count, name).toBeGreaterThan(5);
        expect(count, name).toBeLessThan(rows.length);
      }
    }
  });

  it('walks the whole environment, unfiltered', async () => {
    expect(await walk({ query: [], matches: () => true }, 1000)).toEqual(expectedPages({ query: [], matches: () => true }, 1000));
    expect((await walk({ query: [], matches: () => true }, 97)).flat()).toEqual(rows.map((row) => row.name));
  });

  it.each(Object.keys(filters))('pages through %s', async (name) => {
    const filter = filters[name]!;
    expect(await walk(filter, 37)).toEqual(expectedPages(filter, 37));
  });

  it('pages through every pair of filters', async () => {
    const kinds = [
      'entityType=svc',
      'state=down',
      'label tier:gold',
      'label team:rare',
      'cell edge (explicit)',
      'cell gold (derived)',
      'namePrefix=svc-012',
      'syncSource=terraform',
      'updatedSince 50 days',
    ];
    for (const [i, first] of kinds.entries()) {
      for (const second of kinds.slice(i + 1)) {
        // one cell per request
        if (first.startsWith('cell') && second.startsWith('cell')) continue;
        const filter = both(first, second);
        expect(await walk(filter, 29), `${first} + ${second}`).toEqual(expectedPages(filter, 29));
      }
    }
  });

  it('pages through combinations of three and more', async () => {
    const combinations = [
      ['entityType=svc', 'state=up', 'syncSource=k8s'],
      ['entityType=job', 'namePrefix=job_', 'label tier:gold'],
      ['state=up', 'label tier:gold and region:eu', 'updatedSince 50 days'],
      ['cell gold (derived)', 'state=down', 'label team:rare'],
      ['cell edge (explicit)', 'syncSource=terraform', 'updatedSince 3 days'],
      ['entityType=svc', 'state=up', 'label tier:gold', 'syncSource=terraform', 'updatedSince 50 days', 'namePrefix=svc-012'],
    ];
    for (const names of combinations) {
      const filter = both(...names);
      expect(await walk(filter, 11), names.join(' + ')).toEqual(expectedPages(filter, 11));
    }
  });

  it('gives the same pages at page sizes 1 and 1000', async () => {
    for (const filter of [filters['label team:rare']!, filters['updatedSince 3 days']!, both('state=down', 'label tier:gold')]) {
      const name = filter.query.join(' ');
      expect((await walk(filter, 1)).flat(), name).toEqual(expectedPages(filter, 1000)[0]);
      expect(await walk(filter, 1000), name).toEqual(expectedPages(filter, 1000));
    }
  });

  it('shows a cell-scoped token only its cells, under every filter', async () => {
    const scoped = await mintToken(api, tenant, { role: 'viewer', cellScopes: ['gold'], as: owner });
    const inGold = filters['cell gold (derived)']!.matches;
    for (const name of ['state=up', 'label team:rare', 'cell edge (explicit)', 'syncSource=k8s', 'updatedSince 50 days']) {
      const filter = filters[name]!;
      expect(await walk(filter, 23, scoped), name).toEqual(expectedPages(filter, 23, inGold));
    }
  });

  it('continues after a cursor whose entity is gone', async () => {
    const filter = filters['label tier:gold']!;
    const params = new URLSearchParams([...filter.query, ['limit', '50']]);
    const first = await api.call('GET', `${path()}?${params}`, { token: owner });
    const last = first.body.at(-1).name as string;
    await api.db.delete(entities).where(and(eq(entities.envId, envId), eq(entities.name, last)));
    // the oracle follows the environment
    rows = rows.filter((row) => row.name !== last);
    params.set('cursor', first.headers.get('x-next-cursor')!);
    const second = await api.call('GET', `${path()}?${params}`, { token: owner });
    const after = rows.filter((row) => row.name > last && filter.matches(row)).map((row) => row.name);
    expect(second.body.map((entity: { name: string }) => entity.name)).toEqual(after.slice(0, 50));
  });
});
