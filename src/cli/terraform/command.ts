import { CellplaneError, type CellplaneClient } from '../../sdk';
import type { CliContext } from '../context';
import { CliError, UsageError } from '../errors';
import { createProgress, formatSummary } from './progress';
import { RemoteStateError } from './remote';
import { ImportRefusedError, importTerraform, ImportUsageError } from './run';
import { StateFormatError } from './state';
import { emptyProjectTarget, sdkTarget } from './target';

/**
 * `cellplane import terraform --state <file> | --workspace <org>/<name>`:
 * the engine (run.ts) on the CLI's settings and output. The project is
 * `--project` (or SERVICE_PROJECT_ID, or the config file) when given, else
 * `terrantula`, created when missing (SPEC, Client configuration).
 * The summary (or, with --json, the report) goes to stdout; progress and
 * warnings to stderr. Exit 1 for a refusal or a state that cannot be read,
 * 2 for flags that cannot work together (docs/terraform-import.md).
 */

export const DEFAULT_IMPORT_PROJECT = 'terrantula';

export interface ImportFlags {
  state?: string;
  workspace?: string;
  hostname?: string;
  dryRun?: boolean;
  maxDelete?: number;
  force?: boolean;
}

/** The project an import writes to: a project set by flag, variable or config file, else `terrantula`. */
export function importProject(ctx: CliContext): string {
  const setting = ctx.settings.values.currentProject;
  return setting.value !== undefined && setting.source !== undefined && setting.source.kind !== 'default' ? setting.value : DEFAULT_IMPORT_PROJECT;
}

/** Whether the project exists; when it does not and `create`, creates it. */
async function ensureProject(client: CellplaneClient, ctx: CliContext, org: string, project: string, create: boolean): Promise<boolean> {
  const projects = await client.GET('/orgs/{o}/projects', { params: { path: { o: org } } });
  if (projects.some((candidate) => candidate.slug === project)) return true;
  if (!create) return false;
  await client.POST('/orgs/{o}/projects', { params: { path: { o: org } }, body: { name: project, slug: project } });
  ctx.out.info(`created project "${project}" in organization "${org}"`);
  return true;
}

/** The action of `cellplane import terraform` (its flags: src/cli/commands/import.ts). */
export async function runImportTerraform(ctx: CliContext, flags: ImportFlags): Promise<void> {
  const org = ctx.org();
  const project = importProject(ctx);
  const env = ctx.settings.values.currentEnv.value ?? 'default';
  const client = await ctx.client();
  // a dry run creates nothing, not even the project: against a missing one it plans everything as new
  const exists = await ensureProject(client, ctx, org, project, !flags.dryRun);
  const display = createProgress({
    // the bar redraws in place, which needs the raw stream; it is drawn only when stderr is a terminal
    output: {
      isTTY: ctx.out.stderrIsTTY,
      write: (text: string) => (ctx.out.stderrIsTTY ? process.stderr.write(text) : ctx.out.info(text.replace(/\n$/, ''))),
    },
    json: ctx.out.jsonMode,
  });
  let report;
  try {
    report = await importTerraform(
      { statePath: flags.state, workspace: flags.workspace, hostname: flags.hostname, dryRun: flags.dryRun, maxDelete: flags.maxDelete, force: flags.force },
      {
        target: exists ? sdkTarget(client, { org, project, env }) : emptyProjectTarget(),
        env: ctx.variables,
        warn: (message) => ctx.out.warn(message.replace(/^warning: /, '')),
        onProgress: display.onProgress,
      },
    );
  } catch (error) {
    display.finish();
    if (error instanceof ImportUsageError) throw new UsageError(error.message);
    if (error instanceof ImportRefusedError || error instanceof StateFormatError || error instanceof RemoteStateError) throw new CliError(error.message);
    if (error instanceof CellplaneError && error.status === 404 && project === DEFAULT_IMPORT_PROJECT && !ctx.local) {
      // a service token belongs to one project: it may list (even create) "terrantula" yet not reach into it
      throw new CliError(
        `cannot reach project "${project}" in organization "${org}" with this token (${error.message})`,
        'a service token works in its own project only: pass --project <that project>, or sign in with `cellplane login` (email and password), or use --local',
      );
    }
    throw error;
  }
  display.finish();
  if (ctx.out.jsonMode) ctx.out.json(report);
  else ctx.out.line(formatSummary(report).replace(/\n$/, ''));
}
