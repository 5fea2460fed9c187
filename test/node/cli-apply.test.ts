import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { countPlan, executePlan, planApply, planRow, type PlanEntry } from '../../src/cli/apply';
import { orderDocuments, parseApplyDocuments, type ApplyDocument } from '../../src/cli/apply-documents';
import { CliError, UsageError } from '../../src/cli/errors';
import { CellplaneError, createClient, type CellplaneClient, type EnvRef } from '../../src/sdk';
import { createCliHome, runCli, target, type CliHome } from '../support/cli';
import { createTenant, seedToken, uniqueSlug, type Tenant } from '../support/fixtures';
import { createTestApi, TEST_API_BASE_URL, type TestApi } from '../support/node-app';
import { usingPostgres } from '../support/node-database';

const fixture = (name: string) => readFileSync(new URL(`../fixtures/apply/${name}`, import.meta.url), 'utf8');
const parse = (text: string, label = 'f.yaml') => orderDocuments(parseApplyDocuments(text, label));
const usageErrorOf = (run: () => unknown): UsageError => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(UsageError);
    return error as UsageError;
  }
  throw new Error('expected a UsageError');
};
const rows = (plan: PlanEntry[]) => plan.map((entry) => [entry.document.kind, entry.document.name, entry.action, entry.changes]);

