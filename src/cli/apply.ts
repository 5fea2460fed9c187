import { DEFAULT_SYNC_MAX_AGE_SECONDS } from '../modules/catalog-items';
import { DEFAULT_PLACEMENT_POLICY } from '../modules/cells/schemas';
import { validateProperties, type PropertyDefinition } from '../modules/properties';
import { redactTrigger } from '../runs/trigger-kinds';
import { CellplaneError, type CellplaneClient, type EnvRef, type Schemas } from '../sdk';
import type { ApplyDocument, Kind } from './apply-documents';
import { CliError } from './errors';

/**
 * `cellplane apply --file f.yaml` (docs/cli-apply.md): documents of the API's
 * own request bodies, each with a `kind`, read from JSON or multi-document
 * YAML and checked whole before any request (./apply-documents.ts); here,
 * planned against what the API holds
 * (create / update / unchanged); then applied in dependency order, stopping
 * at the first refusal.
 *
 * Documents are checked with the server's own zod request schemas, so the
 * CLI and the API cannot disagree on what a body is, and so the comparison
 * sees each body exactly as the server will store it (defaults filled,
 * display names trimmed).
 */

// --- plan ------------------------------------------------------------------------

/** An action's `timeoutMinutes` when the definition leaves it out (DECISIONS §4). */
const DEFAULT_ACTION_TIMEOUT_MINUTES = 60;

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
