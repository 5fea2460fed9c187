import { createClient, type CellplaneClient } from '../../sdk/client';
import { CellplaneError } from '../../sdk/errors';
import type { CliContext, RegisterCommands } from '../context';
import { CliError, UsageError } from '../errors';
import { writeConfigFile, type SettingKey } from '../settings';
import { readHidden } from './prompt';

/**
 * `cellplane login` stores a token in the config file after checking it
 * with one cheap authenticated call; with --email it signs in through
 * `/api/auth` (the SDK's signIn) and stores the session's Bearer value.
 * `cellplane logout` removes the token (and ends a session on the server).
 *
 * The password comes from SERVICE_PASSWORD, a prompt on a terminal (not
 * echoed), or --password — the last only as a fallback: argv is visible to
 * other users of the machine in `ps`.
 */
export const registerLoginCommands: RegisterCommands = (program, context) => {
  program
    .command('login')
    .description('check a token (--token or SERVICE_TOKEN) or sign in (--email), and store the token in the config file')
    .option('--email <email>', 'sign in with this address (password: SERVICE_PASSWORD, a prompt, or --password)')
    .option('--password <password>', 'the password (visible in `ps`: prefer SERVICE_PASSWORD or the prompt)')
    .addHelpText(
      'after',
      '\nThe flags --base-url, --org and --project given to login are stored too.\n' +
        'Examples:\n  cellplane login --base-url http://127.0.0.1:3000 --org acme --project platform --token cpl_…\n  SERVICE_PASSWORD=… cellplane login --base-url https://api.example.com --email ann@example.com',
    )
    .action(async (options: { email?: string; password?: string }) => {
      const ctx = context();
      if (ctx.local) throw new UsageError('local mode needs no login: drop --local (or SERVICE_LOCAL) to log in to a server');
      const { settings, out } = ctx;
      const changes: Partial<Record<SettingKey, string>> = {};
      let token: string;
      let who: string;
      if (options.email !== undefined) {
        const password = options.password ?? ctx.variables.SERVICE_PASSWORD ?? (await promptFor(ctx, `password for ${options.email}: `));
        const client = await ctx.client();
        let session: Awaited<ReturnType<CellplaneClient['signIn']>>;
        try {
          session = await client.signIn(options.email, password);
        } catch (error) {
          if (error instanceof CellplaneError && (error.status === 401 || error.status === 400)) {
            throw new CliError(`sign-in refused for ${options.email}: ${error.message}`, 'check the address and the password (SERVICE_PASSWORD, the prompt or --password), then run `cellplane login` again');
          }
          throw error;
        }
        token = session.token;
        who = `${session.user.email} (session)`;
        await listOrganizations(ctx, token);
      } else {
        if (options.password !== undefined) throw new UsageError('--password goes with --email: give both, or log in with --token');
        const given = settings.values.token;
        token = given.source?.kind === 'flag' || given.source?.kind === 'env' ? given.value! : await promptFor(ctx, 'token: ');
        who = await checkToken(ctx, token);
      }
      changes.token = token;
      for (const key of ['baseUrl', 'currentOrg', 'currentProject'] as const) {
        const setting = settings.values[key];
        if (setting.source?.kind === 'flag') changes[key] = setting.value!.replace(/\/+$/, '');
      }
      writeConfigFile(settings.configPath, changes);
      const stored = Object.keys(changes).join(', ');
      if (out.jsonMode) return out.json({ loggedIn: true, as: who, stored: Object.keys(changes), configPath: settings.configPath });
      out.info(`logged in as ${who}; stored ${stored} in ${settings.configPath}`);
    });

  program
    .command('logout')
    .description('remove the token from the config file (a session token is also signed out on the server)')
    .action(async () => {
      const ctx = context();
      const { settings, out } = ctx;
      const stored = settings.values.token;
      const inFile = stored.source?.kind === 'file' ? stored.value : undefined;
      if (inFile && !inFile.startsWith('cpl_') && settings.values.baseUrl.value && !ctx.local) {
        // a session ends on the server too (Better Auth wants a JSON body); a service token stays valid: `cellplane tokens revoke` ends it
        try {
          await createClient({ baseUrl: settings.values.baseUrl.value, token: inFile }).POST('/api/auth/sign-out', { body: {} as never });
        } catch (error) {
          out.warn(`the server did not end the session (${error instanceof Error ? error.message : String(error)}); it expires on its own`);
        }
      }
      writeConfigFile(settings.configPath, { token: undefined });
      if (stored.source?.kind === 'env' || stored.source?.kind === 'flag') {
        out.warn(`a token still comes from ${stored.source.kind === 'env' ? `env ${stored.source.name}` : `flag ${stored.source.name}`}: unset it too`);
      }
      if (out.jsonMode) return out.json({ loggedOut: true, configPath: settings.configPath });
      out.info(inFile ? `token removed from ${settings.configPath}` : `no token was stored in ${settings.configPath}`);
    });
};

/** The token works against the organization in effect (GET /orgs/{org}), or, for a session without one, GET /orgs. */
async function checkToken(ctx: CliContext, token: string): Promise<string> {
  const org = ctx.settings.values.currentOrg.value;
  const client = await clientWith(ctx, token);
  try {
    if (org !== undefined) {
      const found = await client.GET('/orgs/{id}', { params: { path: { id: org } } });
      return `a token of ${found.slug}`;
    }
    if (token.startsWith('cpl_')) {
      throw new UsageError('a service token is checked against its organization: pass --org <slug> (stored with the token), or set currentOrg first');
    }
    const orgs = await client.GET('/orgs');
    ctx.out.info(orgs.length > 0 ? `organizations: ${orgs.map((o) => `${o.slug} (${o.role})`).join(', ')}` : 'no organizations yet');
    return 'a user session';
  } catch (error) {
    if (error instanceof CellplaneError && (error.status === 401 || error.status === 404)) {
      throw new CliError(
        `the server refused the token${org ? ` for organization ${org}` : ''} (${error.status} ${error.code}); nothing was stored`,
        'check the token and --org (a service token belongs to one organization), or mint a new one with `cellplane tokens create`',
      );
    }
    throw error;
  }
}

async function listOrganizations(ctx: CliContext, token: string): Promise<void> {
  try {
    const orgs = await (await clientWith(ctx, token)).GET('/orgs');
    if (orgs.length === 0) ctx.out.info('no organizations yet: create one with `cellplane orgs create <slug>`');
    else if (!ctx.settings.values.currentOrg.value) {
      ctx.out.info(`organizations: ${orgs.map((o) => `${o.slug} (${o.role})`).join(', ')}; choose one with \`cellplane config set currentOrg <slug>\``);
    }
  } catch {
    // only a courtesy: the sign-in itself succeeded
  }
}

async function clientWith(ctx: CliContext, token: string): Promise<CellplaneClient> {
  const base = await ctx.client();
  return createClient({ baseUrl: base.baseUrl, token });
}

async function promptFor(ctx: CliContext, question: string): Promise<string> {
  if (!process.stdin.isTTY) {
    throw new UsageError(
      question.startsWith('token')
        ? 'no token given: pass --token <token> or set SERVICE_TOKEN (or run login on a terminal to be asked), or sign in with --email'
        : 'no password given: set SERVICE_PASSWORD (or run login on a terminal to be asked)',
    );
  }
  const answer = await readHidden(question, ctx.out);
  if (answer === '') throw new UsageError('nothing entered: run `cellplane login` again');
  return answer;
}
