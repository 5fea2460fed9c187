import type { RegisterCommands } from '../context';
import { paintStatus, showRecord, type Column, type Output } from '../output';
import { collect, labelPairs, valuePairs } from './arguments';
import { listItems, pageOptions, pageQuery, printList, type PageOptions } from './listing';

/** `cellplane relationships list|get|create|delete`, in the current environment. */

const columns = (out: Output): Column[] => [
  { key: 'id', header: 'ID' },
  { key: 'relationshipTypeName', header: 'TYPE' },
  { key: 'fromEntityId', header: 'FROM' },
  { key: 'toEntityId', header: 'TO' },
  { key: 'state', header: 'STATE', format: (value) => paintStatus(out.paint, String(value)) },
];

export const registerRelationshipCommands: RegisterCommands = (program, context) => {
  const relationships = program.command('relationships').description('relationships between entities of the current environment');

  pageOptions(
    relationships
      .command('list')
      .description('list relationships (one page; --all for every page)')
      .option('--type <relationshipType>', 'only relationships of this type')
      .option('--from <entity>', 'only relationships from this entity (by name)')
      .option('--to <entity>', 'only relationships to this entity (by name)'),
    1000,
    100,
  ).action(async (options: PageOptions & { type?: string; from?: string; to?: string }) => {
    const ctx = context();
    const { org, project, env } = ctx.env();
    const client = await ctx.client();
    const init = {
      params: {
        path: { o: org, p: project, envName: env },
        query: {
          relationshipType: options.type,
          from: options.from,
          to: options.to,
          ...pageQuery(options),
        },
      },
    };
    const items = await listItems(
      ctx.out,
      'relationships',
      options,
      () => client.request('get', '/{o}/{p}/envs/{envName}/relationships', init),
      () => client.paginate('/{o}/{p}/envs/{envName}/relationships', init),
    );
    printList(ctx.out, 'relationships', items, columns(ctx.out));
  });

  relationships
    .command('get')
    .description('show one relationship')
    .argument('<id>')
    .action(async (id: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const found = await (await ctx.client()).GET('/{o}/{p}/envs/{envName}/relationships/{id}', { params: { path: { o: org, p: project, envName: env, id } } });
      if (ctx.out.jsonMode) return ctx.out.json(found);
      showRecord(ctx.out, found, ['id', 'relationshipTypeName', 'fromEntityId', 'toEntityId', 'state', 'labels', 'properties', 'createdAt', 'updatedAt']);
    });

  relationships
    .command('create')
    .description('relate two entities (by name)')
    .argument('<type>', 'the relationship type')
    .argument('<from>', 'the source entity')
    .argument('<to>', 'the target entity')
    .option('--state <state>', "its first state (default: the type's first state)")
    .option('--label <key=value>', 'a label (repeatable)', collect)
    .option('--property <key=value>', 'a property: key=text, or key:=json (repeatable)', collect)
    .action(async (type: string, from: string, to: string, options: { state?: string; label?: string[]; property?: string[] }) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const created = await (await ctx.client()).POST('/{o}/{p}/envs/{envName}/relationships', {
        params: { path: { o: org, p: project, envName: env } },
        body: {
          relationshipType: type,
          from,
          to,
          state: options.state,
          ...(options.label === undefined ? {} : { labels: labelPairs(options.label, '--label') }),
          ...(options.property === undefined ? {} : { properties: valuePairs(options.property, '--property') }),
        },
      });
      if (ctx.out.jsonMode) return ctx.out.json(created);
      ctx.out.line(`created relationship ${created.id} (${type}: ${from} → ${to})`);
    });

  relationships
    .command('delete')
    .description('delete a relationship')
    .argument('<id>')
    .action(async (id: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const deleted = await (await ctx.client()).DELETE('/{o}/{p}/envs/{envName}/relationships/{id}', { params: { path: { o: org, p: project, envName: env, id } } });
      if (ctx.out.jsonMode) return ctx.out.json(deleted);
      ctx.out.line(`deleted relationship ${deleted.id}`);
    });
};