describe('apply: reading documents', () => {
  it('reads every document of a multi-document YAML file, with its position and line, skipping empty ones', () => {
    const documents = parseApplyDocuments(fixture('platform.yaml'), 'platform.yaml');
    expect(documents.map((d) => [d.index, d.kind, d.name])).toEqual([
      [1, 'EntityType', 'cluster'],
      [2, 'Cell', 'eu-west'],
      [3, 'Cell', 'eu'],
      [4, 'Relationship', 'payments:api -[runs-on]-> eu-west/k8s-1'],
      [5, 'Entity', 'eu-west/k8s-1'],
      [6, 'Entity', 'payments:api'],
      [7, 'Action', 'drain'],
      [8, 'Action', 'scale'],
      [9, 'EntityType', 'service'],
      [10, 'RelationshipType', 'runs-on'],
    ]);
    // the line of each document's first key, after its comments and `---`
    const lines = fixture('platform.yaml').split('\n');
    for (const document of documents) expect(lines[document.line - 1]).toMatch(/^kind: /);
    expect(documents[0]!.line).toBe(5);
  });

  it('sends the body as written, and a relationship without its kind (the create body has none)', () => {
    const documents = parseApplyDocuments(fixture('platform.yaml'), 'platform.yaml');
    const relationship = documents.find((d) => d.kind === 'Relationship')!;
    expect(relationship.body).toEqual({ relationshipType: 'runs-on', from: 'payments:api', to: 'eu-west/k8s-1', labels: { zone: 'a' } });
    const action = documents.find((d) => d.kind === 'Action' && d.name === 'drain')!;
    expect(action.body.kind).toBe('Action');
    // the API's schema filled the defaults in the parsed form only
    expect((action.body.trigger as Record<string, unknown>).method).toBeUndefined();
    expect((action.spec as { trigger: { method: string } }).trigger.method).toBe('POST');
  });

  it('reads a JSON file: a list of documents, or one document', () => {
    const list = parseApplyDocuments(fixture('services.json'), 'services.json');
    expect(list.map((d) => [d.index, d.line, d.kind, d.name])).toEqual([
      [1, 2, 'EntityType', 'queue'],
      [2, 9, 'Entity', 'orders'],
      [3, 15, 'Entity', 'refunds'],
    ]);
    const one = parseApplyDocuments('{\n\t"kind": "Entity", "entityType": "queue", "name": "a\\/b"\n}\n', 'one.json');
    expect(one.map((d) => [d.kind, d.name, d.line])).toEqual([['Entity', 'a/b', 1]]);
  });

  it('reports a syntax error with its line and column, and quotes nothing of the file', () => {
    const error = usageErrorOf(() => parseApplyDocuments('kind: EntityType\nname: vm\nstates: [up\n---\nkind: Cell\n', 'bad.yaml'));
    expect(error.message).toMatch(/^bad\.yaml is not valid YAML or JSON; nothing was sent:\n  line \d+: .+ \(line \d+, column \d+\)/);
    expect(error.message).not.toContain('states: [up');
    const json = usageErrorOf(() => parseApplyDocuments('{\n  "kind": "Entity",\n  "name": "x",,\n}', 'bad.json'));
    expect(json.message).toMatch(/line 3, column \d+/);
    expect(() => parseApplyDocuments('a: 1\na: 2\n', 'dup.yaml')).toThrow(/unique.*line 2, column 1/);
  });

  it('checks every document before anything is sent, and names each bad one by position, line and field', () => {
    const error = usageErrorOf(() => parseApplyDocuments(fixture('invalid.yaml'), 'invalid.yaml'));
    const [head, ...problems] = error.message.split('\n');
    expect(head).toBe('invalid.yaml has documents that cannot be applied; nothing was sent:');
    expect(problems).toEqual([
      expect.stringMatching(/^ {2}document 1 \(line 1, EntityType "vm"\): states: .+/),
      '  document 2 (line 5): kind "Widget" is not one of EntityType, RelationshipType, Cell, Action, Entity, Relationship',
      '  document 3 (line 11, Entity "web-1"): "env" is not a field of an Entity: documents carry no location; --org, --project and --env decide where they go',
      expect.stringMatching(/^ {2}document 4 \(line 13, Relationship\): to: .+/),
      'Fix the file and run apply again.',
    ]);
  });

  it('refuses a document without a kind, one that is not a mapping, the same object twice, and an empty file', () => {
    const error = usageErrorOf(() =>
      parseApplyDocuments(
        [
          'name: vm',
          '---',
          '- just a string',
          '---',
          'kind: Entity',
          'entityType: vm',
          'name: web-1',
          '---',
          'kind: Entity',
          'entityType: vm',
          'name: web-1',
        ].join('\n'),
        'f.yaml',
      ),
    );
    expect(error.message).toContain('document 1 (line 1): kind is missing: one of EntityType');
    expect(error.message).toContain('document 2 (line 3): a document is a mapping with a kind');
    expect(error.message).toContain('document 4 (line 9, Entity "web-1"): the same Entity as document 3 (line 5): give each once');
    expect(() => parseApplyDocuments('# nothing here\n---\n', 'empty.yaml')).toThrow(/empty\.yaml holds no documents/);
    // each unknown key on its own line, nested ones named by their path
    const keys = usageErrorOf(() => parseApplyDocuments('kind: Cell\nname: a\nentityType: t\nfoo: 1\nmembership: { mode: explicit, extra: 1 }\n', 'f.yaml'));
    expect(keys.message.split('\n').slice(1, 3)).toEqual([
      '  document 1 (line 4, Cell "a"): "foo" is not a field of a Cell',
      '  document 1 (line 5, Cell "a"): "extra" is not a field of membership of a Cell',
    ]);
    // an alias bomb is refused, not expanded
    const bomb = ['a: &a [1,1,1,1,1,1,1,1,1,1]', 'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]', 'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]', 'd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]'];
    expect(() => parseApplyDocuments(bomb.join('\n'), 'bomb.yaml')).toThrow(/bomb\.yaml is not valid YAML or JSON.*\n {2}line 1: Excessive alias count/);
  });

  it('orders documents by kind, file order within a kind, and cells after their parent cells', () => {
    const ordered = parse(fixture('platform.yaml'));
    expect(ordered.map((d) => `${d.kind} ${d.name}`)).toEqual([
      'EntityType cluster',
      'EntityType service',
      'RelationshipType runs-on',
      'Cell eu',
      'Cell eu-west',
      'Action drain',
      'Action scale',
      'Entity eu-west/k8s-1',
      'Entity payments:api',
      'Relationship payments:api -[runs-on]-> eu-west/k8s-1',
    ]);
    const chain = parse(
      ['c', 'b', 'a'].map((name, i) => `kind: Cell\nname: ${name}\nentityType: t\nparentCells: [${['b', 'a', 'root'][i]}]\n`).join('---\n'),
    );
    expect(chain.map((d) => d.name)).toEqual(['a', 'b', 'c']);
  });

  it('refuses cells that name each other as parents', () => {
    const text = 'kind: Cell\nname: a\nentityType: t\nparentCells: [b]\n---\nkind: Cell\nname: b\nentityType: t\nparentCells: [a]\n';
    expect(() => parse(text)).toThrow(/cells "a" → "b" → "a" name each other as parent cells/);
  });
});

