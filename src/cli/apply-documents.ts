import { readFile } from 'node:fs/promises';
import { isMap, isPair, isScalar, isSeq, LineCounter, parseAllDocuments, type Node } from 'yaml';
import type { z } from '@hono/zod-openapi';
import { ActionRequest } from '../modules/actions/schemas';
import { CellRequest } from '../modules/cells/schemas';
import { EntityCreate } from '../modules/entities/schemas';
import { EntityTypeRequest } from '../modules/entity-types/schemas';
import { RelationshipTypeRequest } from '../modules/relationship-types/schemas';
import { RelationshipCreate } from '../modules/relationships/schemas';
import { UsageError } from './errors';

/**
 * The documents of `cellplane apply` (docs/cli-apply.md): read from a file or
 * stdin, as JSON or multi-document YAML; each checked with the server's own zod
 * request schema, every problem reported with its document and line; then put
 * in dependency order. Planning and applying them is ./apply.ts.
 */

/** Dependency order: a kind may refer only to kinds before it. */
export const KIND_ORDER = ['EntityType', 'RelationshipType', 'Cell', 'Action', 'Entity', 'Relationship'] as const;
export type Kind = (typeof KIND_ORDER)[number];

const SCHEMAS = {
  EntityType: EntityTypeRequest,
  RelationshipType: RelationshipTypeRequest,
  Cell: CellRequest,
  Action: ActionRequest,
  Entity: EntityCreate,
  // the create body of a relationship has no `kind`: the document's is taken off before the check
  Relationship: RelationshipCreate,
} satisfies Record<Kind, z.ZodType>;

/** Keys a reader might expect to place a document somewhere; the target comes from --org/--project/--env only. */
const LOCATION_KEYS = new Set(['org', 'organization', 'project', 'env', 'environment', 'envName', 'metadata', 'namespace']);

interface DocumentBase {
  /** 1-based position in the file (an item of a top-level list counts as one document). */
  index: number;
  /** 1-based line where the document's content starts. */
  line: number;
  /** How the plan names it: the item's name; a relationship's `from -[type]-> to`. */
  name: string;
  /** The request body as written; a Relationship's without `kind`. */
  body: Record<string, unknown>;
}

export type ApplyDocument =
  | (DocumentBase & { kind: 'EntityType'; spec: z.output<typeof EntityTypeRequest> })
  | (DocumentBase & { kind: 'RelationshipType'; spec: z.output<typeof RelationshipTypeRequest> })
  | (DocumentBase & { kind: 'Cell'; spec: z.output<typeof CellRequest> })
  | (DocumentBase & { kind: 'Action'; spec: z.output<typeof ActionRequest> })
  | (DocumentBase & { kind: 'Entity'; spec: z.output<typeof EntityCreate> })
  | (DocumentBase & { kind: 'Relationship'; spec: z.output<typeof RelationshipCreate> });

// --- reading -------------------------------------------------------------------

/** The file's text; `-` reads standard input. A file that cannot be read is a usage error. */
export async function readApplySource(path: string, stdin: AsyncIterable<Buffer | string> = process.stdin): Promise<{ text: string; label: string }> {
  if (path === '-') {
    let text = '';
    for await (const chunk of stdin) text += typeof chunk === 'string' ? chunk : chunk.toString('utf8');
    return { text, label: 'stdin' };
  }
  try {
    return { text: await readFile(path, 'utf8'), label: path };
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message;
    throw new UsageError(`cannot read ${path}: ${reason}. Give --file a YAML or JSON file, or - to read standard input.`);
  }
}

interface RawDocument {
  index: number;
  line: number;
  value: unknown;
  node: Node | null;
}

interface Problem {
  index: number;
  line: number;
  what?: string;
  message: string;
}

/**
 * Reads every document of `text` and checks each against its kind's request
 * schema. JSON is read by the same YAML 1.2 parser (JSON is YAML), so both
 * report errors with line and column. A top-level list is a list of
 * documents. Everything wrong in the file is reported at once, as one
 * UsageError; nothing has been sent by then.
 */
