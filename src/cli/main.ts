import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { createContext, type CliContext, type RegisterCommands } from './context';
import { EXIT_OK, EXIT_USAGE, reportError } from './errors';
import { colourFor, createOutput, type Stream } from './output';
import { resolveSettings, type GlobalFlags } from './settings';
import { registerApply } from './commands/apply';
import { registerCatalogCommands } from './commands/catalog';
import { registerConfigCommands } from './commands/config';
import { registerEntityCommands } from './commands/entities';
import { registerEnvCommands } from './commands/envs';
import { registerImportCommands } from './commands/import';
import { registerLoginCommands } from './commands/login';
import { registerOrgCommands } from './commands/orgs';
import { registerProjectCommands } from './commands/projects';
import { registerRelationshipCommands } from './commands/relationships';
import { registerRunCommands } from './commands/runs';
import { registerStreamCommand } from './commands/stream';
import { registerTokenCommands } from './commands/tokens';

/**
 * `cellplane`: the command-line client (docs/cli.md). main() parses the
 * arguments, runs one command and answers its exit code: 0 ok, 1 an API or
 * network error or a refusal, 2 a usage error. It never imports server code;
 * local mode loads it on demand (context.ts).
 */

/** Every command group, in the order `--help` lists them. `apply` and `import` are registered here by their owners. */
export const COMMANDS: RegisterCommands[] = [
  registerConfigCommands,
  registerLoginCommands,
  registerOrgCommands,
  registerProjectCommands,
  registerEnvCommands,
  registerTokenCommands,
  registerCatalogCommands,
  registerEntityCommands,
  registerRelationshipCommands,
  registerRunCommands,
  registerStreamCommand,
  registerApply,
  registerImportCommands,
];

export interface MainIo {
  argv: string[];
  env: Record<string, string | undefined>;
  cwd: string;
  stdout: Stream;
  stderr: Stream;
}

export function cliVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

export function buildProgram(context: () => CliContext, io: Pick<MainIo, 'stdout' | 'stderr' | 'env'>, version: string): Command {
  const errColour = colourFor(io.stderr, io.env);
  const program = new Command('cellplane')
    .description('Cellplane from the terminal: catalog, runtime data, runs and the change stream (docs/cli.md)')
    .version(version, '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show help for a command')
    .option('--base-url <url>', 'API address (SERVICE_BASE_URL, config baseUrl)')
    .option('--token <token>', 'service token or session token (SERVICE_TOKEN, config token)')
    .option('--org <slug>', 'organization (SERVICE_ORG_ID, config currentOrg)')
    .option('--project <slug>', 'project (SERVICE_PROJECT_ID, config currentProject)')
    .option('--env <name>', 'environment (SERVICE_ENV_NAME, config currentEnv; default "default")')
    .option('--json', "print the API's JSON instead of tables")
    .option('--local', 'use the embedded database instead of a server (SERVICE_LOCAL=1)')
    .addOption(new Option('--data-dir <dir>', 'local mode: the database directory (SERVICE_DATA_DIR; default .cellplane)'))
    .showHelpAfterError('(run the command with --help for its usage)')
    .configureOutput({
      writeOut: (text) => void io.stdout.write(text),
      writeErr: (text) => void io.stderr.write(text),
      outputError: (text, write) => write(errColour ? `\x1b[31m${text}\x1b[0m` : text),
    })
    // set before the commands are added: subcommands inherit exitOverride, the output and the usage hint
    .exitOverride();
  for (const register of COMMANDS) register(program, context);
  return program;
}

export async function main(io: MainIo): Promise<number> {
  const version = cliVersion();
  let context: CliContext | undefined;
  let program: Command;
  const getContext = (): CliContext => {
    if (context) return context;
    const flags = program.opts<GlobalFlags>();
    const settings = resolveSettings(flags, io.env, io.cwd);
    const out = createOutput({ json: settings.json, env: io.env, stdout: io.stdout, stderr: io.stderr });
    for (const warning of settings.warnings) out.warn(warning);
    context = createContext({ settings, out, variables: io.env, version });
    return context;
  };
  program = buildProgram(getContext, io, version);
  const report = (error: unknown): number => {
    const { code, lines } = reportError(error, { debug: Boolean(io.env.SERVICE_DEBUG), scene: context?.scene() });
    const colour = colourFor(io.stderr, io.env);
    for (const [i, line] of lines.entries()) io.stderr.write(`${i === 0 && colour ? `\x1b[31m${line}\x1b[0m` : line}\n`);
    return code;
  };
  let code = EXIT_OK;
  try {
    await program.parseAsync(io.argv, { from: 'user' });
  } catch (error) {
    // help and --version end "with an error" that is none; commander has printed the message of the others
    if (error instanceof CommanderError) code = error.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    else code = report(error);
  }
  try {
    await context?.close();
  } catch (error) {
    code = Math.max(code, report(error));
  }
  return code;
}
