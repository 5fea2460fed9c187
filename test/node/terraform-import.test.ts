import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateState } from '../../src/cli/terraform/generate';
import { createProgress, formatSummary } from '../../src/cli/terraform/progress';
import { ImportRefusedError, importTerraform, ImportUsageError, type ImportOptions, type ImportPhase, type ImportReport } from '../../src/cli/terraform/run';
import { sdkTarget } from '../../src/cli/terraform/target';
import { createClient } from '../../src/sdk';
import { createTenant, seedToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

const FIXTURES = new URL('../fixtures/terraform/', import.meta.url);
const fixture = (name: string) => JSON.parse(readFileSync(new URL(name, FIXTURES), 'utf8')) as Record<string, any>;
const LINEAGE = '3f9c2a4e-8b1d-4e7a-9c55-0d2e1f6a7b81';
const SOURCE = `terraform:${LINEAGE}`;
/** Every sensitive value in platform.tfstate (attributes at every depth, and a sensitive output). */
const SENSITIVE_VALUES = ['s3cr3t-Db-Pa55w0rd-7f3a', 'nested-T0ken-91ab', 'list-S3cret-element-42', 'map-K3y-S3cret-55', 'rnd-Result-Zq8x-Secret', '$2a$10$rNd0mBcryptHashValue'];
const ENTITY_COUNT = 16;
const RELATIONSHIP_COUNT = 27;
const ENTITY_TYPES = ['aws_db_instance', 'aws_eip', 'aws_iam_user', 'aws_instance', 'aws_security_group', 'aws_subnet', 'aws_vpc', 'random_password', 'terraform_data'];

describe('terraform import against the API', () => {
  let api: TestApi;
  let baseUrl: string;
  let dir: string;
  /** One tenant (organization + project `terrantula`) per test: none depends on another's leftovers. */
  const pool: { tenant: Tenant; token: string }[] = [];
  let fileCounter = 0;

  beforeAll(async () => {
    api = await createTestApi();
    baseUrl = await api.listen();
    dir = mkdtempSync(join(tmpdir(), 'cellplane-tf-'));
    const tenants: Tenant[] = [];
    for (let i = 0; i < 16; i++) tenants.push(await createTenant(api, { project: 'terrantula' }));
    for (const tenant of tenants) pool.push({ tenant, token: await seedToken(api, tenant, 'admin') });
    for (const value of SENSITIVE_VALUES) api.secretScan.register(value, 'a sensitive Terraform attribute');
  });

  afterAll(async () => {
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** A tenant of its own, a client on the real HTTP server, and every request the client sent. */
  function setup() {
    const { tenant, token } = pool.pop()!;
    const requests: string[] = [];
    const recording = (request: Request) => {
      requests.push(`${request.method} ${decodeURIComponent(new URL(request.url).pathname)}`);
      return globalThis.fetch(request);
    };
    const client = createClient({ baseUrl, token, fetch: recording });
    const env = { org: tenant.org.slug, project: 'terrantula', env: 'default' };
    const target = sdkTarget(client, env);
    const ENV = `/${env.org}/terrantula/envs/default`;
    const run = (options: ImportOptions, onProgress?: (phase: ImportPhase, done: number, total: number) => void) =>
      importTerraform(options, { target, onProgress });
    const call = (method: string, path: string, body?: unknown) => api.call(method, path, { token, body });
    const entity = async (name: string) => (await call('GET', `${ENV}/entities/${encodeURIComponent(name)}`)).body;
    const entities = async () => {
      const all: any[] = [];
      for await (const item of client.paginate('/{o}/{p}/envs/{envName}/entities', { params: { path: { o: env.org, p: 'terrantula', envName: 'default' }, query: { limit: 1000 } } })) all.push(item);
      return all;
    };
    /** The environment's change sequence: it moves with every entity written. */
    const changeSeq = async () => {
      const page = await call('GET', `${ENV}/changes?after=0&limit=1000`);
      expect(page.status).toBe(200);
      return { next: page.body.next as number, changes: page.body.changes as any[] };
    };
    const entityTypes = async () => ((await call('GET', `/${env.org}/terrantula/entity-types`)).body as any[]).map((type) => type.name).sort();
    return { tenant, token, client, target, env, ENV, run, call, entity, entities, changeSeq, entityTypes, requests };
  }

  function stateFile(state: Record<string, unknown>): string {
    const path = join(dir, `state-${++fileCounter}.tfstate`);
    writeFileSync(path, JSON.stringify(state));
    return path;
  }

  const platformPath = () => new URL('platform.tfstate', FIXTURES).pathname;
  const counts = (report: ImportReport) => ({
    created: report.entities.created.length,
    updated: report.entities.updated.length,
    unchanged: report.entities.unchanged,
    deleted: report.entities.deleted.length,
    conflicts: report.entities.conflicts.map((conflict) => `${conflict.name}: ${conflict.reason}`).sort(),
    invalid: report.entities.invalid.length,
    relationships: report.relationships,
    entityTypes: report.entityTypes,
    relationshipTypes: report.relationshipTypes,
  });

  it('imports nested modules, count and for_each instances and dependencies; skips data sources', async () => {
    const t = setup();
    const report = await t.run({ statePath: platformPath() });
    expect(report.source).toBe(SOURCE);
    expect(report.serial).toBe(7);
    expect(report.dataSourceInstancesSkipped).toBe(1);
    expect(report.entities.created).toHaveLength(ENTITY_COUNT);
    expect(report.entities.conflicts).toEqual([]);
    expect([...report.entityTypes.created].sort()).toEqual(ENTITY_TYPES);
    expect(report.relationshipTypes.created).toHaveLength(7);
    expect(report.relationships).toEqual({ created: RELATIONSHIP_COUNT, updated: 0, unchanged: 0, deleted: 0, skipped: 0, conflicts: 0 });

    expect(await t.entityTypes()).toEqual(ENTITY_TYPES);
    const type = (await t.call('GET', `/${t.env.org}/terrantula/entity-types/aws_instance`)).body;
    expect(type).toMatchObject({ states: ['present'], initialState: 'present', syncTracked: true, applier: 'terraform' });
    expect(type.properties).toContainEqual({ name: 'root_block_device', type: 'array' });
    expect(type.properties).toContainEqual({ name: 'cpu_core_count', type: 'number' });

    const db = await t.entity('module.app/0.module.db/primary.aws_db_instance.this');
    expect(db).toMatchObject({
      entityTypeName: 'aws_db_instance',
      state: 'present',
      syncSource: SOURCE,
      labels: { 'terraform.io/address': 'module.app[0].module.db["primary"].aws_db_instance.this', 'terraform.io/serial': '7' },
    });
    expect(db.lastSyncedAt).toBe(report.observedAt);
    expect(db.properties).toMatchObject({ engine: 'postgres', allocated_storage: 20, connection: { host: 'app-primary.internal' }, secrets: ['public-first-element', null] });
    expect(db.properties.password).toBeUndefined();
    const counted = await t.entity('module.app/1.aws_instance.web/1');
    expect(counted.properties).toMatchObject({ instance_type: 't3.small', user_data: 'I2Nsb3VkLWNvbmZpZw==' });
    expect((await t.entity('aws_subnet.private/us-east-1a')).properties.availability_zone).toBe('us-east-1a');
    const jane = (await t.entities()).find((e) => e.name.startsWith('aws_iam_user.users/Jane-Doe-'));
    expect(jane.labels['terraform.io/address']).toBe('aws_iam_user.users["Jane Doe"]');
    expect((await t.entities()).some((e) => e.name.includes('availability_zones'))).toBe(false);

    const links = (await t.call('GET', `${t.ENV}/entities/${encodeURIComponent('aws_eip.nat/1')}/relationships`)).body as any[];
    expect(links.map((link) => `${link.relationshipTypeName} ${link.toEntityName}`).sort()).toEqual([
      'dependsOn.aws_eip.aws_instance module.app/0.aws_instance.web/0',
      'dependsOn.aws_eip.aws_instance module.app/0.aws_instance.web/1',
      'dependsOn.aws_eip.aws_instance module.app/1.aws_instance.web/0',
      'dependsOn.aws_eip.aws_instance module.app/1.aws_instance.web/1',
    ]);
    const relationshipType = (await t.call('GET', `/${t.env.org}/terrantula/relationship-types/dependsOn.aws_eip.aws_instance`)).body;
    expect(relationshipType).toMatchObject({ displayName: 'depends on', cardinality: 'many-to-many', states: ['present'], fromEntityTypeName: 'aws_eip', toEntityTypeName: 'aws_instance' });
  });

  it('never sends, stores, prints or reports a sensitive value', async () => {
    const t = setup();
    const printed: string[] = [];
    const display = createProgress({ output: { write: (text: string) => printed.push(text), isTTY: false } });
    const report = await importTerraform({ statePath: platformPath() }, { target: t.target, onProgress: display.onProgress });
    display.finish();
    expect(printed.join('')).toContain('import: entities 16/16');
    const dry = await importTerraform({ statePath: platformPath(), dryRun: true }, { target: t.target });
    const everything = [
      printed.join(''),
      formatSummary(report),
      JSON.stringify(report),
      formatSummary(dry),
      JSON.stringify(dry),
      JSON.stringify(await t.entities()),
      JSON.stringify((await t.changeSeq()).changes),
      JSON.stringify((await t.call('GET', `/${t.env.org}/terrantula/entity-types`)).body),
      api.logs.join('\n'),
    ].join('\n');
    expect(everything).toContain('app-primary.internal');
    for (const value of SENSITIVE_VALUES) expect(everything).not.toContain(value);
    // and the API's own scan (responses and logs of this suite) is checked when it closes
  });

  it('reports entities another owner holds as conflicts and never overwrites them', async () => {
    const t = setup();
    // a person made aws_vpc.main; another Terraform state owns aws_security_group.web
    expect((await t.call('POST', `/${t.env.org}/terrantula/entity-types`, { kind: 'EntityType', name: 'aws_vpc', states: ['present'], initialState: 'present', properties: [{ name: 'owner', type: 'string' }] })).status).toBe(201);
    expect((await t.call('POST', `/${t.env.org}/terrantula/entity-types`, { kind: 'EntityType', name: 'aws_security_group', states: ['present'], initialState: 'present' })).status).toBe(201);
    const hand = await t.call('POST', `${t.ENV}/entities`, { kind: 'Entity', entityType: 'aws_vpc', name: 'aws_vpc.main', properties: { owner: 'networking' } });
    expect(hand.status).toBe(201);
    const other = await t.call('POST', `${t.ENV}/entities`, { kind: 'Entity', entityType: 'aws_security_group', name: 'aws_security_group.web', syncSource: 'terraform:other-lineage' });
    expect(other.status).toBe(201);

    const dry = await t.run({ statePath: platformPath(), dryRun: true });
    const report = await t.run({ statePath: platformPath() });
    expect(counts(dry)).toEqual({ ...counts(report), entityTypes: dry.entityTypes, relationshipTypes: dry.relationshipTypes });
    expect(report.entities.conflicts.map(({ name, reason, syncSource, address }) => ({ name, reason, syncSource, address })).sort((a, b) => a.name.localeCompare(b.name))).toEqual([
      { name: 'aws_security_group.web', reason: 'owned by "terraform:other-lineage"', syncSource: 'terraform:other-lineage', address: 'aws_security_group.web' },
      { name: 'aws_vpc.main', reason: 'created by hand', syncSource: null, address: 'aws_vpc.main' },
    ]);
    expect(report.entities.created).toHaveLength(ENTITY_COUNT - 2);
    // both stay exactly as their owners left them
    expect(await t.entity('aws_vpc.main')).toEqual(hand.body);
    expect(await t.entity('aws_security_group.web')).toEqual(other.body);
    // relationships from or to them are skipped: subnets→vpc (2), sg→vpc (1), instances→sg (4)
    expect(report.relationships).toMatchObject({ created: RELATIONSHIP_COUNT - 7, skipped: 7, conflicts: 0 });
    expect(report.entityTypes.extended.map((type) => type.name).sort()).toEqual(['aws_security_group', 'aws_vpc']);
    const vpcType = (await t.call('GET', `/${t.env.org}/terrantula/entity-types/aws_vpc`)).body;
    expect(vpcType.properties[0]).toEqual({ name: 'owner', type: 'string' });
    expect(vpcType.properties.map((p: any) => p.name)).toContain('cidr_block');
  });

  it('refuses above the deletion limit before changing anything; --max-delete and --force let it through', async () => {
    const t = setup();
    await t.run({ statePath: platformPath() });
    const before = await t.changeSeq();
    const typesBefore = await t.entityTypes();
    // the next state drops both EIPs (2 deletes > 10 % of 16 = 1), has a new serial and a new resource type
    const next = fixture('platform.tfstate');
    next.serial = 9;
    next.resources = next.resources.filter((resource: any) => resource.type !== 'aws_eip');
    next.resources.push({ mode: 'managed', type: 'aws_s3_bucket', name: 'logs', provider: 'provider["registry.terraform.io/hashicorp/aws"]', instances: [{ schema_version: 0, attributes: { bucket: 'logs' }, sensitive_attributes: [] }] });
    const path = stateFile(next);

    const refusal = await t.run({ statePath: path }).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(ImportRefusedError);
    expect((refusal as ImportRefusedError).deletion).toEqual({ count: 2, limit: 1, owned: 16, forced: false, exceeded: true });
    expect((refusal as Error).message).toMatch(/delete 2 entities.*limit of 1.*--max-delete 2 or --force/);
    expect(await t.changeSeq()).toEqual(before);
    expect(await t.entityTypes()).toEqual(typesBefore);
    expect(t.requests.filter((request) => !request.startsWith('GET'))).toHaveLength(ENTITY_TYPES.length + 7 + 2);

    // a dry run shows the plan and says a real run would refuse
    const dry = await t.run({ statePath: path, dryRun: true });
    expect(dry.deletion.exceeded).toBe(true);
    expect(dry.entities.deleted.sort()).toEqual(['aws_eip.nat/0', 'aws_eip.nat/1']);
    expect(formatSummary(dry)).toContain('rerun with --max-delete 2 or --force');
    expect(await t.changeSeq()).toEqual(before);

    expect((await t.run({ statePath: path, maxDelete: 1 }).catch((error: unknown) => error))).toBeInstanceOf(ImportRefusedError);
    const allowed = await t.run({ statePath: path, maxDelete: 2 });
    expect(allowed.entities.deleted.sort()).toEqual(['aws_eip.nat/0', 'aws_eip.nat/1']);
    expect(allowed.entities.created).toEqual(['aws_s3_bucket.logs']);
    // the EIPs' 8 relationships went with them
    expect(allowed.relationships).toMatchObject({ deleted: 8, unchanged: RELATIONSHIP_COUNT - 8, created: 0 });
    expect((await t.call('GET', `${t.ENV}/entities/${encodeURIComponent('aws_eip.nat/0')}`)).status).toBe(404);

    const forced = setup();
    await forced.run({ statePath: platformPath() });
    expect((await forced.run({ statePath: path, force: true })).entities.deleted).toHaveLength(2);
  });

  it('a dry run changes nothing and reports what the real run then does', async () => {
    const t = setup();
    const dry = await t.run({ statePath: platformPath(), dryRun: true });
    expect(dry.dryRun).toBe(true);
    expect((await t.changeSeq()).next).toBe(0);
    expect(await t.entityTypes()).toEqual([]);
    expect([...dry.entityTypes.created].sort()).toEqual(ENTITY_TYPES);
    const real = await t.run({ statePath: platformPath() });
    expect(counts(dry)).toEqual(counts(real));
    expect(dry.entities.created.sort()).toEqual(real.entities.created.sort());

    // and again for a new serial with one changed resource, against what is now stored
    const serial8 = new URL('platform-serial8.tfstate', FIXTURES).pathname;
    const before = await t.changeSeq();
    const dry8 = await t.run({ statePath: serial8, dryRun: true });
    expect(await t.changeSeq()).toEqual(before);
    const real8 = await t.run({ statePath: serial8 });
    expect(counts(dry8)).toEqual(counts(real8));
    expect(dry8.entities.updated.sort()).toEqual(real8.entities.updated.sort());
  });

  it('re-importing an unchanged state writes nothing', async () => {
    const t = setup();
    await t.run({ statePath: platformPath() });
    const before = await t.changeSeq();
    expect(before.changes).toHaveLength(ENTITY_COUNT);
    const sent = t.requests.length;
    const again = await t.run({ statePath: platformPath() });
    expect(again.entities).toMatchObject({ created: [], updated: [], unchanged: ENTITY_COUNT, deleted: [], conflicts: [] });
    expect(again.relationships).toEqual({ created: 0, updated: 0, unchanged: RELATIONSHIP_COUNT, deleted: 0, skipped: 0, conflicts: 0 });
    expect(again.entityTypes).toEqual({ created: [], extended: [] });
    expect(again.relationshipTypes.created).toEqual([]);
    expect(await t.changeSeq()).toEqual(before);
    // only reads were sent
    expect(t.requests.slice(sent).filter((request) => !request.startsWith('GET'))).toEqual([]);
  });

  it('a new serial restamps every entity and carries the one changed resource', async () => {
    const t = setup();
    await t.run({ statePath: platformPath() });
    const before = await t.changeSeq();
    const report = await t.run({ statePath: new URL('platform-serial8.tfstate', FIXTURES).pathname });
    expect(report.entities.updated).toHaveLength(ENTITY_COUNT);
    expect(report.entities.created).toEqual([]);
    expect(report.relationships).toMatchObject({ created: 0, unchanged: RELATIONSHIP_COUNT, deleted: 0 });
    const sg = await t.entity('aws_security_group.web');
    expect(sg.properties.description).toBe('web tier (TLS only)');
    expect(sg.labels['terraform.io/serial']).toBe('8');
    const after = await t.changeSeq();
    expect(after.changes.slice(before.changes.length).map((change) => change.type)).toEqual(Array(ENTITY_COUNT).fill('entity.updated'));
  });

  it('deletes relationships whose dependency is gone from the state', async () => {
    const t = setup();
    await t.run({ statePath: platformPath() });
    const next = fixture('platform.tfstate');
    next.serial = 10;
    for (const resource of next.resources) {
      if (resource.type !== 'aws_instance') continue;
      for (const instance of resource.instances) instance.dependencies = ['aws_subnet.private'];
    }
    const report = await t.run({ statePath: stateFile(next) });
    expect(report.relationships).toMatchObject({ deleted: 4, created: 0, unchanged: RELATIONSHIP_COUNT - 4 });
    const links = (await t.call('GET', `${t.ENV}/entities/${encodeURIComponent('module.app/0.aws_instance.web/0')}/relationships`)).body as any[];
    expect(links.filter((link) => link.fromEntityName === 'module.app/0.aws_instance.web/0').map((link) => link.toEntityName).sort()).toEqual(['aws_subnet.private/us-east-1a', 'aws_subnet.private/us-east-1b']);
  });

  it('skips an entity its existing type refuses, and writes the rest', async () => {
    const t = setup();
    // an existing type with a unique id: two IAM users sharing an id collide; the second one is refused by the server
    expect((await t.call('POST', `/${t.env.org}/terrantula/entity-types`, {
      kind: 'EntityType', name: 'aws_iam_user', states: ['present'], initialState: 'present',
      properties: [{ name: 'path', type: 'string' }], constraints: [{ kind: 'unique', properties: ['path'] }],
    })).status).toBe(201);
    const state = fixture('platform.tfstate');
    const users = state.resources.find((resource: any) => resource.type === 'aws_iam_user');
    for (const instance of users.instances) instance.attributes.path = '/same/';
    const report = await t.run({ statePath: stateFile(state) });
    expect(report.entities.invalid).toHaveLength(1);
    expect(report.entities.invalid[0]!.reason).toMatch(/path.*same/);
    expect(report.entities.created).toHaveLength(ENTITY_COUNT - 1);
  });

  it('draws a progress bar on a terminal for a large state, lines otherwise, nothing with --json', async () => {
    const t = setup();
    const state = generateState({ resources: 450, lineage: 'progress-lineage' });
    const out: string[] = [];
    const bar = createProgress({ output: { write: (text: string) => out.push(text), isTTY: true } });
    const report = await importTerraform({ statePath: stateFile(state) }, { target: t.target, onProgress: bar.onProgress });
    bar.finish();
    expect(bar.mode).toBe('bar');
    expect(report.entities.created).toHaveLength(450);
    const drawn = out.join('');
    expect(drawn).toContain('\r[##############################] entities 450/450 100%');
    expect(drawn.endsWith('\n')).toBe(true);

    const silent: string[] = [];
    const json = createProgress({ output: { write: (text: string) => silent.push(text), isTTY: true }, json: true });
    await importTerraform({ statePath: stateFile(state) }, { target: t.target, onProgress: json.onProgress });
    expect(silent).toEqual([]);

    const small: string[] = [];
    const lines = createProgress({ output: { write: (text: string) => small.push(text), isTTY: true } });
    await importTerraform({ statePath: platformPath() }, { target: setup().target, onProgress: lines.onProgress });
    expect(lines.mode).toBe('lines');
    expect(small.every((line) => line.startsWith('import: ') && line.endsWith('\n'))).toBe(true);
  });

  it('says what to do when the state cannot be read', async () => {
    const t = setup();
    await expect(t.run({ statePath: join(dir, 'missing.tfstate') })).rejects.toThrow(/does not exist.*terraform state pull/);
    await expect(t.run({ statePath: stateFile({ version: 3, serial: 1, lineage: 'x' }) })).rejects.toThrow(/only format 4/);
    await expect(t.run({})).rejects.toThrow(ImportUsageError);
    await expect(t.run({})).rejects.toThrow(/--state <file> or --workspace/);
    await expect(t.run({ statePath: platformPath(), workspace: 'a/b' })).rejects.toThrow(/not both/);
    await expect(t.run({ statePath: platformPath(), maxDelete: -1 })).rejects.toThrow(/--max-delete must be a non-negative integer/);
    expect(t.requests).toEqual([]);
  });
});
