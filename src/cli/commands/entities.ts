import type { RegisterCommands } from '../context';
import { paintStatus, showRecord, type Column, type Output } from '../output';
import { collect, instant, labelPair, labelPairs, valuePairs } from './arguments';
import { listItems, pageOptions, pageQuery, printList, type PageOptions } from './listing';

/** `cellplane entities list|get|create|set-state|metrics|drift|delete`, in the current environment. */

export const entityColumns = (out: Output): Column[] => [
  { key: 'name', header: 'NAME' },
  { key: 'entityTypeName', header: 'TYPE' },
  { key: 'state', header: 'STATE', format: (value) => paintStatus(out.paint, String(value)) },
  { key: 'labels', header: 'LABELS' },
  { key: 'updatedAt', header: 'UPDATED' },
];

interface ListOptions extends PageOptions {
  type?: string;
  state?: string;
  label?: string[];
  cell?: string;
  namePrefix?: string;
  syncSource?: string;
  updatedSince?: string;
}

export const registerEntityCommands: RegisterCommands = (program, context) => {
  const entities = program.command('entities').description('entities of the current environment');

  pageOptions(
    entities
      .command('list')
      .description('list entities (one page; --all for every page)')
      .option('--type <entityType>', 'only entities of this type')
      .option('--state <state>', 'only entities in this state')
      .option('--label <key:value>', 'only entities with this label (repeatable: all must match)', collect)
      .option('--cell <cell>', 'only direct members of this cell')
      .option('--name-prefix <prefix>', 'only names starting with this')
      .option('--sync-source <source>', 'only entities stamped by this sync source')
      .option('--updated-since <instant>', 'only entities updated at or after this ISO 8601 instant', instant),
    1000,
    100,
  ).action(async (options: ListOptions) => {
    const ctx = context();
    const { org, project, env } = ctx.env();
    const client = await ctx.client();
    const init = {
      params: {
        path: { o: org, p: project, envName: env },
        query: {
          entityType: options.type,
          state: options.state,
          ...(options.label === undefined ? {} : { label: options.label.map((text) => labelPair(text, '--label').join(':')) }),
          cell: options.cell,
          namePrefix: options.namePrefix,
          syncSource: options.syncSource,
          updatedSince: options.updatedSince,
          ...pageQuery(options),
        },
      },
    };
    const items = await listItems(
      ctx.out,
      'entities',
      options,
      () => client.request('get', '/{o}/{p}/envs/{envName}/entities', init),
      () => client.paginate('/{o}/{p}/envs/{envName}/entities', init),
    );
    printList(ctx.out, 'entities', items, entityColumns(ctx.out));
  });

  entities
    .command('get')
    .description('show one entity')
    .argument('<name>')
    .action(async (name: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const found = await (await ctx.client()).GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { o: org, p: project, envName: env, name } } });
      if (ctx.out.jsonMode) return ctx.out.json(found);
      showRecord(ctx.out, { ...found, state: paintStatus(ctx.out.paint, found.state) }, [
        'name',
        'entityTypeName',
        'state',
        'labels',
        'properties',
        'syncSource',
        'lastSyncedAt',
        'id',
        'createdAt',
        'updatedAt',
      ]);
    });

  entities
    .command('create')
    .description('create an entity (many at once, or with complex properties: `cellplane apply`)')
    .argument('<name>')
    .requiredOption('--type <entityType>', 'its entity type')
    .option('--state <state>', "its first state (default: the type's initial state)")
    .option('--label <key=value>', 'a label (repeatable)', collect)
    .option('--property <key=value>', 'a property: key=text, or key:=json for numbers, booleans, lists (repeatable)', collect)
    .action(async (name: string, options: { type: string; state?: string; label?: string[]; property?: string[] }) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const created = await (await ctx.client()).POST('/{o}/{p}/envs/{envName}/entities', {
        params: { path: { o: org, p: project, envName: env } },
        body: {
          kind: 'Entity',
          entityType: options.type,
          name,
          state: options.state,
          ...(options.label === undefined ? {} : { labels: labelPairs(options.label, '--label') }),
          ...(options.property === undefined ? {} : { properties: valuePairs(options.property, '--property') }),
        },
      });
      if (ctx.out.jsonMode) return ctx.out.json(created);
      ctx.out.line(`created entity ${created.name} (${created.entityTypeName}, ${paintStatus(ctx.out.paint, created.state)})`);
    });

  entities
    .command('set-state')
    .description('move an entity to another state (transitions are enforced)')
    .argument('<name>')
    .argument('<state>')
    .action(async (name: string, state: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const updated = await (await ctx.client()).PUT('/{o}/{p}/envs/{envName}/entities/{name}', {
        params: { path: { o: org, p: project, envName: env, name } },
        body: { state },
      });
      if (ctx.out.jsonMode) return ctx.out.json(updated);
      ctx.out.line(`${updated.name} is ${paintStatus(ctx.out.paint, updated.state)}`);
    });

  entities
    .command('metrics')
    .description("an entity's metric values")
    .argument('<name>')
    .action(async (name: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const values = await (await ctx.client()).GET('/{o}/{p}/envs/{envName}/entities/{name}/metrics', {
        params: { path: { o: org, p: project, envName: env, name } },
      });
      if (ctx.out.jsonMode) return ctx.out.json(values);
      const rows = Object.entries(values).map(([metric, value]) => ({ metric, value }));
      if (rows.length === 0) return ctx.out.info(`no metric values for ${name}`);
      ctx.out.table(rows, [
        { key: 'metric', header: 'METRIC' },
        { key: 'value', header: 'VALUE' },
      ]);
    });

  entities
    .command('drift')
    .description("whether an entity's sync stamp is fresh (in-sync, stale, never-synced, untracked)")
    .argument('<name>')
    .action(async (name: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const drift = await (await ctx.client()).GET('/{o}/{p}/envs/{envName}/entities/{name}/drift', {
        params: { path: { o: org, p: project, envName: env, name } },
      });
      if (ctx.out.jsonMode) return ctx.out.json(drift);
      showRecord(ctx.out, { ...drift, driftStatus: paintStatus(ctx.out.paint, drift.driftStatus) }, ['name', 'driftStatus', 'lastSyncedAt', 'syncSource', 'message']);
    });

  entities
    .command('delete')
    .description('delete an entity')
    .argument('<name>')
    .action(async (name: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const deleted = await (await ctx.client()).DELETE('/{o}/{p}/envs/{envName}/entities/{name}', {
        params: { path: { o: org, p: project, envName: env, name } },
      });
      if (ctx.out.jsonMode) return ctx.out.json(deleted);
      ctx.out.line(`deleted entity ${deleted.name}`);
    });
};