export function parseApplyDocuments(text: string, label: string): ApplyDocument[] {
  const lineCounter = new LineCounter();
  const lineOf = (offset: number) => lineCounter.linePos(offset).line;
  const problems: Problem[] = [];
  const raw: RawDocument[] = [];
  // prettyErrors off: its context lines would quote the file, and a line of it may hold a credential
  const parsed = parseAllDocuments(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const yamlDocuments = Array.isArray(parsed) ? parsed : [];
  for (const document of yamlDocuments) {
    if (document.errors.length > 0) {
      for (const error of document.errors) {
        const { line, col } = lineCounter.linePos(error.pos[0]);
        problems.push({ index: 0, line, message: `${error.message.replace(/\s+at line \d+.*$/s, '')} (line ${line}, column ${col})` });
      }
      continue;
    }
    const contents = document.contents as Node | null;
    let value: unknown;
    try {
      value = document.toJS({ maxAliasCount: 100 });
    } catch (error) {
      // an alias bomb (excessive alias count), or a tag the parser cannot resolve
      const line = lineOf(contents?.range?.[0] ?? document.range[0]);
      problems.push({ index: 0, line, message: `${(error as Error).message} (document starting at line ${line})` });
      continue;
    }
    if (value === null || value === undefined) continue; // an empty document: `---` at the end, or comments only
    if (Array.isArray(value) && isSeq(contents)) {
      value.forEach((item, i) => {
        const node = contents.items[i] as Node | undefined;
        raw.push({ index: raw.length + 1, line: node?.range ? lineOf(node.range[0]) : lineOf(contents.range?.[0] ?? 0), value: item, node: node ?? null });
      });
    } else {
      raw.push({ index: raw.length + 1, line: lineOf(contents?.range?.[0] ?? document.range[0]), value, node: contents });
    }
  }
  if (problems.length > 0) throw invalidFile(label, problems, 'is not valid YAML or JSON');
  if (raw.length === 0) throw new UsageError(`${label} holds no documents: give one or more, each with a kind (${KIND_ORDER.join(', ')}).`);

  const documents: ApplyDocument[] = [];
  const seen = new Map<string, ApplyDocument>();
  for (const item of raw) {
    const document = checkDocument(item, problems, lineOf);
    if (!document) continue;
    const key = identity(document);
    const first = seen.get(key);
    if (first) {
      problems.push({ index: item.index, line: item.line, what: describeDocument(document), message: `the same ${document.kind} as document ${first.index} (line ${first.line}): give each once` });
      continue;
    }
    seen.set(key, document);
    documents.push(document);
  }
  if (problems.length > 0) throw invalidFile(label, problems, `has ${problems.length === 1 ? 'a document' : 'documents'} that cannot be applied`);
  return documents;
}

function checkDocument(item: RawDocument, problems: Problem[], lineOf: (offset: number) => number): ApplyDocument | undefined {
  const problem = (message: string, what?: string, line = item.line) => problems.push({ index: item.index, line, what, message });
  const { value } = item;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    problem(`a document is a mapping with a kind (${KIND_ORDER.join(', ')}), not ${Array.isArray(value) ? 'a list' : typeof value === 'object' ? 'null' : `a ${typeof value}`}`);
    return undefined;
  }
  const record = value as Record<string, unknown>;
  const kind = record.kind;
  if (kind === undefined) return void problem(`kind is missing: one of ${KIND_ORDER.join(', ')}`);
  if (typeof kind !== 'string' || !(KIND_ORDER as readonly string[]).includes(kind)) {
    return void problem(`kind ${JSON.stringify(kind)} is not one of ${KIND_ORDER.join(', ')}`, undefined, lineAt(item, ['kind'], lineOf));
  }
  const body: Record<string, unknown> = { ...record };
  if (kind === 'Relationship') delete body.kind;
  const result = SCHEMAS[kind as Kind].safeParse(body);
  const what = `${kind}${typeof record.name === 'string' ? ` "${record.name}"` : ''}`;
  if (!result.success) {
    for (const issue of result.error.issues) {
      const path = issue.path.filter((segment): segment is string | number => typeof segment !== 'symbol');
      if (issue.code === 'unrecognized_keys') {
        for (const key of (issue as { keys: string[] }).keys) {
          const location = path.length === 0 && LOCATION_KEYS.has(key) ? ': documents carry no location; --org, --project and --env decide where they go' : '';
          const owner = path.length > 0 ? `${path.join('.')} of ${article(kind)}` : article(kind);
          problem(`${JSON.stringify(key)} is not a field of ${owner}${location}`, what, lineAt(item, [...path, key], lineOf));
        }
        continue;
      }
      problem(`${path.length > 0 ? path.join('.') : '(document)'}: ${issue.message}`, what, lineAt(item, path, lineOf));
    }
    return undefined;
  }
  const spec = result.data as Record<string, unknown>;
  const name =
    kind === 'Relationship'
      ? `${spec.from as string} -[${spec.relationshipType as string}]-> ${spec.to as string}`
      : (spec.name as string);
  return { index: item.index, line: item.line, kind, name, body, spec } as ApplyDocument;
}

