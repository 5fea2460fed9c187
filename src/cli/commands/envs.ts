import type { RegisterCommands } from '../context';
import { printList } from './listing';

/** `cellplane envs list|create|delete`, in the current project. */
export const registerEnvCommands: RegisterCommands = (program, context) => {
  const envs = program.command('envs').description('environments of the current project');

  envs
    .command('list')
    .description('list the environments')
    .action(async () => {
      const ctx = context();
      const { org, project } = ctx.project();
      const list = await (await ctx.client()).GET('/{o}/{p}/envs', { params: { path: { o: org, p: project } } });
      printList(ctx.out, 'environments', list, [
        { key: 'name', header: 'NAME' },
        { key: 'createdAt', header: 'CREATED' },
      ]);
    });

  envs
    .command('create')
    .description('create an environment')
    .argument('<name>')
    .action(async (name: string) => {
      const ctx = context();
      const { org, project } = ctx.project();
      const created = await (await ctx.client()).POST('/{o}/{p}/envs', { params: { path: { o: org, p: project } }, body: { name } });
      if (ctx.out.jsonMode) return ctx.out.json(created);
      ctx.out.line(`created environment ${created.name}`);
    });

  envs
    .command('delete')
    .description('delete an environment and everything in it (never "default")')
    .argument('<name>')
    .action(async (name: string) => {
      const ctx = context();
      const { org, project } = ctx.project();
      const deleted = await (await ctx.client()).DELETE('/{o}/{p}/envs/{name}', { params: { path: { o: org, p: project, name } } });
      if (ctx.out.jsonMode) return ctx.out.json(deleted);
      ctx.out.line(`deleted environment ${deleted.name}`);
    });
};
