import { readFile } from 'node:fs/promises';
import { isMap, isPair, isScalar, isSeq, LineCounter, parseAllDocuments, type Node } from 'yaml';
import type { z } from '@hono/zod-openapi';
import { ActionRequest } from '../modules/actions/schemas';
import { DEFAULT_SYNC_MAX_AGE_SECONDS } from '../modules/catalog-items';
import { CellRequest, DEFAULT_PLACEMENT_POLICY } from '../modules/cells/schemas';
import { EntityCreate } from '../modules/entities/schemas';
import { EntityTypeRequest } from '../modules/entity-types/schemas';
import { validateProperties, type PropertyDefinition } from '../modules/properties';
import { RelationshipTypeRequest } from '../modules/relationship-types/schemas';
import { RelationshipCreate } from '../modules/relationships/schemas';
import { redactTrigger } from '../runs/trigger-kinds';
import { CellplaneError, type CellplaneClient, type EnvRef, type Schemas } from '../sdk';
import { CliError, UsageError } from './errors';

/**
 * `cellplane apply --file f.yaml` (docs/cli-apply.md): documents of the API's
 * own request bodies, each with a `kind`, read from JSON or multi-document
 * YAML; checked whole before any request; planned against what the API holds
 * (create / update / unchanged); then applied in dependency order, stopping
 * at the first refusal.
 *
 * Documents are checked with the server's own zod request schemas, so the
 * CLI and the API cannot disagree on what a body is, and so the comparison
 * sees each body exactly as the server will store it (defaults filled,
 * display names trimmed).
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

/** An action's `timeoutMinutes` when the definition leaves it out (DECISIONS §4). */
const DEFAULT_ACTION_TIMEOUT_MINUTES = 60;

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

// --- plan ------------------------------------------------------------------------

export type PlanAction = 'create' | 'update' | 'unchanged' | 'conflict';

export interface PlanEntry {
  document: ApplyDocument;
  action: PlanAction;
  /** update: the fields that differ (request names); conflict: why the document cannot be applied. */
  changes: string[];
  /** What an update sends: a catalog item's whole definition, an entity's or relationship's differing fields. */
  update?: Record<string, unknown>;
  /** The relationship an update writes. */
  relationshipId?: string;
}

/** The JSON form of a plan row (`--json`). */
export interface PlanRow {
  document: number;
  line: number;
  kind: Kind;
  name: string;
  action: PlanAction;
  changes: string[];
}

export const planRow = (entry: PlanEntry): PlanRow => ({
  document: entry.document.index,
  line: entry.document.line,
  kind: entry.document.kind,
  name: entry.document.name,
  action: entry.action,
  changes: entry.changes,
});

const notFound = (error: unknown) => error instanceof CellplaneError && error.status === 404;

async function orAbsent<T>(lookup: Promise<T>): Promise<T | undefined> {
  try {
    return await lookup;
  } catch (error) {
    if (notFound(error)) return undefined;
    throw error;
  }
}

/**
 * The project (and, when a document needs it, the environment) must exist
 * before anything is planned: every lookup of a missing project answers 404
 * too, which would read as "create everything".
 */
async function checkTarget(client: CellplaneClient, target: EnvRef, needsEnv: boolean): Promise<void> {
  let envs: Schemas['Environment'][];
  try {
    envs = await client.GET('/{o}/{p}/envs', { params: { path: { o: target.org, p: target.project } } });
  } catch (error) {
    if (!notFound(error)) throw error;
    throw new CliError(
      `project "${target.org}/${target.project}" was not found (or this token cannot see it)`,
      'check --org and --project (or SERVICE_ORG_ID / SERVICE_PROJECT_ID, `cellplane config get currentOrg`)',
    );
  }
  if (needsEnv && !envs.some((env) => env.name === target.env)) {
    throw new CliError(
      `environment "${target.env}" was not found in project "${target.org}/${target.project}" (or this token is pinned to another)`,
      'pick another with --env, or create it first with `cellplane envs create`',
    );
  }
}

/** Two JSON values equal as JSON: key order does not count, nor keys whose value is undefined. */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const other = b as unknown[];
    return a.length === other.length && a.every((item, i) => sameJson(item, other[i]));
  }
  const left = Object.entries(a).filter(([, v]) => v !== undefined);
  const right = Object.entries(b as object).filter(([, v]) => v !== undefined);
  if (left.length !== right.length) return false;
  const byKey = new Map(right);
  return left.every(([key, value]) => byKey.has(key) && sameJson(value, byKey.get(key)));
}