/** The line of the deepest node of `path` the document has (the document's own line when none). */
function lineAt(item: RawDocument, path: (string | number)[], lineOf: (offset: number) => number): number {
  let node: unknown = item.node;
  let line = item.line;
  for (const segment of path) {
    let next: unknown;
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(segment));
      next = pair ? (pair.value ?? pair.key) : undefined;
      if (pair && isScalar(pair.key) && pair.key.range) line = lineOf(pair.key.range[0]);
    } else if (isSeq(node) && typeof segment === 'number') {
      next = node.items[segment];
    }
    if (!next) break;
    const range = (next as Node).range;
    if (range) line = lineOf(range[0]);
    node = next;
  }
  return line;
}

const article = (kind: string) => `${/^[AEIOU]/.test(kind) ? 'an' : 'a'} ${kind}`;

function invalidFile(label: string, problems: Problem[], summary: string): UsageError {
  const ordered = [...problems].sort((a, b) => a.index - b.index || a.line - b.line);
  const lines = ordered.map((p) => {
    const where = p.index === 0 ? `line ${p.line}` : `document ${p.index} (line ${p.line}${p.what ? `, ${p.what}` : ''})`;
    return `  ${where}: ${p.message}`;
  });
  return new UsageError(`${label} ${summary}; nothing was sent:\n${lines.join('\n')}\nFix the file and run apply again.`);
}

/** What makes two documents the same object: catalog items and entities by name, relationships by (type, from, to). */
function identity(document: ApplyDocument): string {
  if (document.kind === 'Relationship') return `Relationship\0${document.spec.relationshipType}\0${document.spec.from}\0${document.spec.to}`;
  return `${document.kind}\0${document.spec.name}`;
}

export const describeDocument = (document: Pick<ApplyDocument, 'kind' | 'name'>) => `${document.kind} "${document.name}"`;

// --- order -----------------------------------------------------------------------

/**
 * Dependency order: kinds in KIND_ORDER, file order within a kind, except that
 * a cell comes after the cells of the file it names as parents. A cycle of
 * parents within the file cannot be ordered (nor would the API accept it).
 */
export function orderDocuments(documents: ApplyDocument[]): ApplyDocument[] {
  const ordered: ApplyDocument[] = [];
  for (const kind of KIND_ORDER) {
    const ofKind = documents.filter((document) => document.kind === kind);
    ordered.push(...(kind === 'Cell' ? orderCells(ofKind as CellDocument[]) : ofKind));
  }
  return ordered;
}

type CellDocument = Extract<ApplyDocument, { kind: 'Cell' }>;

function orderCells(cells: CellDocument[]): CellDocument[] {
  const byName = new Map(cells.map((cell) => [cell.spec.name, cell]));
  const ordered: CellDocument[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (cell: CellDocument, trail: string[]) => {
    const mark = state.get(cell.spec.name);
    if (mark === 'done') return;
    if (mark === 'visiting') {
      const cycle = [...trail.slice(trail.indexOf(cell.spec.name)), cell.spec.name];
      throw new UsageError(
        `cells ${cycle.map((name) => `"${name}"`).join(' → ')} name each other as parent cells (document ${cell.index}, line ${cell.line}); ` +
          'a cell cannot sit beneath itself: remove one of these parentCells entries.',
      );
    }
    state.set(cell.spec.name, 'visiting');
    for (const parent of cell.spec.parentCells ?? []) {
      const parentDocument = byName.get(parent);
      if (parentDocument) visit(parentDocument, [...trail, cell.spec.name]);
    }
    state.set(cell.spec.name, 'done');
    ordered.push(cell);
  };
  for (const cell of cells) visit(cell, []);
  return ordered;
}
