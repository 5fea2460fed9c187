import { Option } from 'commander';
import type { Schemas } from '../../sdk/client';
import type { RegisterCommands } from '../context';
import { collect, instant } from './arguments';
import { printList } from './listing';

/**
 * `cellplane tokens list|create|revoke`: the service tokens of the current
 * project (tokens:manage). `create` prints the secret once, alone on
 * stdout (`TOKEN=$(cellplane tokens create ci)`), the rest on stderr.
 */
export const registerTokenCommands: RegisterCommands = (program, context) => {
  const tokens = program.command('tokens').description('service tokens of the current project');

  tokens
    .command('list')
    .description('list the tokens (never their secrets)')
    .action(async () => {
      const ctx = context();
      const { org, project } = ctx.project();
      const list = await (await ctx.client()).GET('/orgs/{orgId}/projects/{projectId}/tokens', { params: { path: { orgId: org, projectId: project } } });
      printList(ctx.out, 'tokens', list, [
        { key: 'id', header: 'ID' },
        { key: 'name', header: 'NAME' },
        { key: 'role', header: 'ROLE' },
        { key: 'prefix', header: 'PREFIX' },
        { key: 'envName', header: 'ENV' },
        { key: 'cellScopes', header: 'CELLS' },
        { key: 'expiresAt', header: 'EXPIRES' },
      ]);
    });

  tokens
    .command('create')
    .description('mint a token; its secret is printed once')
    .argument('<name>')
    .addOption(new Option('--role <role>', 'the role (default member)').choices(['viewer', 'member', 'admin', 'owner']))
    .option('--pin-env <name>', 'pin the token to this environment')
    .option('--cell-scope <cell>', 'limit the token to this cell (repeatable)', collect)
    .option('--expires-at <instant>', 'ISO 8601 expiry', instant)
    .option('--personal', 'revoked when the user who minted it leaves (a session only)')
    .action(async (name: string, options: { role?: string; pinEnv?: string; cellScope?: string[]; expiresAt?: string; personal?: boolean }) => {
      const ctx = context();
      const { org, project } = ctx.project();
      const minted = await (await ctx.client()).POST('/orgs/{orgId}/projects/{projectId}/tokens', {
        params: { path: { orgId: org, projectId: project } },
        // --role is any string here: the server refuses one that is not a role (400), so the cast only narrows the flag's type
        body: {
          name,
          role: options.role,
          envName: options.pinEnv,
          cellScopes: options.cellScope,
          expiresAt: options.expiresAt,
          ...(options.personal ? { personal: true } : {}),
        } as Schemas['ServiceTokenCreate'],
      });
      if (ctx.out.jsonMode) return ctx.out.json(minted);
      ctx.out.line(minted.token);
      ctx.out.info(`token ${minted.name} (${minted.role}, id ${minted.id}) created: the secret above is shown once; store it now`);
    });

  tokens
    .command('revoke')
    .description('revoke a token at once')
    .argument('<id>')
    .action(async (id: string) => {
      const ctx = context();
      const { org, project } = ctx.project();
      const revoked = await (await ctx.client()).DELETE('/orgs/{orgId}/projects/{projectId}/tokens/{id}', {
        params: { path: { orgId: org, projectId: project, id } },
      });
      if (ctx.out.jsonMode) return ctx.out.json(revoked);
      ctx.out.line(`revoked token ${revoked.id}`);
    });
};
