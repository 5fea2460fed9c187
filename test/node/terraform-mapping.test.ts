import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { generateState } from '../../src/cli/terraform/generate';
import {
  entityNameOf,
  extendedEntityType,
  mapState,
  planEntityTypes,
  relationshipTypeNameOf,
  resolveProperties,
  type EntityTypeView,
} from '../../src/cli/terraform/mapping';
import { canonicalJson, chunk, classifyLocally, deletionCheck, ImportRefusedError, namePrefixes, planEntities, planRelationships } from '../../src/cli/terraform/plan';
import { parseModulePath, parseState, readState, StateFormatError, stripSensitive } from '../../src/cli/terraform/state';
import type { StoredEntity } from '../../src/cli/terraform/target';

const FIXTURE = new URL('../fixtures/terraform/platform.tfstate', import.meta.url);
const fixtureText = () => readFileSync(FIXTURE, 'utf8');
/** Every sensitive value of the fixture: none may survive parsing. */
const SENSITIVE_VALUES = ['s3cr3t-Db-Pa55w0rd-7f3a', 'nested-T0ken-91ab', 'list-S3cret-element-42', 'map-K3y-S3cret-55', 'rnd-Result-Zq8x-Secret', '$2a$10$rNd0mBcrypt'];

const getAttr = (value: string) => ({ type: 'get_attr', value });
const index = (value: number | string) => ({ type: 'index', value: { value, type: typeof value === 'number' ? 'number' : 'string' } });

const minimalState = (resources: unknown[], extra: Record<string, unknown> = {}) => ({
  version: 4,
  terraform_version: '1.9.8',
  serial: 1,
  lineage: 'lin-1',
  outputs: {},
  resources,
  ...extra,
});

const managed = (type: string, name: string, instances: unknown[], module?: string) => ({
  ...(module ? { module } : {}),
  mode: 'managed',
  type,
  name,
  provider: 'provider["registry.terraform.io/hashicorp/aws"]',
  instances,
});