/** The request fields whose stored form (left) differs from what the API holds (right). */
const differing = (fields: [string, unknown, unknown][]) => fields.filter(([, expected, current]) => !sameJson(expected, current)).map(([field]) => field);

/**
 * A catalog item's whole stored definition as the document makes it: the
 * API's PUT replaces a definition, so an optional field the document leaves
 * out stands for its default (the services' toColumns).
 */
function catalogDifferences(document: ApplyDocument, current: Record<string, unknown>): string[] {
  switch (document.kind) {
    case 'EntityType': {
      const s = document.spec;
      const syncTracked = s.syncTracked ?? false;
      return differing([
        ['displayName', s.displayName ?? null, current.displayName],
        ['states', s.states, current.states],
        ['initialState', s.initialState, current.initialState],
        ['properties', s.properties ?? [], current.properties],
        ['metrics', s.metrics ?? [], current.metrics],
        ['constraints', s.constraints ?? [], current.constraints],
        ['syncTracked', syncTracked, current.syncTracked],
        ['syncFreshness', s.syncFreshness ?? (syncTracked ? { maxAgeSeconds: DEFAULT_SYNC_MAX_AGE_SECONDS } : null), current.syncFreshness],
        ['applier', s.applier ?? null, current.applier],
      ]);
    }
    case 'RelationshipType': {
      const s = document.spec;
      return differing([
        ['displayName', s.displayName ?? null, current.displayName],
        ['from', s.from, current.fromEntityTypeName],
        ['to', s.to, current.toEntityTypeName],
        ['cardinality', s.cardinality ?? 'many-to-many', current.cardinality],
        ['states', s.states, current.states],
        ['properties', s.properties ?? [], current.properties],
        ['constraints', s.constraints ?? [], current.constraints],
      ]);
    }
    case 'Cell': {
      const s = document.spec;
      const membership = s.membership ?? { mode: 'explicit' as const };
      return differing([
        ['displayName', s.displayName ?? null, current.displayName],
        ['entityType', s.entityType, current.entityTypeName],
        ['placementPolicy', s.placementPolicy ?? DEFAULT_PLACEMENT_POLICY, current.placementPolicy],
        ['constraints', s.constraints ?? [], current.constraints],
        ['parentCells', [...new Set(s.parentCells ?? [])], current.parentCells],
        ['membership', [membership.mode, membership.mode === 'derived' ? membership.derivedFrom : null], [current.membershipMode, current.membershipDerivedFrom]],
        ['deploymentTarget', s.deploymentTarget ?? null, current.deploymentTarget],
      ]);
    }
    case 'Action': {
      const s = document.spec;
      // literal credentials come back redacted: compared as the API shows them, and written again (below)
      const shown = redactTrigger(s.trigger);
      const changes = differing([
        ['displayName', s.displayName ?? null, current.displayName],
        ['description', s.description ?? null, current.description],
        ['entityType', s.entityType, current.entityType],
        ['conditions', s.conditions ?? [], current.conditions],
        ['parameters', s.parameters ?? [], current.parameters],
        ['trigger', shown, current.trigger],
        ['onSuccess', s.onSuccess ?? null, current.onSuccess],
        ['onFailure', s.onFailure ?? null, current.onFailure],
        ['timeoutMinutes', s.timeoutMinutes ?? DEFAULT_ACTION_TIMEOUT_MINUTES, current.timeoutMinutes],
      ]);
      if (!changes.includes('trigger') && !sameJson(shown, s.trigger)) changes.push('trigger (a literal credential cannot be read back; use {{ secrets.<name> }})');
      return changes;
    }
    default:
      throw new Error(`not a catalog item: ${document.kind}`);
  }
}

/**
 * The fields an entity or relationship document sets, each compared with what
 * the API holds; the fields it leaves out are not the document's to judge.
 * Properties are compared as the API would store them: with the type's
 * defaults filled (the server's own validateProperties).
 */
function runtimeDifferences(
  spec: { state?: string; properties?: Record<string, unknown>; labels?: Record<string, string> },
  current: { state: string; properties: Record<string, unknown>; labels: Record<string, string> },
  definitions: PropertyDefinition[] | undefined,
): { changes: string[]; update: Record<string, unknown> } {
  const update: Record<string, unknown> = {};
  if (spec.state !== undefined && spec.state !== current.state) update.state = spec.state;
  if (spec.properties !== undefined) {
    const stored = definitions ? validateProperties(definitions, spec.properties, { fillDefaults: true }) : undefined;
    // values the type refuses are the API's to refuse, with its own message: sent as written
    const expected = stored?.ok ? stored.values : spec.properties;
    if (!sameJson(expected, current.properties)) update.properties = spec.properties;
  }
  if (spec.labels !== undefined && !sameJson(spec.labels, current.labels)) update.labels = spec.labels;
  return { changes: Object.keys(update), update };
}

