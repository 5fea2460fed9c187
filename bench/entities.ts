/**
 * The entities request path, with the issue's targets:
 *
 * - entity GET vs (raw primary-key select + bare Hono): <= 1.3x
 * - entity create vs (raw insert + bare Hono): <= 1.5x
 * - list, deepest page vs first page at 100,000 entities in one environment: <= 1.2x
 *
 * Each project works in its `default` environment: one for reads, one for
 * writes (so the creates never grow the environments being read), and one
 * holding the 100,000 listed entities.
 */
import { Hono } from 'hono';
import type { PropertyDefinition } from '../src/modules/properties';
import {
  bearer,
  createBenchTenant,
  expectStatus,
  formatRatio,
  formatTarget,
  json,
  measureCases,
  perQueryFloor,
  printHeader,
  printStatements,
  printTable,
  ratio,
  recordStatements,
  replayCase,
  replayWriteCase,
  type BenchContext,
  type BenchProject,
  type Benchmark,
  type Case, bareHonoCase } from './harness';

const ENTITY_TYPE = 'service';
/** Three string properties and no constraints, as the issue's create target states. */
const entityType = {
  kind: 'EntityType',
  name: ENTITY_TYPE,
  states: ['active', 'retired'],
  initialState: 'active',
  properties: [
    { name: 'owner', type: 'string' },
    { name: 'region', type: 'string' },
    { name: 'tier', type: 'string' },
  ] satisfies PropertyDefinition[],
};
const properties = { owner: 'team-payments', region: 'eu-west-1', tier: 'gold' };

const LISTED = 100_000;
const PAGE = 100;
/** The list's largest page (DECISIONS §3), used to walk to the deepest page quickly. */
const WALK = 1000;
/** Zero-padded, so name order (the list's order) is numeric order. */
const listedName = (n: number) => `entity-${String(n).padStart(6, '0')}`;

async function defaultEnvironmentId({ raw }: BenchContext, project: BenchProject): Promise<string> {
  const { rows } = await raw(`select id from environments where project_id = $1 and name = 'default'`, [project.id]);
  const row = rows[0] as { id: string } | undefined;
  if (!row) throw new Error(`project ${project.slug} has no default environment`);
  return row.id;
}