describe('state format 4', () => {
  it('reads the fixture: serial, lineage, modules, count and for_each keys, data sources', () => {
    const state = parseState(fixtureText());
    expect(state.version).toBe(4);
    expect(state.serial).toBe(7);
    expect(state.lineage).toBe('3f9c2a4e-8b1d-4e7a-9c55-0d2e1f6a7b81');
    expect(state.terraformVersion).toBe('1.9.8');
    const modes = state.resources.map((resource) => resource.mode);
    expect(modes.filter((mode) => mode === 'data')).toHaveLength(1);
    const subnet = state.resources.find((resource) => resource.type === 'aws_subnet')!;
    expect(subnet.instances.map((instance) => instance.indexKey)).toEqual(['us-east-1a', 'us-east-1b']);
    const db = state.resources.find((resource) => resource.type === 'aws_db_instance')!;
    expect(db.module).toBe('module.app[0].module.db["primary"]');
  });

  it('strips every sensitive path while parsing: top-level, nested, list element, map key', () => {
    const state = parseState(fixtureText());
    const db = state.resources.find((resource) => resource.type === 'aws_db_instance')!.instances[0]!;
    expect(db.attributes.password).toBeUndefined();
    expect(db.attributes.connection).toEqual({ host: 'app-primary.internal' });
    expect(db.attributes.secrets).toEqual(['public-first-element', null]);
    expect(db.attributes.parameter_values).toEqual({ region: 'us-east-1' });
    expect(db.attributes.username).toBe('app');
    const random = state.resources.find((resource) => resource.type === 'random_password')!.instances[0]!;
    expect(Object.keys(random.attributes).sort()).toEqual(['id', 'length', 'lower', 'min_numeric', 'override_special', 'special']);
    // nothing parsed keeps a sensitive value, the sensitive output, or provider-private data
    const kept = JSON.stringify(state);
    for (const value of SENSITIVE_VALUES) expect(kept).not.toContain(value);
    expect(kept).not.toContain('eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ==');
  });

  it('fails closed on a sensitive path it cannot read, and an empty path drops every attribute', () => {
    const attributes = { a: 'keep', b: { c: 'secret-1' }, d: ['x'] };
    expect(stripSensitive(attributes, [[getAttr('b'), { type: 'splat' }]])).toEqual({ a: 'keep', d: ['x'] });
    expect(stripSensitive(attributes, [[{ type: 'weird' }]])).toEqual({});
    expect(stripSensitive(attributes, [[]])).toEqual({});
    expect(stripSensitive(attributes, ['not a path'])).toEqual({});
    // a path naming nothing present removes nothing; the input is not modified
    expect(stripSensitive(attributes, [[getAttr('zz'), getAttr('y')], [getAttr('d'), index(5)]])).toEqual(attributes);
    expect(stripSensitive(attributes, [[getAttr('b'), getAttr('c')]])).toEqual({ a: 'keep', b: {}, d: ['x'] });
    expect(attributes.b).toEqual({ c: 'secret-1' });
  });

  it('refuses what is not format 4, with what to do', () => {
    const refuse = (value: unknown) => {
      try {
        readState(value);
      } catch (error) {
        expect(error).toBeInstanceOf(StateFormatError);
        return (error as Error).message;
      }
      throw new Error('accepted');
    };
    expect(() => parseState('{ nope')).toThrow(/not JSON.*terraform state pull/);
    expect(refuse([])).toMatch(/expected a JSON object/);
    expect(refuse({ version: 3, serial: 1, lineage: 'x' })).toMatch(/format version 3.*only format 4.*Terraform 1\.x/);
    expect(refuse({ serial: 1, lineage: 'x' })).toMatch(/is this a Terraform state file/);
    expect(refuse({ version: 4, serial: 1 })).toMatch(/lineage/);
    expect(refuse({ version: 4, serial: -1, lineage: 'x' })).toMatch(/serial/);
    expect(refuse(minimalState([{ mode: 'other', type: 't', name: 'n', instances: [] }]))).toMatch(/resources\[0\]\.mode/);
    expect(refuse(minimalState([managed('t', 'n', [{ attributes: 'x' }])]))).toMatch(/resources\[0\]\.instances\[0\]\.attributes must be an object/);
    expect(refuse(minimalState([managed('t', 'n', [{ attributes_flat: { a: '1' } }])]))).toMatch(/attributes_flat.*refresh-only/);
    expect(refuse(minimalState([managed('t', 'n', [{ index_key: -1, attributes: {} }])]))).toMatch(/index_key/);
  });

  it('parses module paths with count and for_each keys, quotes and dots included', () => {
    expect(parseModulePath('module.a[0].module.b["x.y]\\"z"]')).toEqual([
      { name: 'a', key: 0 },
      { name: 'b', key: 'x.y]"z' },
    ]);
    expect(parseModulePath(undefined)).toEqual([]);
    expect(() => parseModulePath('module.a[')).toThrow(StateFormatError);
  });
});

