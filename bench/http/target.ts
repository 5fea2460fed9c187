/**
 * What the parts of `npm run bench -- http` share: a running `npm start`
 * child process and a tenant in it, and the rows they print.
 */

/**
 * One of the app's statements, taken from its query builders for a bare
 * server to send (./server.ts, statementOf): its SQL text and its parameters
 * in order, a value or the name of a placeholder filled per request (`json`
 * where its column is jsonb).
 */
export interface LeastWorkStatement {
  text: string;
  params: ({ value: unknown } | { placeholder: string; json: boolean })[];
}

/** A statement's values: its constants, and its placeholders filled from `values` (a Date as ISO text, a jsonb column's value as JSON). */
export const statementValues = (statement: LeastWorkStatement, values: Record<string, unknown>): unknown[] =>
  statement.params.map((param) => {
    if ('value' in param) return param.value;
    const value = values[param.placeholder];
    if (param.json) return JSON.stringify(value);
    return value instanceof Date ? value.toISOString() : value;
  });

/** A `npm start` child process serving the API over real HTTP. */
export interface HttpTarget {
  /** e.g. http://127.0.0.1:41234 */
  url: string;
  /** The child process's pid: its CPU time and RSS are read from /proc/<pid>/. */
  pid: number;
  /** An owner service token of `org`, unpinned and unscoped. */
  token: string;
  org: string;
  project: string;
  /** `/${org}/${project}/envs/default` */
  env: string;
  /** Which database the child runs on, for the printed label: 'postgres' or 'pglite'. */
  database: 'postgres' | 'pglite';
}

/** One printed row: a measure beside its floor from the same run, and the target for the ratio. */
export interface Row {
  measure: string;
  /** The app's figure, in `unit`. */
  value: number;
  /** The floor's figure in the same unit, measured in the same run. */
  floor: number;
  unit: string;
  /** value ÷ floor */
  ratio: number;
  /** e.g. '≥ 0.7×' or '≤ 1.5×' */
  target: string;
  met: boolean;
  /** Anything the reader needs to judge the row (sample sizes, what the floor is). */
  note?: string;
}

/** openPostgres's pool size (src/node/database.ts), which `npm start` uses: the bench's own servers use it too. */
export const APP_POOL_SIZE = 10;

/** The target column of a row that only informs (a floor's own cost, say): printed with no PASS or MISS. */
export const NOT_A_TARGET = '–';

/** A row that informs, beside the targets: value ÷ floor, judged against nothing. */
export function informs(measure: string, value: number, floor: number, unit: string, note?: string): Row {
  return { measure, value, floor, unit, ratio: value / floor, target: NOT_A_TARGET, met: true, note };
}

/** A row whose target is a lower bound on value ÷ floor (throughputs). */
export function atLeast(measure: string, value: number, floor: number, unit: string, bound: number, note?: string): Row {
  const ratio = value / floor;
  return { measure, value, floor, unit, ratio, target: `≥ ${bound}×`, met: ratio >= bound, note };
}

/** A row whose target is an upper bound on value ÷ floor (latencies, costs). */
export function atMost(measure: string, value: number, floor: number, unit: string, bound: number, note?: string): Row {
  const ratio = value / floor;
  return { measure, value, floor, unit, ratio, target: `≤ ${bound}×`, met: ratio <= bound, note };
}

/**
 * A titled table: the first column left-aligned, the others right-aligned,
 * each as wide as its widest cell; `notes[i]`, when given, printed under
 * row i.
 */
export function printColumns(title: string, titles: string[], cells: string[][], notes: (string | undefined)[] = []): void {
  const widths = titles.map((text, i) => Math.max(text.length, ...cells.map((cell) => cell[i]!.length)));
  const line = (cell: string[]) => cell.map((text, i) => (i === 0 ? text.padEnd(widths[i]!) : text.padStart(widths[i]! + 3))).join('');
  console.log(`\n${title}`);
  console.log(line(titles));
  console.log('-'.repeat(line(titles).length));
  for (const [i, cell] of cells.entries()) {
    console.log(line(cell));
    if (notes[i]) console.log(`    ${notes[i]}`);
  }
}

/**
 * One API call over HTTP with the target's token. The body is read and the
 * status checked, so a bench never times errors without saying so.
 */
export async function callApi(target: HttpTarget, method: string, path: string, status: number, body?: unknown): Promise<unknown> {
  const headers: Record<string, string> = { authorization: `Bearer ${target.token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${target.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== status) throw new Error(`${method} ${path}: expected ${status}, got ${res.status}: ${text}`);
  return text.length ? JSON.parse(text) : undefined;
}