describe(`apply: plan and apply against the API (${usingPostgres() ? 'Postgres' : 'PGlite'})`, () => {
  let api: TestApi;
  let client: CellplaneClient;
  let ref: EnvRef;

  beforeAll(async () => {
    api = await createTestApi();
    client = createClient({ baseUrl: TEST_API_BASE_URL, fetch: async (request) => api.app.fetch(request) });
  });
  afterAll(async () => {
    await api.close();
  });
  beforeEach(async () => {
    const tenant = await createTenant(api, { project: uniqueSlug('p') });
    ref = { org: tenant.org.slug, project: tenant.project.slug, env: 'default' };
  });

  const plan = (documents: ApplyDocument[]) => planApply(client, ref, documents);
  async function apply(text: string) {
    const entries = await plan(parse(text));
    return { plan: entries, ...(await executePlan(client, ref, entries)) };
  }
  /** Where the environment's change log stands, and every object's updatedAt: what a write would move. */
  async function snapshot() {
    const { org: o, project: p, env: envName } = ref;
    const changes = await client.GET('/{o}/{p}/envs/{envName}/changes', { params: { path: { o, p, envName }, query: { after: 0, limit: 1000 } } });
    const lists = await Promise.all([
      client.GET('/{o}/{p}/entity-types', { params: { path: { o, p } } }),
      client.GET('/{o}/{p}/relationship-types', { params: { path: { o, p } } }),
      client.GET('/{o}/{p}/cells', { params: { path: { o, p } } }),
      client.GET('/{o}/{p}/actions', { params: { path: { o, p } } }),
      client.GET('/{o}/{p}/envs/{envName}/entities', { params: { path: { o, p, envName } } }),
      client.GET('/{o}/{p}/envs/{envName}/relationships', { params: { path: { o, p, envName } } }),
    ]);
    return { seq: changes.next, updated: lists.flat().map((item) => `${'name' in item ? item.name : item.id}@${item.updatedAt}`).sort() };
  }

  it('creates every kind from scratch, in dependency order, with the API holding exactly the documents', async () => {
    const first = await apply(fixture('platform.yaml'));
    expect(rows(first.plan).map(([kind, name, action]) => `${action} ${kind} ${name}`)).toEqual([
      'create EntityType cluster',
      'create EntityType service',
      'create RelationshipType runs-on',
      'create Cell eu',
      'create Cell eu-west',
      'create Action drain',
      'create Action scale',
      'create Entity eu-west/k8s-1',
      'create Entity payments:api',
      'create Relationship payments:api -[runs-on]-> eu-west/k8s-1',
    ]);
    expect(first.failure).toBeUndefined();
    expect(first.applied.map((a) => a.action)).toEqual(Array(10).fill('created'));
    const { org: o, project: p, env: envName } = ref;
    const cell = await client.GET('/{o}/{p}/cells/{name}', { params: { path: { o, p, name: 'eu-west' } } });
    expect(cell).toMatchObject({ parentCells: ['eu'], placementPolicy: 'round-robin', displayName: 'EU West' });
    const cluster = await client.GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { o, p, envName, name: 'eu-west/k8s-1' } } });
    expect(cluster).toMatchObject({ state: 'ready', properties: { region: 'eu-west-1', nodes: 3 }, labels: { geo: 'eu' } });
    const relationships = await client.GET('/{o}/{p}/envs/{envName}/entities/{name}/relationships', {
      params: { path: { o, p, envName, name: 'payments:api' } },
    });
    expect(relationships).toMatchObject([{ relationshipTypeName: 'runs-on', toEntityName: 'eu-west/k8s-1', properties: { weight: 1 }, labels: { zone: 'a' } }]);
    // the answers are the API's own bodies
    expect(first.applied[0]!.result).toMatchObject({ name: 'cluster', syncFreshness: { maxAgeSeconds: 3600 } });
  });

  it('plans every document unchanged when applied again, and writes nothing', async () => {
    await apply(fixture('platform.yaml'));
    const before = await snapshot();
    const again = await apply(fixture('platform.yaml'));
    expect(again.plan.map((entry) => entry.action)).toEqual(Array(10).fill('unchanged'));
    expect(again.applied).toEqual([]);
    expect(await snapshot()).toEqual(before);
  });

  it('updates what changed, and only that: omitted catalog fields return to their defaults, entity state moves through PUT', async () => {
    await apply(fixture('platform.yaml'));
    const changed = await apply(fixture('platform-changed.yaml'));
    expect(rows(changed.plan)).toEqual([
      ['EntityType', 'cluster', 'update', ['displayName']],
      ['EntityType', 'service', 'unchanged', []],
      ['RelationshipType', 'runs-on', 'unchanged', []],
      ['Cell', 'eu', 'unchanged', []],
      ['Cell', 'eu-west', 'update', ['placementPolicy']],
      ['Action', 'drain', 'update', ['timeoutMinutes']],
      ['Action', 'scale', 'unchanged', []],
      ['Entity', 'eu-west/k8s-1', 'update', ['state']],
      ['Entity', 'eu-west/k8s-2', 'create', []],
      ['Entity', 'payments:api', 'update', ['labels']],
      ['Relationship', 'payments:api -[runs-on]-> eu-west/k8s-1', 'update', ['properties']],
    ]);
    expect(countPlan(changed.plan)).toEqual({ create: 1, update: 6, unchanged: 4, conflict: 0 });
    expect(changed.failure).toBeUndefined();
    const { org: o, project: p, env: envName } = ref;
    expect(await client.GET('/{o}/{p}/cells/{name}', { params: { path: { o, p, name: 'eu-west' } } })).toMatchObject({ placementPolicy: 'least-loaded' });
    const moved = await client.GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { o, p, envName, name: 'eu-west/k8s-1' } } });
    expect(moved).toMatchObject({ state: 'retired', properties: { region: 'eu-west-1', nodes: 3 } });
    // and the changed file is now what the API holds
    const settled = await apply(fixture('platform-changed.yaml'));
    expect(settled.plan.every((entry) => entry.action === 'unchanged')).toBe(true);
  });

  it('leaves to the API what a transition constraint refuses: the state move is sent and its 409 stops apply', async () => {
    await apply(fixture('platform.yaml'));
    const text = fixture('platform.yaml').replace('state: ready\n', 'state: provisioning\n');
    const result = await apply(text);
    expect(result.plan.find((entry) => entry.document.name === 'eu-west/k8s-1')).toMatchObject({ action: 'update', changes: ['state'] });
    expect(result.failure?.error).toBeInstanceOf(CellplaneError);
    expect(result.failure?.error).toMatchObject({ status: 409, code: 'transition_not_allowed' });
  });

  it('compares an entity or relationship only on the fields the document sets, properties with their defaults filled', async () => {
    await apply(fixture('services.json'));
    const { org: o, project: p, env: envName } = ref;
    // someone else sets labels and a state: the document does not name them, so they are not its to judge
    await client.PUT('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { o, p, envName, name: 'refunds' } }, body: { labels: { x: 'y' }, state: 'paused' } });
    const again = await plan(parse(fixture('services.json')));
    expect(rows(again)).toEqual([
      ['EntityType', 'queue', 'unchanged', []],
      ['Entity', 'orders', 'unchanged', []],
      ['Entity', 'refunds', 'unchanged', []],
    ]);
    // properties: { partitions: 1 } is what the API stored for a document without it, so setting it is no change either
    const explicit = fixture('services.json').replace('"name": "refunds"', '"name": "refunds", "properties": { "partitions": 1 }');
    expect(rows(await plan(parse(explicit)))[2]).toEqual(['Entity', 'refunds', 'unchanged', []]);
  });

  it('treats a catalog document as the whole definition: a field set elsewhere and omitted here is an update', async () => {
    await apply(fixture('services.json'));
    const { org: o, project: p } = ref;
    const current = await client.GET('/{o}/{p}/entity-types/{name}', { params: { path: { o, p, name: 'queue' } } });
    await client.PUT('/{o}/{p}/entity-types/{name}', {
      params: { path: { o, p, name: 'queue' } },
      body: { kind: 'EntityType', name: 'queue', states: current.states, initialState: current.initialState, properties: current.properties, displayName: 'Queues' },
    });
    const again = await plan(parse(fixture('services.json')));
    expect(rows(again)[0]).toEqual(['EntityType', 'queue', 'update', ['displayName']]);
  });

  it('writes an action holding a literal credential every time, saying why (the API shows it redacted)', async () => {
    const text = [
      'kind: EntityType\nname: vm\nstates: [up]\ninitialState: up',
      'kind: Action\nname: restart\nentityType: vm\ntrigger:\n  type: webhook\n  url: https://ci.example.com/restart\n  auth: { type: bearer, token: literal-token-123 }',
    ].join('\n---\n');
    await apply(text);
    const again = await apply(text);
    expect(rows(again.plan)).toEqual([
      ['EntityType', 'vm', 'unchanged', []],
      ['Action', 'restart', 'update', ['trigger (a literal credential cannot be read back; use {{ secrets.<name> }})']],
    ]);
    expect(again.applied.map((a) => a.action)).toEqual(['updated']);
    expect(JSON.stringify(again.applied)).not.toContain('literal-token-123');
  });

  it('plans a conflict for an entity that exists with another type, and nothing else for it', async () => {
    await apply(fixture('services.json'));
    const text = 'kind: EntityType\nname: topic\nstates: [on]\ninitialState: on\n---\nkind: Entity\nentityType: topic\nname: orders\n';
    const entries = await plan(parse(text));
    expect(entries.map(planRow)).toEqual([
      { document: 1, line: 1, kind: 'EntityType', name: 'topic', action: 'create', changes: [] },
      {
        document: 2,
        line: 6,
        kind: 'Entity',
        name: 'orders',
        action: 'conflict',
        changes: [expect.stringContaining('entity "orders" exists as a queue, not a topic')],
      },
    ]);
  });

  it('stops at the first refusal: what came before is applied, what comes after is not sent', async () => {
    const result = await apply(fixture('midway-error.yaml'));
    expect(result.applied.map((a) => `${a.action} ${a.kind} ${a.name}`)).toEqual(['created EntityType queue', 'created Entity orders']);
    expect(result.failure?.entry.document).toMatchObject({ index: 3, kind: 'Entity', name: 'refunds', line: 13 });
    expect(result.failure?.error).toMatchObject({ status: 400, code: 'validation_failed' });
    expect(result.notApplied.map((entry) => entry.document.name)).toEqual(['invoices']);
    const { org: o, project: p, env: envName } = ref;
    const names = (await client.GET('/{o}/{p}/envs/{envName}/entities', { params: { path: { o, p, envName } } })).map((e) => e.name);
    expect(names).toEqual(['orders']);
  });

  it('names names with / and : in paths correctly (URL-encoded), and finds them again', async () => {
    const text = 'kind: EntityType\nname: tf/aws_instance\nstates: [present]\ninitialState: present\n---\nkind: Entity\nentityType: tf/aws_instance\nname: module.vpc/aws_instance.web:0\n';
    const first = await apply(text);
    expect(first.failure).toBeUndefined();
    expect((await plan(parse(text))).map((entry) => entry.action)).toEqual(['unchanged', 'unchanged']);
  });

  it('refuses a project or environment that does not exist before planning anything', async () => {
    const documents = parse(fixture('services.json'));
    await expect(planApply(client, { ...ref, project: 'no-such-project' }, documents)).rejects.toThrow(CliError);
    await expect(planApply(client, { ...ref, project: 'no-such-project' }, documents)).rejects.toThrow(/project ".+\/no-such-project" was not found/);
    await expect(planApply(client, { ...ref, env: 'staging' }, documents)).rejects.toThrow(/environment "staging" was not found/);
    // catalog documents alone need no environment
    await expect(planApply(client, { ...ref, env: 'staging' }, documents.slice(0, 1))).resolves.toHaveLength(1);
  });
});

