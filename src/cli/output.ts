/**
 * What the CLI prints. Results go to stdout: with --json exactly the API's
 * JSON, otherwise aligned tables or `key: value` records for people.
 * Everything that is not the result (hints, progress, warnings, errors)
 * goes to stderr, so `cellplane … --json | jq` always reads clean JSON.
 *
 * Colour (docs/cli.md, "Output"): on when the stream is a terminal, off when
 * NO_COLOR is set to anything non-empty (no-color.org); FORCE_COLOR (not
 * `0`) turns it on for a stream that is not a terminal, which is how the
 * tests see it. NO_COLOR wins over FORCE_COLOR.
 */

export interface Column {
  key: string;
  header: string;
  format?: (value: unknown, row: Record<string, unknown>) => string;
}

export interface Painter {
  ok(s: string): string;
  bad(s: string): string;
  dim(s: string): string;
  bold(s: string): string;
}

export interface Output {
  readonly jsonMode: boolean;
  /** stdout: JSON.stringify(value, null, 2) + '\n' — exactly the API's JSON. */
  json(value: unknown): void;
  table(rows: Record<string, unknown>[], columns: Column[]): void;
  /** stdout. */
  line(text: string): void;
  /** stderr: hints, progress, summaries that are not the result. */
  info(text: string): void;
  /** stderr, "warning: " prefix, yellow when colour is on. */
  warn(text: string): void;
  /** Off with NO_COLOR or when stdout is not a terminal (FORCE_COLOR forces it on). */
  readonly colorEnabled: boolean;
  readonly stderrIsTTY: boolean;
  /** Colours for stdout. */
  paint: Painter;
  /** Colours for stderr (its own terminal test). */
  paintErr: Painter;
}

export interface Stream {
  write(text: string): unknown;
  isTTY?: boolean;
}

export interface OutputOptions {
  json: boolean;
  env: Record<string, string | undefined>;
  stdout: Stream;
  stderr: Stream;
}

const ANSI = { reset: '\x1b[0m', bold: '\x1b[1m', dim: '\x1b[2m', red: '\x1b[31m', green: '\x1b[32m', yellow: '\x1b[33m' };

/** Whether a stream gets colour: NO_COLOR (non-empty) never, FORCE_COLOR (non-empty, not `0`) always, else when it is a terminal. */
export function colourFor(stream: Stream, env: Record<string, string | undefined>): boolean {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '' && env.FORCE_COLOR !== '0') return true;
  return stream.isTTY === true && env.TERM !== 'dumb';
}

function painter(enabled: boolean): Painter {
  const wrap = (code: string) => (s: string) => (enabled && s !== '' ? `${code}${s}${ANSI.reset}` : s);
  return { ok: wrap(ANSI.green), bad: wrap(ANSI.red), dim: wrap(ANSI.dim), bold: wrap(ANSI.bold) };
}

// eslint-disable-next-line no-control-regex
const ANSI_PATTERN = /\x1b\[[0-9;]*m/g;
/** The width of a cell as a terminal shows it: without colour codes, in code points. */
const visibleWidth = (text: string) => [...text.replace(ANSI_PATTERN, '')].length;

export function createOutput(options: OutputOptions): Output {
  const colorEnabled = colourFor(options.stdout, options.env);
  const stderrColour = colourFor(options.stderr, options.env);
  const paint = painter(colorEnabled);
  const paintErr = painter(stderrColour);
  const yellow = (s: string) => (stderrColour ? `${ANSI.yellow}${s}${ANSI.reset}` : s);
  return {
    jsonMode: options.json,
    colorEnabled,
    stderrIsTTY: options.stderr.isTTY === true,
    paint,
    paintErr,
    json(value) {
      options.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
    },
    line(text) {
      options.stdout.write(`${text}\n`);
    },
    info(text) {
      options.stderr.write(`${text}\n`);
    },
    warn(text) {
      options.stderr.write(`${yellow('warning:')} ${text}\n`);
    },
    table(rows, columns) {
      options.stdout.write(renderTable(rows, columns, paint));
    },
  };
}

/** Columns two spaces apart, padded to the widest cell; the header in bold; the last column not padded. */
export function renderTable(rows: Record<string, unknown>[], columns: Column[], paint: Painter): string {
  const cells = rows.map((row) => columns.map((column) => (column.format ? column.format(row[column.key], row) : formatCell(row[column.key]))));
  const widths = columns.map((column, i) => Math.max(visibleWidth(column.header), ...cells.map((line) => visibleWidth(line[i]!))));
  const render = (line: string[], style: (s: string) => string = (s) => s) =>
    line
      .map((cell, i) => (i === line.length - 1 ? style(cell) : style(cell) + ' '.repeat(widths[i]! - visibleWidth(cell))))
      .join('  ')
      .trimEnd();
  return [render(columns.map((c) => c.header), paint.bold), ...cells.map((line) => render(line))].map((line) => `${line}\n`).join('');
}

/** A value in a table cell or a record: `-` for nothing, lists joined by commas, maps as `k=v`, other objects as compact JSON. */
export function formatCell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  if (typeof value === 'string') return value.replace(/[\r\n\t]+/g, ' ');
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return value.length === 0 ? '-' : value.every((item) => typeof item !== 'object' || item === null) ? value.join(',') : JSON.stringify(value);
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0) return '-';
    if (entries.every(([, item]) => typeof item !== 'object' || item === null)) return entries.map(([key, item]) => `${key}=${String(item)}`).join(',');
    return JSON.stringify(value);
  }
  return String(value);
}

/** One resource for people: `key: value` lines, the keys aligned; `fields` picks and orders them (default: every key). */
export function showRecord(out: Output, record: Record<string, unknown>, fields?: string[]): void {
  const keys = fields ?? Object.keys(record);
  const width = Math.max(0, ...keys.map((key) => key.length));
  for (const key of keys) out.line(`${out.paint.bold(`${key}:`)}${' '.repeat(width - key.length + 1)}${formatCell(record[key])}`);
}

/** The colour of a state or run status: green when it went well, red when not. */
export function paintStatus(paint: Painter, status: string): string {
  if (['succeeded', 'running', 'in-sync'].includes(status)) return paint.ok(status);
  if (['failed', 'cancelled', 'stale'].includes(status)) return paint.bad(status);
  return status;
}
