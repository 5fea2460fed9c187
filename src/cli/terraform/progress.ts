import type { ImportPhase, ImportReport } from './run';

/**
 * What a person sees while an import runs, on stderr (stdout stays for the
 * result): a bar redrawn in place on a terminal when the state has more
 * than BAR_THRESHOLD instances, plain lines otherwise, nothing with --json.
 */

export const BAR_THRESHOLD = 300;
const BAR_WIDTH = 30;

const LABELS: Record<ImportPhase, string> = {
  read: 'reading state',
  scan: 'reading catalog',
  'entity-types': 'entity types',
  'relationship-types': 'relationship types',
  entities: 'entities',
  relationships: 'relationships',
  deletes: 'deletes',
};

export interface ProgressOutput {
  write(text: string): unknown;
  isTTY?: boolean;
}

export interface ProgressDisplay {
  onProgress(phase: ImportPhase, done: number, total: number): void;
  /** Ends a bar's line; call once the import returns or throws. */
  finish(): void;
  /** `bar`, `lines` or `silent`: decided once the state is read. */
  readonly mode: 'pending' | 'bar' | 'lines' | 'silent';
}

export function createProgress(options: { output: ProgressOutput; json?: boolean }): ProgressDisplay {
  const { output } = options;
  let mode: ProgressDisplay['mode'] = options.json ? 'silent' : 'pending';
  let drawn = false;
  let last = '';
  /** The last tenth of a phase a line was printed for, so long phases print about ten lines. */
  const printedStep = new Map<ImportPhase, number>();

  const bar = (phase: ImportPhase, done: number, total: number) => {
    const fraction = total > 0 ? Math.min(1, done / total) : 0;
    const filled = Math.round(fraction * BAR_WIDTH);
    const counts = total > 0 ? `${done}/${total} ${Math.floor(fraction * 100)}%` : `${done}`;
    return `[${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ${LABELS[phase]} ${counts}`;
  };

  return {
    get mode() {
      return mode;
    },
    onProgress(phase, done, total) {
      if (mode === 'silent') return;
      if (mode === 'pending') {
        if (phase !== 'read' || total === 0) return;
        mode = output.isTTY === true && total > BAR_THRESHOLD ? 'bar' : 'lines';
      }
      if (mode === 'bar') {
        const line = bar(phase, done, total);
        if (line === last) return;
        last = line;
        // \r back to the start, \x1b[K clears what a longer previous line left
        output.write(`\r${line}\x1b[K`);
        drawn = true;
        return;
      }
      if (total === 0) return;
      const step = done >= total ? 10 : Math.floor((done / total) * 10);
      if (step === 0 || (printedStep.get(phase) ?? 0) >= step) return;
      printedStep.set(phase, step);
      output.write(`import: ${LABELS[phase]} ${done}/${total}\n`);
    },
    finish() {
      if (mode === 'bar' && drawn) output.write('\n');
      drawn = false;
    },
  };
}

const pad = (text: string, width: number) => text + ' '.repeat(Math.max(0, width - text.length));

/** Names listed under a count, at most `limit` of them. */
function listNames(label: string, names: string[], limit: number): string[] {
  if (names.length === 0) return [];
  const shown = names.slice(0, limit).map((name) => `    ${name}`);
  if (names.length > limit) shown.push(`    … and ${names.length - limit} more (--json lists them all)`);
  return [`  ${label}:`, ...shown];
}

/** The summary people read at the end (the --json output is the report itself). */
export function formatSummary(report: ImportReport, options: { namesPerList?: number } = {}): string {
  const limit = options.namesPerList ?? 20;
  const would = report.dryRun ? 'would ' : '';
  const { entities, relationships } = report;
  const rows: [string, string, string][] = [
    ['', 'entities', 'relationships'],
    [`${would}create`, String(entities.created.length), String(relationships.created)],
    [`${would}update`, String(entities.updated.length), String(relationships.updated)],
    ['unchanged', String(entities.unchanged), String(relationships.unchanged)],
    [`${would}delete`, String(entities.deleted.length), String(relationships.deleted)],
    ['conflict', String(entities.conflicts.length), String(relationships.conflicts)],
    ['skipped', String(entities.invalid.length), String(relationships.skipped)],
  ];
  const widths = [0, 1, 2].map((column) => Math.max(...rows.map((row) => row[column]!.length)));
  const lines = [
    `${report.dryRun ? 'Dry run: nothing was changed. ' : ''}Terraform state ${report.lineage} serial ${report.serial} → source ${report.source}`,
    `${report.instances} instances of ${report.resources} managed resources; ${report.dataSourceInstancesSkipped} data-source instances skipped`,
    '',
    ...rows.map((row) => `  ${pad(row[0], widths[0]!)}  ${row[1].padStart(widths[1]!)}  ${row[2].padStart(widths[2]!)}`),
    '',
  ];
  if (report.entityTypes.created.length > 0) lines.push(`entity types ${report.dryRun ? 'to create' : 'created'}: ${report.entityTypes.created.join(', ')}`);
  for (const type of report.entityTypes.extended) lines.push(`entity type ${type.name} ${would}gain properties: ${type.added.join(', ')}`);
  if (report.relationshipTypes.created.length > 0) lines.push(`relationship types ${report.dryRun ? 'to create' : 'created'}: ${report.relationshipTypes.created.join(', ')}`);
  for (const type of report.relationshipTypes.unusable) lines.push(`relationship type ${type.name} not used: ${type.reason}`);
  lines.push(
    ...listNames(`${would}create`, entities.created, limit),
    ...listNames(`${would}update`, entities.updated, limit),
    ...listNames(`${would}delete`, entities.deleted, limit),
  );
  if (entities.conflicts.length > 0) {
    lines.push('  conflicts (not written: another owner has these names):');
    for (const conflict of entities.conflicts.slice(0, limit)) lines.push(`    ${conflict.name}: ${conflict.reason}`);
    if (entities.conflicts.length > limit) lines.push(`    … and ${entities.conflicts.length - limit} more (--json lists them all)`);
  }
  if (entities.invalid.length > 0) {
    lines.push('  skipped (the entity type refuses their values):');
    for (const invalid of entities.invalid.slice(0, limit)) lines.push(`    ${invalid.name}: ${invalid.reason}`);
    if (entities.invalid.length > limit) lines.push(`    … and ${entities.invalid.length - limit} more (--json lists them all)`);
  }
  for (const skipped of report.skippedProperties) {
    lines.push(`property ${skipped.entityType}.${skipped.property} left out of ${skipped.count} ${skipped.count === 1 ? 'entity' : 'entities'}: ${skipped.reason}`);
  }
  if (report.deletion.exceeded) {
    lines.push(
      `the import would delete ${report.deletion.count} entities, more than the limit of ${report.deletion.limit}: ` +
        `a real run refuses; rerun with --max-delete ${report.deletion.count} or --force`,
    );
  }
  return `${lines.join('\n').replace(/\n+$/, '')}\n`;
}