/**
 * Looks each document up and decides what applying it would do. Reads only.
 * `documents` must be in dependency order (orderDocuments).
 */
export async function planApply(client: CellplaneClient, target: EnvRef, documents: ApplyDocument[]): Promise<PlanEntry[]> {
  const { org: o, project: p, env: envName } = target;
  await checkTarget(client, target, documents.some((d) => d.kind === 'Entity' || d.kind === 'Relationship'));

  // property definitions of a type: the file's own document when it has one (it is applied first), else the API's
  const fileTypes = new Map<string, PropertyDefinition[]>();
  for (const document of documents) {
    if (document.kind === 'EntityType' || document.kind === 'RelationshipType') fileTypes.set(`${document.kind}\0${document.spec.name}`, document.spec.properties ?? []);
  }
  const fetchedTypes = new Map<string, Promise<PropertyDefinition[] | undefined>>();
  const definitionsOf = (kind: 'EntityType' | 'RelationshipType', name: string) => {
    const key = `${kind}\0${name}`;
    if (fileTypes.has(key)) return Promise.resolve(fileTypes.get(key));
    let fetched = fetchedTypes.get(key);
    if (!fetched) {
      const params = { params: { path: { o, p, name } } };
      const lookup =
        kind === 'EntityType' ? client.GET('/{o}/{p}/entity-types/{name}', params) : client.GET('/{o}/{p}/relationship-types/{name}', params);
      fetched = orAbsent(lookup as Promise<{ properties: PropertyDefinition[] }>).then((type) => type?.properties);
      fetchedTypes.set(key, fetched);
    }
    return fetched;
  };

  const plan: PlanEntry[] = [];
  for (const document of documents) {
    switch (document.kind) {
      case 'EntityType':
      case 'RelationshipType':
      case 'Cell':
      case 'Action': {
        const item = { params: { path: { o, p, name: document.spec.name } } };
        const lookup = {
          EntityType: () => client.GET('/{o}/{p}/entity-types/{name}', item),
          RelationshipType: () => client.GET('/{o}/{p}/relationship-types/{name}', item),
          Cell: () => client.GET('/{o}/{p}/cells/{name}', item),
          Action: () => client.GET('/{o}/{p}/actions/{name}', item),
        }[document.kind];
        const current = (await orAbsent<unknown>(lookup())) as Record<string, unknown> | undefined;
        if (!current) {
          plan.push({ document, action: 'create', changes: [] });
          break;
        }
        const changes = catalogDifferences(document, current);
        plan.push(changes.length === 0 ? { document, action: 'unchanged', changes } : { document, action: 'update', changes, update: document.body });
        break;
      }
      case 'Entity': {
        const { name } = document.spec;
        const current = await orAbsent(client.GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { o, p, envName, name } } }));
        if (!current) {
          plan.push({ document, action: 'create', changes: [] });
          break;
        }
        if (current.entityTypeName !== document.spec.entityType) {
          plan.push({
            document,
            action: 'conflict',
            changes: [
              `entity "${current.name}" exists as a ${current.entityTypeName}, not a ${document.spec.entityType}; ` +
                'an entity keeps its type: delete it first (`cellplane entities delete`) or rename the document',
            ],
          });
          break;
        }
        // syncSource and lastSyncedAt are the syncing source's to move (sync stamps): set on create only
        const { changes, update } = runtimeDifferences(document.spec, current, await definitionsOf('EntityType', current.entityTypeName));
        plan.push(changes.length === 0 ? { document, action: 'unchanged', changes } : { document, action: 'update', changes, update });
        break;
      }
      case 'Relationship': {
        const { relationshipType, from, to } = document.spec;
        let current: Schemas['Relationship'] | undefined;
        for await (const relationship of client.paginate('/{o}/{p}/envs/{envName}/relationships', {
          params: { path: { o, p, envName }, query: { relationshipType, from, to } },
        })) {
          current = relationship;
          break;
        }
        if (!current) {
          plan.push({ document, action: 'create', changes: [] });
          break;
        }
        const { changes, update } = runtimeDifferences(document.spec, current, await definitionsOf('RelationshipType', relationshipType));
        plan.push(
          changes.length === 0
            ? { document, action: 'unchanged', changes, relationshipId: current.id }
            : { document, action: 'update', changes, update, relationshipId: current.id },
        );
        break;
      }
    }
  }
  return plan;
}