describe('entity names', () => {
  const sha8 = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 8);

  it('turns an address into a name: module keys and instance keys after "/"', () => {
    expect(entityNameOf({ module: 'module.app[0]', type: 'aws_instance', name: 'web' }, 1)).toBe('module.app/0.aws_instance.web/1');
    expect(entityNameOf({ module: undefined, type: 'aws_subnet', name: 'private' }, 'us-east-1a')).toBe('aws_subnet.private/us-east-1a');
    expect(entityNameOf({ module: 'module.a.module.b["k"]', type: 't', name: 'n' }, undefined)).toBe('module.a.module.b/k.t.n');
  });

  it('replaces characters outside the alphabet with "-" and marks the name with the address hash', () => {
    const address = 'aws_iam_user.users["Jane Doe"]';
    expect(entityNameOf({ module: undefined, type: 'aws_iam_user', name: 'users' }, 'Jane Doe')).toBe(`aws_iam_user.users/Jane-Doe-${sha8(address)}`);
    // two keys that sanitize alike stay distinct
    const a = entityNameOf({ module: undefined, type: 't', name: 'n' }, 'a b');
    const b = entityNameOf({ module: undefined, type: 't', name: 'n' }, 'a*b');
    expect(a).not.toBe(b);
  });

  it('cuts a long name to 128 characters, ending in the address hash', () => {
    const key = 'k'.repeat(200);
    const name = entityNameOf({ module: undefined, type: 'aws_s3_object', name: 'o' }, key);
    expect(name).toHaveLength(128);
    expect(name.endsWith(`-${sha8(`aws_s3_object.o["${key}"]`)}`)).toBe(true);
    expect(name).toMatch(/^[a-zA-Z0-9][a-zA-Z0-9._:/-]*$/);
  });

  it('names relationship types per pair of entity types, hash-suffixed past 128', () => {
    expect(relationshipTypeNameOf('aws_instance', 'aws_subnet')).toBe('dependsOn.aws_instance.aws_subnet');
    const long = relationshipTypeNameOf('a'.repeat(70), 'b'.repeat(70));
    expect(long).toHaveLength(128);
    expect(long.startsWith('dependsOn.aaa')).toBe(true);
  });
});

describe('mapping the fixture', () => {
  const mapped = mapState(parseState(fixtureText()));

  it('maps every managed instance to an entity and skips data sources', () => {
    expect(mapped.source).toBe('terraform:3f9c2a4e-8b1d-4e7a-9c55-0d2e1f6a7b81');
    expect(mapped.dataSourceInstances).toBe(1);
    expect(mapped.entities).toHaveLength(16);
    const names = mapped.entities.map((entity) => entity.name);
    expect(names).toContain('aws_vpc.main');
    expect(names).toContain('aws_subnet.private/us-east-1b');
    expect(names).toContain('module.app/1.aws_instance.web/0');
    expect(names).toContain('module.app/0.module.db/primary.aws_db_instance.this');
    expect(names.some((name) => name.startsWith('aws_iam_user.users/Jane-Doe-'))).toBe(true);
    expect(names.some((name) => name.includes('aws_availability_zones'))).toBe(false);
    const web = mapped.entities.find((entity) => entity.name === 'module.app/1.aws_instance.web/0')!;
    expect(web.labels).toEqual({ 'terraform.io/address': 'module.app[1].aws_instance.web[0]', 'terraform.io/serial': '7' });
    expect(web.entityType).toBe('aws_instance');
    // null attributes are left out
    expect('user_data' in web.attributes).toBe(false);
  });

  it('infers one definition per attribute; values that disagree in type become a string definition', () => {
    expect(Object.fromEntries(mapped.inferred.get('aws_vpc')!)).toEqual({
      arn: 'string',
      cidr_block: 'string',
      enable_dns_hostnames: 'boolean',
      enable_dns_support: 'boolean',
      id: 'string',
      instance_tenancy: 'string',
      ipv6_cidr_block: 'string',
      tags: 'object',
      tags_all: 'object',
    });
    const instance = mapped.inferred.get('aws_instance')!;
    expect(instance.get('cpu_core_count')).toBe('number');
    expect(instance.get('root_block_device')).toBe('array');
    expect(instance.get('user_data')).toBe('string');
    expect(mapped.inferred.get('terraform_data')!.get('input')).toBe('string');
    expect(mapped.inferred.get('aws_db_instance')!.has('password')).toBe(false);
  });

  it('links each instance to every instance of each managed resource it depends on', () => {
    expect(mapped.relationships).toHaveLength(27);
    const from = (name: string) => mapped.relationships.filter((relationship) => relationship.from === name).map((r) => `${r.relationshipType} ${r.to}`).sort();
    expect(from('module.app/0.aws_instance.web/1')).toEqual([
      'dependsOn.aws_instance.aws_security_group aws_security_group.web',
      'dependsOn.aws_instance.aws_subnet aws_subnet.private/us-east-1a',
      'dependsOn.aws_instance.aws_subnet aws_subnet.private/us-east-1b',
    ]);
    // within module.app[0], "module.app.aws_instance.web" is that call's instances only
    expect(from('module.app/0.module.db/primary.aws_db_instance.this')).toEqual([
      'dependsOn.aws_db_instance.aws_instance module.app/0.aws_instance.web/0',
      'dependsOn.aws_db_instance.aws_instance module.app/0.aws_instance.web/1',
      'dependsOn.aws_db_instance.aws_subnet aws_subnet.private/us-east-1a',
      'dependsOn.aws_db_instance.aws_subnet aws_subnet.private/us-east-1b',
    ]);
    // from the root, a counted resource in a counted module is every instance of every call
    expect(from('aws_eip.nat/0')).toHaveLength(4);
    // data-source dependencies link nothing
    expect(mapped.relationships.some((relationship) => relationship.to.includes('availability'))).toBe(false);
    expect([...mapped.relationshipTypes.values()].find((type) => type.name === 'dependsOn.aws_eip.aws_instance')).toEqual({
      name: 'dependsOn.aws_eip.aws_instance',
      from: 'aws_eip',
      to: 'aws_instance',
    });
    expect(mapped.relationshipTypes.size).toBe(7);
  });

  it('refuses two addresses that map to one name', () => {
    const state = readState(minimalState([managed('t', 'n', [{ index_key: 'a/b', attributes: {} }]), managed('t', 'n', [{ index_key: 'a/b', attributes: {} }])]));
    expect(() => mapState(state)).toThrow(/same entity name/);
  });

  it('leaves out attribute names that cannot be property names, and reports them', () => {
    const state = readState(minimalState([managed('t', 'n', [{ attributes: { ok: 1, _hidden: 2, 'has space': 3 } }])]));
    const result = mapState(state);
    expect(result.entities[0]!.attributes).toEqual({ ok: 1 });
    expect(result.skippedProperties.map((skipped) => skipped.property).sort()).toEqual(['_hidden', 'has space']);
  });
});