export const entities: Benchmark = {
  name: 'entities',
  async run(context) {
    const { app, database, raw } = context;
    const { org, projects } = await createBenchTenant(context, 'bench', ['reads', 'writes', 'listed']);
    const reads = projects.reads!;
    const writes = projects.writes!;
    const listed = projects.listed!;
    for (const project of [reads, writes, listed]) {
      await expectStatus(
        app.request(`/${org.slug}/${project.slug}/entity-types`, json('POST', entityType, project.token)),
        201,
        'create entity type',
      );
    }
    const entitiesPath = (project: BenchProject) => `/${org.slug}/${project.slug}/envs/default/entities`;
    const [writesEnv, listedEnv] = await Promise.all([writes, listed].map((p) => defaultEnvironmentId(context, p)));

    // the entity every GET reads, created through the API like any other
    const read = (await expectStatus(
      app.request(entitiesPath(reads), json('POST', { kind: 'Entity', entityType: ENTITY_TYPE, name: 'checkout', properties }, reads.token)),
      201,
      'create read entity',
    )) as { id: string; name: string };
    // one create in `writes` before anything is measured: a server that has created an entity of a type
    // before creates the next ones in one statement (src/modules/entities/fast-paths.ts), and so does this
    // process from here on, the probe included
    await expectStatus(
      app.request(entitiesPath(writes), json('POST', { kind: 'Entity', entityType: ENTITY_TYPE, name: 'first', properties }, writes.token)),
      201,
      'create first entity',
    );
    const readAuth = bearer(reads.token);
    const listAuth = bearer(listed.token);

    // 100,000 entities in one statement; the API would take minutes, and the list reads rows, not how they got there
    const seedStart = performance.now();
    await raw(
      `insert into entities (org_id, project_id, env_id, entity_type_name, name, state)
       select $1, $2, $3, $4, 'entity-' || lpad(n::text, 6, '0'), 'active' from generate_series(1, ${LISTED}) as n`,
      [org.id, listed.id, listedEnv, ENTITY_TYPE],
    );
    // fresh statistics, as autovacuum would give a server some time after such a load (PGlite has none)
    await raw('analyze entities', []);
    const seedMs = performance.now() - seedStart;

    // The deepest page is requested with the cursor the second-to-last page
    // announced. The cursor is opaque, so it is found by walking the list once,
    // untimed: in pages of WALK up to the last WALK rows, then in pages of PAGE
    // (a keyset cursor marks a row, whatever the page size that reached it).
    const walkStart = performance.now();
    let deepestCursor: string | null = null;
    let walked = 0;
    let requests = 0;
    for (let cursor: string | null = null; ; ) {
      const limit = walked < LISTED - WALK ? WALK : PAGE;
      const res = await app.request(`${entitiesPath(listed)}?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, listAuth);
      const body = (await expectStatus(res, 200, 'walk list')) as { name: string }[];
      requests++;
      walked += body.length;
      if (body.at(-1)?.name !== listedName(walked)) throw new Error(`walking the list: expected ${listedName(walked)} to end a page, got ${body.at(-1)?.name}`);
      const next = res.headers.get('x-next-cursor');
      if (!next) break;
      deepestCursor = next;
      cursor = next;
    }
    if (walked !== LISTED || !deepestCursor) throw new Error(`walked ${walked} entities, expected ${LISTED}`);
    const walkMs = performance.now() - walkStart;
    const firstPageUrl = `${entitiesPath(listed)}?limit=${PAGE}`;
    const deepestPageUrl = `${entitiesPath(listed)}?limit=${PAGE}&cursor=${encodeURIComponent(deepestCursor)}`;
    for (const [url, first, last] of [
      [firstPageUrl, listedName(1), listedName(PAGE)],
      [deepestPageUrl, listedName(LISTED - PAGE + 1), listedName(LISTED)],
    ] as const) {
      const page = (await expectStatus(app.request(url, listAuth), 200, 'check page')) as { name: string }[];
      if (page.length !== PAGE || page[0]?.name !== first || page.at(-1)?.name !== last) {
        throw new Error(`${url}: expected ${first}..${last}, got ${page.length} rows, ${page[0]?.name}..${page.at(-1)?.name}`);
      }
    }

    const baselines: Case[] = [
      bareHonoCase(context),
      {
        name: 'raw-select-pk',
        queries: 1,
        call: async () => {
          await raw('select * from entities where id = $1', [read.id]);
        },
      },
      {
        name: 'raw-insert',
        queries: 1,
        call: async (i) => {
          await raw(
            `insert into entities (org_id, project_id, env_id, entity_type_name, name, state, properties)
             values ($1, $2, $3, $4, $5, $6, $7) returning *`,
            [org.id, writes.id, writesEnv, ENTITY_TYPE, `raw-${i}`, 'active', JSON.stringify(properties)],
          );
        },
      },
      {
        name: 'raw-list-first',
        queries: 1,
        call: async () => {
          await raw('select * from entities where env_id = $1 order by name limit 101', [listedEnv]);
        },
      },
    ];
    // the cheapest route that makes one round trip: bare Hono around the raw baseline query, no auth, no ORM
    const floorApp = new Hono();
    floorApp.get('/pk', async (c) => c.json((await raw('select * from entities where id = $1', [read.id])).rows[0] as object));
    floorApp.post('/insert', async (c) => {
      const body = (await c.req.json()) as { name: string };
      const { rows } = await raw(
        `insert into entities (org_id, project_id, env_id, entity_type_name, name, state, properties)
         values ($1, $2, $3, $4, $5, $6, $7) returning *`,
        [org.id, writes.id, writesEnv, ENTITY_TYPE, body.name, 'active', JSON.stringify(properties)],
      );
      return c.json(rows[0] as object, 201);
    });
    const floors: Case[] = [
      {
        name: 'hono-raw-select-pk',
        queries: 1,
        call: async () => {
          await expectStatus(floorApp.request('/pk'), 200, 'hono-raw-select-pk');
        },
      },
      {
        name: 'hono-raw-insert',
        queries: 1,
        call: async (i) => {
          await expectStatus(floorApp.request('/insert', json('POST', { name: `floor-${i}`, properties })), 201, 'hono-raw-insert');
        },
      },
    ];

    const routes: Case[] = [
      {
        name: 'GET entity',
        call: async () => {
          await expectStatus(app.request(`${entitiesPath(reads)}/${read.name}`, readAuth), 200, 'GET entity');
        },
      },
      {
        name: 'POST entity',
        call: async (i) => {
          const name = i < 0 ? `api-probe${i === -1 ? '' : `${i}`}` : `api-${i}`;
          await expectStatus(
            app.request(entitiesPath(writes), json('POST', { kind: 'Entity', entityType: ENTITY_TYPE, name, properties }, writes.token)),
            201,
            'POST entity',
          );
        },
      },
      {
        name: 'GET list first page',
        call: async () => {
          await expectStatus(app.request(firstPageUrl, listAuth), 200, 'GET list first page');
        },
      },
      {
        name: 'GET list deepest page',
        call: async () => {
          await expectStatus(app.request(deepestPageUrl, listAuth), 200, 'GET list deepest page');
        },
      },
    ];

    // each read's own statements, replayed raw: what its SQL costs, apart from the app around it
    const replays: Case[] = [];
    // (the deepest page is not replayed: its SQL differs from the first page's by one keyset condition,
    // and the target line already compares the two; a third list case would cost ~10 s on PGlite)
    for (const name of ['GET entity', 'GET list first page']) {
      const route = routes.find((c) => c.name === name)!;
      const recorded = await recordStatements(database, () => route.call(-1));
      replays.push(replayCase(context, `replay ${name}`, recorded));
      // the list's first statement: the token, looked up together with the tenancy it addresses
      // (the entity GET sends it folded into its one statement)
      if (name === 'GET list first page') {
        const lookup = recorded.find((statement) => statement.text.includes('from "service_tokens"'));
        if (!lookup) throw new Error('GET list first page: no token lookup among its statements');
        replays.push(replayCase(context, 'replay token lookup', [lookup]));
      }
    }

    // the create, when it is one statement: replayed raw with a new name each call (in its column and its change row)
    const post = routes.find((c) => c.name === 'POST entity')!;
    const created = await recordStatements(database, () => post.call(-2));
    if (created.length === 1) {
      const probeName = 'api-probe-2';
      replays.push(
        replayWriteCase(context, 'replay POST entity', created[0]!, (params, i) =>
          params.map((param) => (typeof param === 'string' && param.includes(probeName) ? param.split(probeName).join(`replay-${i}`) : param)),
        ),
      );
    }

    const results = await measureCases(context, [...baselines, ...floors, ...routes, ...replays]);
    const entityRows = (await raw('select count(*)::int as n from entities', [])).rows[0] as { n: number };

    printHeader('Cellplane request-path benchmark: entities', context, [
      `listed:     ${LISTED} entities in one environment (seeded in ${(seedMs / 1000).toFixed(1)} s), pages of ${PAGE}; the deepest page is page ${LISTED / PAGE}, its cursor found by walking the list once (${requests} requests, ${(walkMs / 1000).toFixed(1)} s, untimed)`,
      `table:      ${entityRows.n} entities in all at the end of the run`,
    ]);
    printTable(results);

    const get = ratio(results, 'GET entity', ['raw-select-pk', 'bare-hono']);
    const create = ratio(results, 'POST entity', ['raw-insert', 'bare-hono']);
    const depth = ratio(results, 'GET list deepest page', ['GET list first page']);
    console.log('\nRatios (route / baselines of this run):');
    console.log(`  entity GET    vs (raw-select-pk + bare-hono): ${formatRatio(get)}; ${formatTarget(get, 1.3)}`);
    console.log(`  entity create vs (raw-insert + bare-hono):    ${formatRatio(create)}; ${formatTarget(create, 1.5)}`);
    console.log(`  list deepest page vs first page:              ${formatRatio(depth)}; ${formatTarget(depth, 1.2)}`);
    console.log(`  list first page vs raw-list-first:            ${formatRatio(ratio(results, 'GET list first page', ['raw-list-first']))} (informational)`);

    const statements = (name: string) => `${results.get(name)!.statements.length} statement(s)`;
    console.log('\nWhere the time goes (informational):');
    console.log('  the app around its SQL: route vs (its own statements replayed raw + bare-hono)');
    for (const name of ['GET entity', 'GET list first page']) {
      console.log(`    ${name.padEnd(22)} ${statements(name)}: ${formatRatio(ratio(results, name, [`replay ${name}`, 'bare-hono']))}`);
    }
    console.log('  its SQL against the baseline query');
    console.log(`    replay GET entity vs raw-select-pk:       ${formatRatio(ratio(results, 'replay GET entity', ['raw-select-pk']))}`);
    console.log(`    replay token lookup vs raw-select-pk:     ${formatRatio(ratio(results, 'replay token lookup', ['raw-select-pk']))}`);
    console.log(`    replay first page vs raw-list-first:      ${formatRatio(ratio(results, 'replay GET list first page', ['raw-list-first']))}`);
    if (results.has('replay POST entity')) {
      console.log(`    replay POST entity vs raw-insert:         ${formatRatio(ratio(results, 'replay POST entity', ['raw-insert']))}`);
      console.log(`    POST entity vs (replay POST entity + bare-hono): ${formatRatio(ratio(results, 'POST entity', ['replay POST entity', 'bare-hono']))}`);
    }
    // a write cannot be replayed: its floor is a raw round trip per statement, the insert at raw-insert
    console.log(
      `  POST entity, ${statements('POST entity')} (BEGIN and COMMIT included) vs bare-hono + a raw-select-pk per statement, one raw-insert: ${formatRatio(ratio(results, 'POST entity', perQueryFloor(results, 'POST entity', 'raw-select-pk', 'raw-insert')))}`,
    );
    console.log('  one round trip inside a route, on this machine: bare Hono around the raw query, against the two apart');
    console.log(`    hono-raw-select-pk vs (raw-select-pk + bare-hono): ${formatRatio(ratio(results, 'hono-raw-select-pk', ['raw-select-pk', 'bare-hono']))}`);
    console.log(`    hono-raw-insert    vs (raw-insert + bare-hono):    ${formatRatio(ratio(results, 'hono-raw-insert', ['raw-insert', 'bare-hono']))}`);
    console.log('  the app against that floor');
    console.log(`    GET entity  vs hono-raw-select-pk: ${formatRatio(ratio(results, 'GET entity', ['hono-raw-select-pk']))}`);
    console.log(`    POST entity vs hono-raw-insert:    ${formatRatio(ratio(results, 'POST entity', ['hono-raw-insert']))}`);

    printStatements(results);
  },
};