export interface PlanCounts {
  create: number;
  update: number;
  unchanged: number;
  conflict: number;
}

export function countPlan(plan: PlanEntry[]): PlanCounts {
  const counts: PlanCounts = { create: 0, update: 0, unchanged: 0, conflict: 0 };
  for (const entry of plan) counts[entry.action] += 1;
  return counts;
}

// --- apply -----------------------------------------------------------------------

export interface AppliedEntry {
  document: number;
  kind: Kind;
  name: string;
  action: 'created' | 'updated';
  /** The API's answer, as it sent it. */
  result: unknown;
}

/** The document the API refused, and the API's error. */
export interface ApplyFailure {
  entry: PlanEntry;
  error: unknown;
}

/**
 * Writes every create and update of `plan`, in its order, one request each.
 * Stops at the first refusal: `failure` names it, and the entries after it
 * were not sent. `onApplied` sees each write as it lands.
 */
export async function executePlan(
  client: CellplaneClient,
  target: EnvRef,
  plan: PlanEntry[],
  onApplied: (applied: AppliedEntry) => void = () => {},
): Promise<{ applied: AppliedEntry[]; failure?: ApplyFailure; notApplied: PlanEntry[] }> {
  const applied: AppliedEntry[] = [];
  const pending = plan.filter((entry) => entry.action === 'create' || entry.action === 'update');
  for (const [i, entry] of pending.entries()) {
    let result: unknown;
    try {
      result = await write(client, target, entry);
    } catch (error) {
      return { applied, failure: { entry, error }, notApplied: pending.slice(i + 1) };
    }
    const done: AppliedEntry = {
      document: entry.document.index,
      kind: entry.document.kind,
      name: entry.document.name,
      action: entry.action === 'create' ? 'created' : 'updated',
      result,
    };
    applied.push(done);
    onApplied(done);
  }
  return { applied, notApplied: [] };
}

async function write(client: CellplaneClient, target: EnvRef, entry: PlanEntry): Promise<unknown> {
  const { org: o, project: p, env: envName } = target;
  const { document } = entry;
  const create = entry.action === 'create';
  // the documents were checked with the API's own request schemas: the bodies are these types
  switch (document.kind) {
    case 'EntityType': {
      const body = document.body as Schemas['EntityTypeRequest'];
      return create
        ? client.POST('/{o}/{p}/entity-types', { params: { path: { o, p } }, body })
        : client.PUT('/{o}/{p}/entity-types/{name}', { params: { path: { o, p, name: document.spec.name } }, body });
    }
    case 'RelationshipType': {
      const body = document.body as Schemas['RelationshipTypeRequest'];
      return create
        ? client.POST('/{o}/{p}/relationship-types', { params: { path: { o, p } }, body })
        : client.PUT('/{o}/{p}/relationship-types/{name}', { params: { path: { o, p, name: document.spec.name } }, body });
    }
    case 'Cell': {
      const body = document.body as Schemas['CellRequest'];
      return create
        ? client.POST('/{o}/{p}/cells', { params: { path: { o, p } }, body })
        : client.PUT('/{o}/{p}/cells/{name}', { params: { path: { o, p, name: document.spec.name } }, body });
    }
    case 'Action': {
      const body = document.body as Schemas['ActionRequest'];
      return create
        ? client.POST('/{o}/{p}/actions', { params: { path: { o, p } }, body })
        : client.PUT('/{o}/{p}/actions/{name}', { params: { path: { o, p, name: document.spec.name } }, body });
    }
    case 'Entity':
      return create
        ? client.POST('/{o}/{p}/envs/{envName}/entities', { params: { path: { o, p, envName } }, body: document.body as Schemas['EntityCreate'] })
        : client.PUT('/{o}/{p}/envs/{envName}/entities/{name}', {
            params: { path: { o, p, envName, name: document.spec.name } },
            body: entry.update as Schemas['EntityUpdate'],
          });
    case 'Relationship':
      return create
        ? client.POST('/{o}/{p}/envs/{envName}/relationships', { params: { path: { o, p, envName } }, body: document.body as Schemas['RelationshipCreate'] })
        : client.PUT('/{o}/{p}/envs/{envName}/relationships/{id}', {
            params: { path: { o, p, envName, id: entry.relationshipId! } },
            body: entry.update as Schemas['RelationshipUpdate'],
          });
  }
}
