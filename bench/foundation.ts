/**
 * The foundation's request path: org read, environment list and environment
 * create, against a bare Hono hello and the raw driver round trip measured in
 * the same run.
 */
import { eq } from 'drizzle-orm';
import { orgs } from '../src/db/schema';
import {
  bearer,
  createBenchTenant,
  expectStatus,
  formatRatio,
  json,
  measureCases,
  perQueryFloor,
  printHeader,
  printStatements,
  printTable,
  ratio,
  type Benchmark,
  type Case, bareHonoCase } from './harness';

export const foundation: Benchmark = {
  name: 'foundation',
  async run(context) {
    const { app, database, raw } = context;
    // Reads and writes use separate projects, so the listed project keeps its
    // five environments while the write cases insert thousands elsewhere.
    const { org, projects } = await createBenchTenant(context, 'bench', ['reads', 'writes']);
    const reads = projects.reads!;
    const writes = projects.writes!;
    for (const name of ['dev', 'staging', 'qa', 'prod']) {
      await expectStatus(app.request(`/${org.slug}/${reads.slug}/envs`, json('POST', { name }, reads.token)), 201, 'seed env');
    }
    const listedEnvironments = 5;
    const readAuth = bearer(reads.token);

    const baselines: Case[] = [
      bareHonoCase(context),
      {
        name: 'raw-select',
        queries: 1,
        call: async () => {
          await raw('select * from orgs where id = $1', [org.id]);
        },
      },
      {
        name: 'raw-insert',
        queries: 1,
        call: async (i) => {
          await raw('insert into environments (org_id, project_id, name) values ($1, $2, $3) returning *', [org.id, writes.id, `raw-${i}`]);
        },
      },
      {
        // not a floor: the same select as raw-select, through drizzle, to show what the ORM layer adds per query
        name: 'drizzle-select',
        queries: 1,
        call: async () => {
          await database.db.select().from(orgs).where(eq(orgs.id, org.id));
        },
      },
    ];
    const routes: Case[] = [
      {
        name: 'GET /orgs/{slug}',
        call: async () => {
          await expectStatus(app.request(`/orgs/${org.slug}`, readAuth), 200, 'GET org');
        },
      },
      {
        name: 'GET /{o}/{p}/envs',
        call: async () => {
          await expectStatus(app.request(`/${org.slug}/${reads.slug}/envs`, readAuth), 200, 'GET envs');
        },
      },
      {
        name: 'POST /{o}/{p}/envs',
        call: async (i) => {
          const name = i < 0 ? 'api-probe' : `api-${i}`;
          await expectStatus(app.request(`/${org.slug}/${writes.slug}/envs`, json('POST', { name }, writes.token)), 201, 'POST envs');
        },
      },
    ];

    const listed = (await expectStatus(app.request(`/${org.slug}/${reads.slug}/envs`, readAuth), 200, 'GET envs')) as unknown[];
    if (listed.length !== listedEnvironments) throw new Error(`expected ${listedEnvironments} environments, listed ${listed.length}`);

    const results = await measureCases(context, [...baselines, ...routes]);

    printHeader('Cellplane request-path benchmark: foundation', context, [`list size:  ${listedEnvironments} environments`]);
    printTable(results);

    console.log('\nRatios (route / baselines of this run):');
    console.log(`  GET org    vs (raw-select + bare-hono): ${formatRatio(ratio(results, 'GET /orgs/{slug}', ['raw-select', 'bare-hono']))}`);
    console.log(`  envs list  vs (raw-select + bare-hono): ${formatRatio(ratio(results, 'GET /{o}/{p}/envs', ['raw-select', 'bare-hono']))}`);
    console.log(`  env create vs (raw-insert + bare-hono): ${formatRatio(ratio(results, 'POST /{o}/{p}/envs', ['raw-insert', 'bare-hono']))}`);

    // the same routes against a floor that pays one raw round trip per statement they send
    console.log('\nPer-query floor (bare-hono + a raw round trip per statement the route sends; writes count one raw-insert):');
    for (const [name, write] of [
      ['GET /orgs/{slug}', undefined],
      ['GET /{o}/{p}/envs', undefined],
      ['POST /{o}/{p}/envs', 'raw-insert'],
    ] as const) {
      const count = results.get(name)!.statements.length;
      console.log(`  ${name.padEnd(19)} ${count} queries: ${formatRatio(ratio(results, name, perQueryFloor(results, name, 'raw-select', write)))}`);
    }
    console.log(`  drizzle-select vs raw-select (ORM layer, per query): ${formatRatio(ratio(results, 'drizzle-select', ['raw-select']))}`);

    printStatements(results);
  },
};