/**
 * `cellplane apply` as users run it: the real bin in a child process against
 * a real server on 127.0.0.1 (and once in --local mode). One tenant per
 * test, each with an owner token, so every test starts from an empty catalog.
 */
// each run of the CLI starts a process (and in --local mode an embedded database): generous time, never asserted on
describe(`cellplane apply, the command (${usingPostgres() ? 'Postgres' : 'PGlite'})`, { timeout: 180_000 }, () => {
  let api: TestApi;
  let url: string;
  let home: CliHome;
  const pool: { tenant: Tenant; token: string }[] = [];
  let current: { tenant: Tenant; token: string };
  const fixturePath = (name: string) => fileURLToPath(new URL(`../fixtures/apply/${name}`, import.meta.url));

  beforeAll(async () => {
    api = await createTestApi();
    url = await api.listen();
    home = createCliHome();
    // tenants are created while bootstrap mode is open; their tokens are seeded after
    const tenants: Tenant[] = [];
    for (let i = 0; i < 12; i++) tenants.push(await createTenant(api, { project: uniqueSlug('p') }));
    for (const tenant of tenants) pool.push({ tenant, token: await seedToken(api, tenant, 'owner') });
  });
  afterAll(async () => {
    home.remove();
    await api.close();
  });
  beforeEach(() => {
    current = pool.shift()!;
  });

  const cli = (args: string[], options: { input?: string; env?: Record<string, string> } = {}) =>
    runCli([...args, ...target(url, current.token, current.tenant)], { home, ...options });
  const base = () => `/${current.tenant.org.slug}/${current.tenant.project.slug}`;
  const call = async (path: string) => {
    const response = await api.call('GET', `${base()}${path}`, { token: current.token });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body;
  };
  /** The environment's change sequence and every object's updatedAt: what any write would move. */
  const snapshot = async () => {
    const lists = await Promise.all(
      ['/entity-types', '/relationship-types', '/cells', '/actions', '/envs/default/entities', '/envs/default/relationships'].map((path) => call(path)),
    );
    const changes = await call('/envs/default/changes?after=0&limit=1000');
    return { seq: changes.next as number, updated: lists.flat().map((item: { name?: string; id: string; updatedAt: string }) => `${item.name ?? item.id}@${item.updatedAt}`).sort() };
  };
  /** The plan table's rows: KIND, NAME, ACTION and CHANGES, split on the column gaps. */
  const planTable = (stdout: string) => {
    const lines = stdout.split('\n');
    const header = lines.findIndex((line) => line.startsWith('KIND'));
    expect(header, stdout).toBeGreaterThanOrEqual(0);
    const end = lines.findIndex((line, i) => i > header && line.startsWith('Plan: '));
    return lines.slice(header + 1, end).map((line) => line.split(/ {2,}/));
  };

  it('applies a multi-document YAML file of every kind from scratch: a plan of creates, then each write', async () => {
    const result = await cli(['apply', '--file', fixturePath('platform.yaml')]);
    expect(result.code, result.stderr).toBe(0);
    expect(planTable(result.stdout)).toEqual([
      ['EntityType', 'cluster', 'create', '-'],
      ['EntityType', 'service', 'create', '-'],
      ['RelationshipType', 'runs-on', 'create', '-'],
      ['Cell', 'eu', 'create', '-'],
      ['Cell', 'eu-west', 'create', '-'],
      ['Action', 'drain', 'create', '-'],
      ['Action', 'scale', 'create', '-'],
      ['Entity', 'eu-west/k8s-1', 'create', '-'],
      ['Entity', 'payments:api', 'create', '-'],
      ['Relationship', 'payments:api -[runs-on]-> eu-west/k8s-1', 'create', '-'],
    ]);
    expect(result.stdout).toContain('Plan: 10 to create, 0 to update, 0 unchanged.\n');
    expect(result.stdout).toContain('created EntityType "cluster"\ncreated EntityType "service"\n');
    expect(result.stdout).toContain('created Relationship "payments:api -[runs-on]-> eu-west/k8s-1"\n');
    expect(result.stdout.trimEnd().split('\n').at(-1)).toBe('Applied: 10 created, 0 updated, 0 unchanged.');
    expect(result.stderr).toBe('');
    expect(await call(`/envs/default/entities/${encodeURIComponent('eu-west/k8s-1')}`)).toMatchObject({ state: 'ready', properties: { nodes: 3 } });
    expect((await call('/cells/eu-west')).parentCells).toEqual(['eu']);
  });

  it('applied again, plans every document unchanged and writes nothing: the change sequence does not move', async () => {
    expect((await cli(['apply', '--file', fixturePath('platform.yaml')])).code).toBe(0);
    const before = await snapshot();
    const again = await cli(['apply', '--file', fixturePath('platform.yaml')]);
    expect(again.code, again.stderr).toBe(0);
    expect(planTable(again.stdout).map((row) => row[2])).toEqual(Array(10).fill('unchanged'));
    expect(again.stdout).toContain('Plan: 0 to create, 0 to update, 10 unchanged.\nNothing to change.\n');
    expect(await snapshot()).toEqual(before);
  });

  it('applies a changed file as updates of the changed documents, naming the fields', async () => {
    expect((await cli(['apply', '--file', fixturePath('platform.yaml')])).code).toBe(0);
    const changed = await cli(['apply', '--file', fixturePath('platform-changed.yaml')]);
    expect(changed.code, changed.stderr).toBe(0);
    expect(planTable(changed.stdout).filter((row) => row[2] !== 'unchanged')).toEqual([
      ['EntityType', 'cluster', 'update', 'displayName'],
      ['Cell', 'eu-west', 'update', 'placementPolicy'],
      ['Action', 'drain', 'update', 'timeoutMinutes'],
      ['Entity', 'eu-west/k8s-1', 'update', 'state'],
      ['Entity', 'eu-west/k8s-2', 'create', '-'],
      ['Entity', 'payments:api', 'update', 'labels'],
      ['Relationship', 'payments:api -[runs-on]-> eu-west/k8s-1', 'update', 'properties'],
    ]);
    expect(changed.stdout).toContain('updated Entity "eu-west/k8s-1"\ncreated Entity "eu-west/k8s-2"\nupdated Entity "payments:api"\n');
    expect(changed.stdout).toContain('Applied: 1 created, 6 updated, 4 unchanged.');
    expect(await call(`/envs/default/entities/${encodeURIComponent('eu-west/k8s-1')}`)).toMatchObject({ state: 'retired' });
    expect((await call('/actions/drain')).timeoutMinutes).toBe(45);
  });

  it('with --dry-run prints the same plan and changes nothing', async () => {
    expect((await cli(['apply', '--file', fixturePath('platform.yaml')])).code).toBe(0);
    const before = await snapshot();
    const dry = await cli(['apply', '--file', fixturePath('platform-changed.yaml'), '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stderr).toBe('dry run: nothing was changed\n');
    expect(dry.stdout).toContain('Plan: 1 to create, 6 to update, 4 unchanged.');
    expect(dry.stdout).not.toMatch(/^(created|updated) /m);
    expect(await snapshot()).toEqual(before);
    const json = await cli(['apply', '--file', fixturePath('platform-changed.yaml'), '--dry-run', '--json']);
    expect(json.code, json.stderr).toBe(0);
    const report = JSON.parse(json.stdout);
    expect(report).toMatchObject({ dryRun: true, summary: { create: 1, update: 6, unchanged: 4, conflict: 0 }, applied: [], notApplied: [] });
    expect(report.plan.map((row: { kind: string; name: string; action: string }) => [row.kind, row.name, row.action])).toEqual(
      planTable(dry.stdout).map((row) => row.slice(0, 3)),
    );
    expect(await snapshot()).toEqual(before);
    // and applying for real does exactly what the dry run said
    const real = await cli(['apply', '--file', fixturePath('platform-changed.yaml'), '--json']);
    expect(JSON.parse(real.stdout).plan).toEqual(report.plan);
  });

  it('applies a JSON file; --json reports the plan and each write with the API’s own answer', async () => {
    const result = await cli(['apply', '--file', fixturePath('services.json'), '--json']);
    expect(result.code, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout);
    expect(report.plan).toEqual([
      { document: 1, line: 2, kind: 'EntityType', name: 'queue', action: 'create', changes: [] },
      { document: 2, line: 9, kind: 'Entity', name: 'orders', action: 'create', changes: [] },
      { document: 3, line: 15, kind: 'Entity', name: 'refunds', action: 'create', changes: [] },
    ]);
    expect(report.applied.map((entry: { action: string; name: string }) => `${entry.action} ${entry.name}`)).toEqual(['created queue', 'created orders', 'created refunds']);
    expect(report.applied[1].result).toEqual(await call('/envs/default/entities/orders'));
    expect(report.applied[0].result).toEqual(await call('/entity-types/queue'));
  });

  it('reads standard input with --file -', async () => {
    const result = await cli(['apply', '--file', '-'], { input: fixture('services.json') });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('Applied: 3 created, 0 updated, 0 unchanged.');
  });

  it('refuses a bad file with exit 2 before sending anything, naming each bad document', async () => {
    const result = await cli(['apply', '--file', fixturePath('invalid.yaml')]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(`error: ${fixturePath('invalid.yaml')} has documents that cannot be applied; nothing was sent:\n`);
    expect(result.stderr).toMatch(/ {2}document 1 \(line 1, EntityType "vm"\): states: /);
    expect(result.stderr).toContain('  document 2 (line 5): kind "Widget" is not one of');
    expect(result.stderr).toContain('  document 3 (line 11, Entity "web-1"): "env" is not a field of an Entity');
    expect(await call('/entity-types')).toEqual([]);
    const missing = await cli(['apply', '--file', fixturePath('no-such.yaml')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('no such file');
    const noFile = await cli(['apply']);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toContain("required option '-f, --file <path>' not specified");
  });

  it('stops at an API error midway with exit 1: what was applied, what failed and what was not', async () => {
    const result = await cli(['apply', '--file', fixturePath('midway-error.yaml')]);
    expect(result.code).toBe(1);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines.slice(lines.findIndex((line) => line.startsWith('Plan: ')) + 1)).toEqual([
      'created EntityType "queue"',
      'created Entity "orders"',
      expect.stringMatching(/^failed Entity "refunds": .*owner/),
      'not applied Entity "invoices"',
      'Stopped: 2 created, 0 updated, 1 failed, 1 not applied.',
    ]);
    expect(result.stderr).toMatch(/^error: apply stopped at document 3 \(Entity "refunds", line 13\): .+ \(400 validation_failed\)\n/);
    expect(result.stderr).toMatch(/\nhint: .+/);
    expect((await call('/envs/default/entities')).map((entity: { name: string }) => entity.name)).toEqual(['orders']);

    const json = await cli(['apply', '--file', fixturePath('midway-error.yaml'), '--json']);
    expect(json.code).toBe(1);
    const report = JSON.parse(json.stdout);
    expect(report.plan.map((row: { action: string }) => row.action)).toEqual(['unchanged', 'unchanged', 'create', 'create']);
    expect(report.applied).toEqual([]);
    expect(report.failed).toMatchObject({ document: 3, kind: 'Entity', name: 'refunds', status: 400, code: 'validation_failed' });
    expect(report.notApplied).toEqual([{ document: 4, line: 18, kind: 'Entity', name: 'invoices', action: 'create', changes: [] }]);
  });

  it('exits 1 on a conflict and changes nothing, dry run or not', async () => {
    expect((await cli(['apply', '--file', fixturePath('services.json')])).code).toBe(0);
    const before = await snapshot();
    const file = join(home.cwd, 'conflict.yaml');
    writeFileSync(file, 'kind: EntityType\nname: topic\nstates: [on]\ninitialState: on\n---\nkind: Entity\nentityType: topic\nname: orders\n');
    for (const extra of [[], ['--dry-run']]) {
      const result = await cli(['apply', '--file', file, ...extra]);
      expect(result.code).toBe(1);
      expect(planTable(result.stdout)).toEqual([
        ['EntityType', 'topic', 'create', '-'],
        ['Entity', 'orders', 'conflict', expect.stringContaining('exists as a queue, not a topic')],
      ]);
      expect(result.stderr).toContain('error: 1 document conflicts with what the API holds (see the plan); nothing was changed\nhint: ');
    }
    expect(await snapshot()).toEqual(before);
  });

  it('goes where --org, --project and --env say: a project that does not exist is exit 1 with a hint', async () => {
    const result = await runCli(
      ['apply', '--file', fixturePath('services.json'), '--base-url', url, '--token', current.token, '--org', current.tenant.org.slug, '--project', 'elsewhere'],
      { home },
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`error: project "${current.tenant.org.slug}/elsewhere" was not found`);
    expect(result.stderr).toContain('hint: check --org and --project');
  });

  it('works in --local mode on the embedded database, without a server or token', async () => {
    const dataDir = join(home.root, `local-${Math.random().toString(36).slice(2)}`);
    const local = (args: string[]) => runCli(['--local', '--data-dir', dataDir, ...args], { home });
    const first = await local(['apply', '--file', fixturePath('platform.yaml')]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain('Applied: 10 created, 0 updated, 0 unchanged.');
    const again = await local(['apply', '--file', fixturePath('platform.yaml')]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('Plan: 0 to create, 0 to update, 10 unchanged.\nNothing to change.\n');
  });
});
