import { CellplaneError } from '../../sdk/errors';
import type { AppliedEntry, ApplyFailure, PlanCounts, PlanEntry, PlanRow } from '../apply';
import type { CliContext, RegisterCommands } from '../context';
import { CliError } from '../errors';
import type { Output } from '../output';

/**
 * `cellplane apply --file <path> [--dry-run]` (docs/cli-apply.md). The
 * engine (../apply.ts) checks documents with the server's own request
 * schemas, so it is imported only when apply runs: every other command
 * starts without server code.
 */
export const registerApply: RegisterCommands = (program, context) => {
  program
    .command('apply')
    .description('create or update entity types, relationship types, cells, actions, entities and relationships from a YAML or JSON file')
    .requiredOption('-f, --file <path>', 'YAML (documents separated by ---) or JSON (a document or a list of them); - reads standard input')
    .option('--dry-run', 'print the plan and change nothing')
    .addHelpText(
      'after',
      [
        '',
        'Each document is the API request body of its kind, with `kind:` EntityType, RelationshipType, Cell,',
        'Action, Entity or Relationship. They are applied in that order (a cell after its parent cells);',
        'where they go is decided by --org, --project and --env. The plan shows create / update / unchanged',
        'per document; an unchanged document sends nothing. See docs/cli-apply.md.',
      ].join('\n'),
    )
    .action(async (options: { file: string; dryRun?: boolean }) => {
      await runApply(context(), { file: options.file, dryRun: options.dryRun === true });
    });
};

/** What `--json` prints (docs/cli-apply.md). */
export interface ApplyReport {
  dryRun: boolean;
  summary: PlanCounts;
  plan: PlanRow[];
  /** The writes that landed, each with the API's answer. */
  applied: AppliedEntry[];
  /** The write the API refused; absent when none was. */
  failed?: { document: number; kind: string; name: string; status: number; code: string; error: string; details?: unknown };
  /** Creates and updates not sent because an earlier one failed, or because the plan has a conflict. */
  notApplied: PlanRow[];
}

export async function runApply(ctx: CliContext, options: { file: string; dryRun: boolean }): Promise<void> {
  const [engine, { describeDocument, orderDocuments, parseApplyDocuments, readApplySource }] = await Promise.all([
    import('../apply'),
    import('../apply-documents'),
  ]);
  const { text, label } = await readApplySource(options.file);
  // every document is checked before the target is even asked for: a bad file is a usage error, whatever the settings
  const documents = orderDocuments(parseApplyDocuments(text, label));
  const target = ctx.env();
  const client = await ctx.client();
  const { out } = ctx;

  const plan = await engine.planApply(client, target, documents);
  const summary = engine.countPlan(plan);
  const pending = plan.filter((entry) => entry.action === 'create' || entry.action === 'update');
  const report: ApplyReport = { dryRun: options.dryRun, summary, plan: plan.map(engine.planRow), applied: [], notApplied: [] };
  if (!out.jsonMode) printPlan(out, plan, summary);

  if (summary.conflict > 0) {
    report.notApplied = pending.map(engine.planRow);
    if (out.jsonMode) out.json(report);
    throw new CliError(
      `${summary.conflict} ${summary.conflict === 1 ? 'document conflicts' : 'documents conflict'} with what the API holds (see the plan); nothing was changed`,
      'resolve each conflict as the plan says, then run apply again',
    );
  }
  if (options.dryRun) {
    if (out.jsonMode) out.json(report);
    else out.info('dry run: nothing was changed');
    return;
  }
  if (pending.length === 0) {
    if (out.jsonMode) out.json(report);
    else out.line('Nothing to change.');
    return;
  }

  const result = await engine.executePlan(client, target, plan, (applied) => {
    if (!out.jsonMode) out.line(`${out.paint.ok(applied.action)} ${describeDocument(applied)}`);
  });
  report.applied = result.applied;
  report.notApplied = result.notApplied.map(engine.planRow);
  const created = result.applied.filter((entry) => entry.action === 'created').length;
  const updated = result.applied.length - created;

  if (!result.failure) {
    if (out.jsonMode) out.json(report);
    else out.line(`Applied: ${created} created, ${updated} updated, ${summary.unchanged} unchanged.`);
    return;
  }

  const { entry, error } = result.failure;
  const where = `document ${entry.document.index} (${describeDocument(entry.document)}, line ${entry.document.line})`;
  report.failed = failureOf(result.failure);
  if (out.jsonMode) {
    out.json(report);
  } else {
    out.line(`${out.paint.bad('failed')} ${describeDocument(entry.document)}: ${error instanceof Error ? error.message : String(error)}`);
    for (const skipped of result.notApplied) out.line(`${out.paint.dim('not applied')} ${describeDocument(skipped.document)}`);
    out.line(`Stopped: ${created} created, ${updated} updated, 1 failed, ${result.notApplied.length} not applied.`);
  }
  // the API's error, named after the document: main prints it with the hint for its status (and SERVICE_DEBUG's detail)
  if (error instanceof CellplaneError) {
    throw new CellplaneError({
      status: error.status,
      code: error.code,
      message: `apply stopped at ${where}: ${error.message}`,
      details: error.details,
      requestId: error.requestId,
      request: error.request,
      body: error.body,
      cause: error,
    });
  }
  throw error;
}

function failureOf({ entry, error }: ApplyFailure): NonNullable<ApplyReport['failed']> {
  const base = { document: entry.document.index, kind: entry.document.kind, name: entry.document.name };
  if (error instanceof CellplaneError) {
    return { ...base, status: error.status, code: error.code, error: error.message, ...(error.details ? { details: error.details } : {}) };
  }
  return { ...base, status: 0, code: 'client_error', error: error instanceof Error ? error.message : String(error) };
}

function printPlan(out: Output, plan: PlanEntry[], summary: PlanCounts): void {
  const paintAction = (action: unknown) => {
    if (action === 'create') return out.paint.ok('create');
    if (action === 'update') return out.paint.bold('update');
    if (action === 'conflict') return out.paint.bad('conflict');
    return out.paint.dim(String(action));
  };
  out.table(
    plan.map((entry) => ({ kind: entry.document.kind, name: entry.document.name, action: entry.action, changes: entry.changes.join(', ') })),
    [
      { key: 'kind', header: 'KIND' },
      { key: 'name', header: 'NAME' },
      { key: 'action', header: 'ACTION', format: paintAction },
      { key: 'changes', header: 'CHANGES' },
    ],
  );
  const conflicts = summary.conflict > 0 ? `, ${summary.conflict} in conflict` : '';
  out.line(`Plan: ${summary.create} to create, ${summary.update} to update, ${summary.unchanged} unchanged${conflicts}.`);
}
