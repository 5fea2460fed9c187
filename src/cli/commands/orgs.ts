import { CellplaneError } from '../../sdk/errors';
import type { RegisterCommands } from '../context';
import { CliError } from '../errors';
import { showRecord } from '../output';
import { printList } from './listing';

/** `cellplane orgs get|create|list`. `list` needs a user session (`cellplane login --email`): a service token belongs to one organization. */
export const registerOrgCommands: RegisterCommands = (program, context) => {
  const orgs = program.command('orgs').description('organizations');

  orgs
    .command('get')
    .description('show an organization (default: the current one)')
    .argument('[org]', 'slug or id')
    .action(async (org: string | undefined) => {
      const ctx = context();
      const id = org ?? ctx.org();
      const found = await (await ctx.client()).GET('/orgs/{id}', { params: { path: { id } } });
      if (ctx.out.jsonMode) return ctx.out.json(found);
      showRecord(ctx.out, found, ['slug', 'name', 'id', 'createdAt']);
    });

  orgs
    .command('create')
    .description('create an organization (a user session becomes its owner; without one, only while the server is in bootstrap mode)')
    .argument('<slug>')
    .option('--name <name>', 'display name (default: the slug)')
    .action(async (slug: string, options: { name?: string }) => {
      const ctx = context();
      const created = await (await ctx.client()).POST('/orgs', { body: { slug, name: options.name ?? slug } });
      if (ctx.out.jsonMode) return ctx.out.json(created);
      ctx.out.line(`created organization ${created.slug}`);
      if (!ctx.settings.values.currentOrg.value) ctx.out.info(`make it the current one: cellplane config set currentOrg ${created.slug}`);
    });

  orgs
    .command('list')
    .description('the organizations of the signed-in user, with its role (needs a session: `cellplane login --email`)')
    .action(async () => {
      const ctx = context();
      let list;
      try {
        list = await (await ctx.client()).GET('/orgs');
      } catch (error) {
        if (error instanceof CellplaneError && error.status === 401 && ctx.settings.values.token.value?.startsWith('cpl_')) {
          throw new CliError(
            'orgs list needs a user session; a service token belongs to one organization',
            'sign in with `cellplane login --email <address>`, or show the token\'s organization with `cellplane orgs get`',
          );
        }
        throw error;
      }
      printList(ctx.out, 'organizations', list, [
        { key: 'slug', header: 'SLUG' },
        { key: 'name', header: 'NAME' },
        { key: 'role', header: 'ROLE' },
        { key: 'createdAt', header: 'CREATED' },
      ]);
    });
};