describe('entity types and properties', () => {
  const mapped = mapState(parseState(fixtureText()));
  const existing = (overrides: Partial<EntityTypeView>): EntityTypeView => ({
    name: 'aws_vpc',
    displayName: 'VPC',
    states: ['present', 'retired'],
    initialState: 'present',
    properties: [],
    metrics: [{ name: 'cpu' }],
    constraints: [],
    syncTracked: false,
    syncFreshness: null,
    applier: null,
    ...overrides,
  });

  it('creates a missing type as the design says', () => {
    const plan = planEntityTypes(mapped, new Map());
    const vpc = plan.create.find((type) => type.name === 'aws_vpc')!;
    expect(vpc).toMatchObject({ kind: 'EntityType', states: ['present'], initialState: 'present', syncTracked: true, applier: 'terraform' });
    expect(vpc.properties.find((property) => property.name === 'tags')).toEqual({ name: 'tags', type: 'object' });
    expect(plan.extend).toEqual([]);
  });

  it('extends an existing type with the missing definitions only, keeping every other field', () => {
    const type = existing({ properties: [{ name: 'cidr_block', type: 'string', required: true }, { name: 'tags', type: 'array' }] });
    const plan = planEntityTypes(mapped, new Map([['aws_vpc', type]]));
    const extension = plan.extend.find((entry) => entry.body.name === 'aws_vpc')!;
    expect(extension.added).not.toContain('tags');
    expect(extension.added).toContain('arn');
    expect(extension.body).toMatchObject({ displayName: 'VPC', states: ['present', 'retired'], metrics: [{ name: 'cpu' }], syncTracked: false });
    expect(extension.body.properties.slice(0, 2)).toEqual(type.properties);
    expect(extendedEntityType(type, []).properties).toEqual(type.properties);
    // a value whose type disagrees with an existing non-string definition is left out
    const vpc = mapped.entities.find((entity) => entity.name === 'aws_vpc.main')!;
    const resolved = resolveProperties(vpc, plan.definitions.get('aws_vpc')!);
    expect(resolved.ok).toBe(true);
    if (resolved.ok) {
      expect(resolved.properties.tags).toBeUndefined();
      expect(resolved.skipped).toEqual([{ property: 'tags', reason: 'a object value does not match the type\'s definition (array)' }]);
    }
  });

  it('stores a value as JSON text under a string definition', () => {
    const data = mapped.entities.filter((entity) => entity.entityType === 'terraform_data');
    const definitions = planEntityTypes(mapped, new Map()).definitions.get('terraform_data')!;
    const values = data.map((entity) => {
      const resolved = resolveProperties(entity, definitions);
      return resolved.ok ? resolved.properties.input : undefined;
    });
    expect(values).toEqual(['plain text', '{"replicas":3}']);
  });

  it('marks an entity its type refuses (required property missing)', () => {
    const vpc = mapped.entities.find((entity) => entity.name === 'aws_vpc.main')!;
    const refused = resolveProperties(vpc, [{ name: 'owner', type: 'string', required: true }, { name: 'id', type: 'string' }]);
    expect(refused).toEqual({ ok: false, reason: 'properties.owner is required' });
    const filled = resolveProperties(vpc, [{ name: 'owner', type: 'string', required: true, default: 'platform' }, { name: 'id', type: 'string' }]);
    expect(filled.ok && filled.properties).toEqual({ id: 'vpc-0a1b2c3d4e5f60718', owner: 'platform' });
    const plan = planEntityTypes(mapped, new Map([['aws_vpc', existing({ properties: [{ name: 'owner', type: 'string', required: true }] })]]));
    const entities = planEntities(mapped, plan, new Map());
    expect(entities.invalid).toEqual([{ name: 'aws_vpc.main', address: 'aws_vpc.main', reason: 'properties.owner is required' }]);
  });

  it('refuses a value the API would refuse (NUL text) for that entity alone', () => {
    const state = readState(minimalState([managed('t', 'n', [{ attributes: { a: 'x\u0000y' } }]), managed('t', 'm', [{ attributes: { a: 'fine' } }])]));
    const local = mapState(state);
    const plan = planEntities(local, planEntityTypes(local, new Map()), new Map());
    expect(plan.invalid.map((invalid) => invalid.name)).toEqual(['t.n']);
    expect(plan.send.map((entity) => entity.name)).toEqual(['t.m']);
  });
});

