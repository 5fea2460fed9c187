import type { RegisterCommands } from '../context';
import { printList } from './listing';

/** `cellplane projects list|create`, in the current organization. */
export const registerProjectCommands: RegisterCommands = (program, context) => {
  const projects = program.command('projects').description('projects of the current organization');

  projects
    .command('list')
    .description('list the projects of the organization')
    .action(async () => {
      const ctx = context();
      const list = await (await ctx.client()).GET('/orgs/{o}/projects', { params: { path: { o: ctx.org() } } });
      printList(ctx.out, 'projects', list, [
        { key: 'slug', header: 'SLUG' },
        { key: 'name', header: 'NAME' },
        { key: 'createdAt', header: 'CREATED' },
      ]);
    });

  projects
    .command('create')
    .description('create a project (with its environment "default"); admin or owner')
    .argument('<slug>')
    .option('--name <name>', 'display name (default: the slug)')
    .action(async (slug: string, options: { name?: string }) => {
      const ctx = context();
      const created = await (await ctx.client()).POST('/orgs/{o}/projects', { params: { path: { o: ctx.org() } }, body: { slug, name: options.name ?? slug } });
      if (ctx.out.jsonMode) return ctx.out.json(created);
      ctx.out.line(`created project ${created.slug} in ${ctx.org()}`);
    });
};
