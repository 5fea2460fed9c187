import type { CellplaneClient, Schemas } from '../../sdk/client';
import type { RegisterCommands } from '../context';
import { formatCell, showRecord, type Column } from '../output';
import { printList } from './listing';

/**
 * `cellplane entity-types|relationship-types|cells|actions get|list|delete`:
 * the project's catalog definitions. Creating and changing them is
 * `cellplane apply`'s (YAML or JSON files).
 */

interface CatalogKind<T> {
  command: string;
  /** Singular, for messages. */
  noun: string;
  plural: string;
  list(client: CellplaneClient, o: string, p: string): Promise<T[]>;
  get(client: CellplaneClient, o: string, p: string, name: string): Promise<T>;
  remove(client: CellplaneClient, o: string, p: string, name: string): Promise<{ deleted: boolean; name: string }>;
  columns: Column[];
}

const entityTypes: CatalogKind<Schemas['EntityType']> = {
  command: 'entity-types',
  noun: 'entity type',
  plural: 'entity types',
  list: (client, o, p) => client.GET('/{o}/{p}/entity-types', { params: { path: { o, p } } }),
  get: (client, o, p, name) => client.GET('/{o}/{p}/entity-types/{name}', { params: { path: { o, p, name } } }),
  remove: (client, o, p, name) => client.DELETE('/{o}/{p}/entity-types/{name}', { params: { path: { o, p, name } } }),
  columns: [
    { key: 'name', header: 'NAME' },
    { key: 'states', header: 'STATES' },
    { key: 'initialState', header: 'INITIAL' },
    { key: 'properties', header: 'PROPERTIES', format: (value) => formatCell((value as { name: string }[]).map((property) => property.name)) },
    { key: 'updatedAt', header: 'UPDATED' },
  ],
};

const relationshipTypes: CatalogKind<Schemas['RelationshipType']> = {
  command: 'relationship-types',
  noun: 'relationship type',
  plural: 'relationship types',
  list: (client, o, p) => client.GET('/{o}/{p}/relationship-types', { params: { path: { o, p } } }),
  get: (client, o, p, name) => client.GET('/{o}/{p}/relationship-types/{name}', { params: { path: { o, p, name } } }),
  remove: (client, o, p, name) => client.DELETE('/{o}/{p}/relationship-types/{name}', { params: { path: { o, p, name } } }),
  columns: [
    { key: 'name', header: 'NAME' },
    { key: 'fromEntityTypeName', header: 'FROM' },
    { key: 'toEntityTypeName', header: 'TO' },
    { key: 'cardinality', header: 'CARDINALITY' },
    { key: 'states', header: 'STATES' },
  ],
};

const cells: CatalogKind<Schemas['Cell']> = {
  command: 'cells',
  noun: 'cell',
  plural: 'cells',
  list: (client, o, p) => client.GET('/{o}/{p}/cells', { params: { path: { o, p } } }),
  get: (client, o, p, name) => client.GET('/{o}/{p}/cells/{name}', { params: { path: { o, p, name } } }),
  remove: (client, o, p, name) => client.DELETE('/{o}/{p}/cells/{name}', { params: { path: { o, p, name } } }),
  columns: [
    { key: 'name', header: 'NAME' },
    { key: 'entityTypeName', header: 'ENTITY TYPE' },
    { key: 'membershipMode', header: 'MEMBERSHIP' },
    { key: 'placementPolicy', header: 'PLACEMENT' },
    { key: 'parentCells', header: 'PARENTS' },
  ],
};

const actions: CatalogKind<Schemas['Action']> = {
  command: 'actions',
  noun: 'action',
  plural: 'actions',
  list: (client, o, p) => client.GET('/{o}/{p}/actions', { params: { path: { o, p } } }),
  get: (client, o, p, name) => client.GET('/{o}/{p}/actions/{name}', { params: { path: { o, p, name } } }),
  remove: (client, o, p, name) => client.DELETE('/{o}/{p}/actions/{name}', { params: { path: { o, p, name } } }),
  columns: [
    { key: 'name', header: 'NAME' },
    { key: 'entityType', header: 'ENTITY TYPE' },
    { key: 'trigger', header: 'TRIGGER', format: (value) => (value as { type: string }).type },
    { key: 'onSuccess', header: 'ON SUCCESS' },
    { key: 'onFailure', header: 'ON FAILURE' },
  ],
};

export const CATALOG_KINDS = [entityTypes, relationshipTypes, cells, actions] as CatalogKind<object>[];

export const registerCatalogCommands: RegisterCommands = (program, context) => {
  for (const kind of CATALOG_KINDS) {
    const group = program.command(kind.command).description(`${kind.plural} of the current project (create and change them with \`cellplane apply\`)`);

    group
      .command('list')
      .description(`list the ${kind.plural}`)
      .action(async () => {
        const ctx = context();
        const { org, project } = ctx.project();
        printList(ctx.out, kind.plural, await kind.list(await ctx.client(), org, project), kind.columns);
      });

    group
      .command('get')
      .description(`show one ${kind.noun}`)
      .argument('<name>')
      .action(async (name: string) => {
        const ctx = context();
        const { org, project } = ctx.project();
        const found = await kind.get(await ctx.client(), org, project, name);
        if (ctx.out.jsonMode) return ctx.out.json(found);
        showRecord(ctx.out, found as Record<string, unknown>);
      });

    group
      .command('delete')
      .description(`delete one ${kind.noun}`)
      .argument('<name>')
      .action(async (name: string) => {
        const ctx = context();
        const { org, project } = ctx.project();
        const deleted = await kind.remove(await ctx.client(), org, project, name);
        if (ctx.out.jsonMode) return ctx.out.json(deleted);
        ctx.out.line(`deleted ${kind.noun} ${deleted.name}`);
      });
  }
};