describe('plan', () => {
  const mapped = mapState(parseState(fixtureText()));
  const types = planEntityTypes(mapped, new Map());
  const stored = (name: string, overrides: Partial<StoredEntity> = {}): StoredEntity => ({
    id: `id-${name}`,
    name,
    entityTypeName: 'aws_vpc',
    properties: {},
    labels: {},
    syncSource: mapped.source,
    ...overrides,
  });

  it('sends nothing for an owned entity stored exactly as desired (key order ignored)', () => {
    const first = planEntities(mapped, types, new Map());
    const vpc = first.send.find((entity) => entity.name === 'aws_vpc.main')!;
    const reordered = JSON.parse(canonicalJson(vpc.properties)) as Record<string, unknown>;
    const owned = new Map([['aws_vpc.main', stored('aws_vpc.main', { properties: Object.fromEntries(Object.entries(reordered).reverse()), labels: vpc.labels })]]);
    const second = planEntities(mapped, types, owned);
    expect(second.unchanged).toEqual(['aws_vpc.main']);
    expect(second.send).toHaveLength(15);
  });

  it('deletes owned entities gone from the state, up to 10 % of what the source owns by default', () => {
    const owned = new Map(Array.from({ length: 30 }, (_, i) => [`gone.${i}`, stored(`gone.${i}`)] as [string, StoredEntity]));
    const plan = planEntities(mapped, types, owned);
    expect(plan.deletes).toHaveLength(30);
    expect(plan.deletion).toEqual({ count: 30, limit: 3, owned: 30, forced: false, exceeded: true });
    expect(planEntities(mapped, types, owned, { maxDelete: 30 }).deletion.exceeded).toBe(false);
    expect(planEntities(mapped, types, owned, { force: true }).deletion.exceeded).toBe(false);
    expect(deletionCheck(1, 9, {})).toMatchObject({ limit: 0, exceeded: true });
    expect(deletionCheck(1, 10, {})).toMatchObject({ limit: 1, exceeded: false });
    const message = new ImportRefusedError('terraform:x', plan.deletion).message;
    expect(message).toContain('delete 30 entities');
    expect(message).toContain('limit of 3');
    expect(message).toContain('--max-delete 30');
    expect(message).toContain('--force');
  });

  it('classifies locally as the batch endpoint would: create, update, unchanged, conflicts', () => {
    const plan = planEntities(mapped, types, new Map());
    const [a, b, c, d] = plan.send;
    const owned = new Map([
      [b!.name, stored(b!.name, { entityTypeName: b!.entityType, properties: { other: 1 } })],
      [c!.name, stored(c!.name, { entityTypeName: c!.entityType, properties: c!.properties, labels: c!.labels })],
      [d!.name, stored(d!.name, { entityTypeName: 'something_else' })],
    ]);
    const others = new Map([[a!.name, stored(a!.name, { syncSource: null })]]);
    const outcome = classifyLocally([a!, b!, c!, d!], owned, others);
    expect(outcome).toEqual({
      created: [],
      updated: [b!.name],
      unchanged: 1,
      conflicts: [
        { name: a!.name, reason: 'created by hand', syncSource: null },
        { name: d!.name, reason: 'different entity type', syncSource: mapped.source },
      ],
    });
    expect(namePrefixes(['module.app/0.x.y', 'aws_vpc.main', 'aws_vpc.other', 'plain'])).toEqual(['aws_vpc.', 'module.', 'plain']);
  });

  it('plans relationships: create between present ends, skip the rest, delete or let cascade what is gone', () => {
    const rel = (from: string, to: string) => ({ relationshipType: 'dependsOn.a.b', from, to });
    const plan = planRelationships({
      desired: [rel('a1', 'b1'), rel('a1', 'b2'), rel('a2', 'b1'), rel('a3', 'b1')],
      existing: [rel('a1', 'b1'), rel('a1', 'b9'), rel('a4', 'b1'), rel('a1', 'b3')],
      present: new Set(['a1', 'a2', 'b1', 'b2', 'b3', 'b9']),
      deleted: new Set(['b9', 'a4']),
      unusableTypes: new Set(),
    });
    expect(plan).toEqual({ create: [rel('a1', 'b2'), rel('a2', 'b1')], unchanged: 1, skipped: 1, delete: [rel('a1', 'b3')], cascaded: 2 });
  });

  it('chunks by count and by bytes', () => {
    const items = Array.from({ length: 2500 }, (_, i) => ({ i }));
    expect(chunk(items, 1000, 1_000_000).map((part) => part.length)).toEqual([1000, 1000, 500]);
    const big = Array.from({ length: 5 }, () => ({ blob: 'x'.repeat(300_000) }));
    expect(chunk(big, 1000, 800_000).map((part) => part.length)).toEqual([2, 2, 1]);
    expect(chunk([], 10, 10)).toEqual([]);
  });
});

describe('generateState', () => {
  it('is deterministic and has exactly the managed instances asked for', () => {
    const a = JSON.stringify(generateState({ resources: 1234 }));
    expect(JSON.stringify(generateState({ resources: 1234 }))).toBe(a);
    const mapped = mapState(parseState(a));
    expect(mapped.entities).toHaveLength(1234);
    expect(mapped.dataSourceInstances).toBe(1);
    expect(mapped.relationships.length).toBeGreaterThan(1234);
    // its sensitive passwords are stripped like any other
    expect(JSON.stringify(mapped.entities)).not.toMatch(/pw-[0-9a-f]{16}/);
    expect(a).toMatch(/pw-[0-9a-f]{16}/);
  });
});
