import { createHash } from 'node:crypto';
import { findHostileJson } from '../../http/hostile-input';
import { NAME_PATTERN } from '../../modules/names';
import { matchesType, validateProperties, type PropertyDefinition, type PropertyType } from '../../modules/properties';
import {
  formatIndexKey,
  instanceAddress,
  parseModulePath,
  resourceAddress,
  StateFormatError,
  type IndexKey,
  type ModuleStep,
  type TerraformState,
} from './state';

/**
 * From a parsed state to what the catalog should hold: one entity type per
 * managed resource type, one entity per managed instance, one `dependsOn`
 * relationship per (instance, instance of a resource it depends on). Pure:
 * no I/O, so every rule here is unit-tested (docs/terraform-import.md).
 */

export const ADDRESS_LABEL = 'terraform.io/address';
export const SERIAL_LABEL = 'terraform.io/serial';
export const MAX_NAME_LENGTH = 128;
const MAX_LABEL_VALUE = 1024;
const RESERVED_ENTITY_NAMES = new Set(['metrics', 'stream']);

/** `terraform:<lineage>`: the owner every imported entity is stamped with. */
export const sourceOf = (lineage: string) => `terraform:${lineage}`;

const sha8 = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 8);

/** Keeps a name within 128 characters and marks an altered one: `-` + 8 hex of SHA-256 of `original`. */
function finishName(name: string, altered: boolean, original: string): string {
  if (!altered && name.length <= MAX_NAME_LENGTH && NAME_PATTERN.test(name) && !RESERVED_ENTITY_NAMES.has(name)) return name;
  const suffix = `-${sha8(original)}`;
  return name.slice(0, MAX_NAME_LENGTH - suffix.length) + suffix;
}

const KEY_CHARACTER = /[a-zA-Z0-9._:/-]/;

function keyPart(key: IndexKey | undefined): { text: string; altered: boolean } {
  if (key === undefined) return { text: '', altered: false };
  const raw = String(key);
  let altered = false;
  let text = '';
  for (const ch of raw) {
    if (KEY_CHARACTER.test(ch)) text += ch;
    else {
      text += '-';
      altered = true;
    }
  }
  return { text: `/${text}`, altered };
}

/**
 * The entity name of an instance: `module.app[0].aws_instance.web[1]` →
 * `module.app/0.aws_instance.web/1`; `aws_subnet.private["us-east-1a"]` →
 * `aws_subnet.private/us-east-1a`. A key character outside the name alphabet
 * becomes `-`; a name so altered, or longer than 128, ends in `-` + 8 hex of
 * the SHA-256 of the full address (the name cut to fit before it).
 */
export function entityNameOf(resource: { type: string; name: string; module: string | undefined }, indexKey: IndexKey | undefined): string {
  return namerFor(resource, parseModulePath(resource.module))(indexKey);
}

/** The names of one resource's instances: the module part is worked out once per resource. */
function namerFor(resource: { type: string; name: string; module: string | undefined }, module: ModuleStep[]): (indexKey: IndexKey | undefined) => string {
  let moduleAltered = false;
  let prefix = '';
  for (const step of module) {
    const key = keyPart(step.key);
    moduleAltered ||= key.altered;
    prefix += `module.${step.name}${key.text}.`;
  }
  prefix += `${resource.type}.${resource.name}`;
  const addressPrefix = resourceAddress({ ...resource, mode: 'managed' });
  return (indexKey) => {
    const key = keyPart(indexKey);
    return finishName(prefix + key.text, moduleAltered || key.altered, addressPrefix + formatIndexKey(indexKey));
  };
}

/** `dependsOn.<fromType>.<toType>`, hash-suffixed like an entity name when it would pass 128 characters. */
export const relationshipTypeNameOf = (fromType: string, toType: string): string => {
  const name = `dependsOn.${fromType}.${toType}`;
  return finishName(name, false, name);
};

export type ValueKind = 'string' | 'number' | 'boolean' | 'object' | 'array';

export function kindOf(value: unknown): ValueKind {
  if (Array.isArray(value)) return 'array';
  switch (typeof value) {
    case 'string':
      return 'string';
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    default:
      return 'object';
  }
}

export interface DesiredEntity {
  name: string;
  address: string;
  entityType: string;
  /** Top-level attributes (sensitive paths gone, nulls left out), before resolution against the type's definitions. */
  attributes: Record<string, unknown>;
  labels: Record<string, string>;
}

export interface DesiredRelationship {
  relationshipType: string;
  from: string;
  to: string;
}

export interface RelationshipTypeSpec {
  name: string;
  from: string;
  to: string;
}

export interface SkippedProperty {
  entityType: string;
  property: string;
  reason: string;
  /** How many entities lost the value. */
  count: number;
}

export interface MappedState {
  source: string;
  lineage: string;
  serial: number;
  terraformVersion: string;
  entities: DesiredEntity[];
  /** Inferred property definitions per entity type, by property name. */
  inferred: Map<string, Map<string, PropertyType>>;
  relationships: DesiredRelationship[];
  relationshipTypes: Map<string, RelationshipTypeSpec>;
  /** Attribute names that cannot be property names (DECISIONS §1: 1–128 chars, `^[a-zA-Z0-9][a-zA-Z0-9._:/-]*$`). */
  skippedProperties: SkippedProperty[];
  /** Instances of data sources, which are not imported. */
  dataSourceInstances: number;
  /** Managed resources. */
  resourceCount: number;
}

/**
 * The instances of one resource (its address without any instance key, as
 * `dependencies` name it), with the module instance keys of each.
 */
class ResourceGroup {
  readonly #instances: { name: string; keys: (IndexKey | undefined)[] }[] = [];
  /** by shared prefix length, then by the keys of that prefix: built on first use */
  readonly #byPrefix = new Map<number, Map<string, string[]>>();

  constructor(
    readonly type: string,
    readonly moduleNames: string[],
  ) {}

  add(name: string, module: ModuleStep[]): void {
    this.#instances.push({ name, keys: module.map((step) => step.key) });
  }

  /**
   * The instances a dependent in module instance `module` depends on.
   * Terraform records a dependency without instance keys
   * (`module.app.aws_subnet.private`), so within a module called with
   * count or for_each it cannot say which call's instance is meant; the
   * module calls both share are taken to be the same call (`module.app["a"]`
   * depends on the subnets of `module.app["a"]`, not of `module.app["b"]`).
   * Beyond the shared calls, every instance counts.
   */
  instancesFor(module: ModuleStep[]): string[] {
    let shared = 0;
    while (shared < module.length && shared < this.moduleNames.length && module[shared]!.name === this.moduleNames[shared]) shared++;
    let index = this.#byPrefix.get(shared);
    if (!index) {
      index = new Map();
      for (const instance of this.#instances) {
        const key = JSON.stringify(instance.keys.slice(0, shared));
        const names = index.get(key) ?? [];
        names.push(instance.name);
        index.set(key, names);
      }
      this.#byPrefix.set(shared, index);
    }
    return index.get(JSON.stringify(module.slice(0, shared).map((step) => step.key))) ?? [];
  }
}

const validPropertyName = (name: string) => name.length <= MAX_NAME_LENGTH && NAME_PATTERN.test(name);

/** The state as desired entities, inferred definitions and relationships. */
export function mapState(state: TerraformState): MappedState {
  const source = sourceOf(state.lineage);
  const serial = String(state.serial);
  const entities: DesiredEntity[] = [];
  const byName = new Map<string, DesiredEntity>();
  const kinds = new Map<string, Map<string, Set<ValueKind>>>();
  const badNames = new Map<string, SkippedProperty>();
  /** resource address without any instance key (`module.a.aws_x.y`) → its instances' entity names and type. */
  const byConfigAddress = new Map<string, ResourceGroup>();
  const dependents: { name: string; type: string; module: ModuleStep[]; dependencies: string[] }[] = [];
  let dataSourceInstances = 0;
  let resourceCount = 0;

  for (const resource of state.resources) {
    if (resource.mode === 'data') {
      dataSourceInstances += resource.instances.length;
      continue;
    }
    resourceCount += 1;
    let module: ModuleStep[];
    try {
      module = parseModulePath(resource.module);
    } catch (error) {
      throw new StateFormatError(`${resourceAddress(resource)}: ${(error as Error).message}`);
    }
    const configAddress = [...module.map((step) => `module.${step.name}`), `${resource.type}.${resource.name}`].join('.');
    const group = byConfigAddress.get(configAddress) ?? new ResourceGroup(resource.type, module.map((step) => step.name));
    byConfigAddress.set(configAddress, group);
    const nameOf = namerFor(resource, module);
    const typeKinds = kinds.get(resource.type) ?? new Map<string, Set<ValueKind>>();
    kinds.set(resource.type, typeKinds);

    for (const instance of resource.instances) {
      const address = instanceAddress(resource, instance);
      const name = nameOf(instance.indexKey);
      const clash = byName.get(name);
      if (clash) {
        throw new StateFormatError(`${address} and ${clash.address} map to the same entity name ${JSON.stringify(name)}; rename one of them in Terraform`);
      }
      const attributes: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(instance.attributes)) {
        if (value === null || value === undefined) continue;
        if (!validPropertyName(key)) {
          const id = `${resource.type}\u0000${key}`;
          const skipped = badNames.get(id) ?? { entityType: resource.type, property: key, reason: 'not a valid property name', count: 0 };
          skipped.count += 1;
          badNames.set(id, skipped);
          continue;
        }
        attributes[key] = value;
        const seen = typeKinds.get(key) ?? new Set<ValueKind>();
        seen.add(kindOf(value));
        typeKinds.set(key, seen);
      }
      const entity: DesiredEntity = {
        name,
        address,
        entityType: resource.type,
        attributes,
        labels: { [ADDRESS_LABEL]: address.slice(0, MAX_LABEL_VALUE), [SERIAL_LABEL]: serial },
      };
      entities.push(entity);
      byName.set(name, entity);
      group.add(name, module);
      if (instance.dependencies.length > 0) dependents.push({ name, type: resource.type, module, dependencies: instance.dependencies });
    }
  }

  const relationships: DesiredRelationship[] = [];
  const relationshipTypes = new Map<string, RelationshipTypeSpec>();
  for (const dependent of dependents) {
    const seen = new Set<string>();
    for (const dependency of dependent.dependencies) {
      // data sources and resources gone from the state have no entity: nothing to link
      const target = byConfigAddress.get(dependency);
      if (!target) continue;
      const relationshipType = relationshipTypeNameOf(dependent.type, target.type);
      if (!relationshipTypes.has(relationshipType)) relationshipTypes.set(relationshipType, { name: relationshipType, from: dependent.type, to: target.type });
      for (const to of target.instancesFor(dependent.module)) {
        const key = `${relationshipType}\u0000${to}`;
        if (to === dependent.name || seen.has(key)) continue;
        seen.add(key);
        relationships.push({ relationshipType, from: dependent.name, to });
      }
    }
  }

  const inferred = new Map<string, Map<string, PropertyType>>();
  for (const [type, typeKinds] of kinds) {
    const definitions = new Map<string, PropertyType>();
    for (const [name, seen] of [...typeKinds].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      // values of one name that disagree in type are stored as JSON text under a `string` definition
      definitions.set(name, seen.size === 1 ? ([...seen][0] as PropertyType) : 'string');
    }
    inferred.set(type, definitions);
  }

  return {
    source,
    lineage: state.lineage,
    serial: state.serial,
    terraformVersion: state.terraformVersion,
    entities,
    inferred,
    relationships,
    relationshipTypes,
    skippedProperties: [...badNames.values()],
    dataSourceInstances,
    resourceCount,
  };
}

/** The fields of an entity type this import reads and writes back (SPEC EntityType response). */
export interface EntityTypeView {
  name: string;
  displayName: string | null;
  states: string[];
  initialState: string;
  properties: PropertyDefinition[];
  metrics: unknown[];
  constraints: unknown[];
  syncTracked: boolean;
  syncFreshness: unknown;
  applier: string | null;
}

export interface EntityTypeRequestBody {
  kind: 'EntityType';
  name: string;
  displayName?: string;
  states: string[];
  initialState: string;
  properties: PropertyDefinition[];
  metrics?: unknown[];
  constraints?: unknown[];
  syncTracked: boolean;
  syncFreshness?: unknown;
  applier?: string;
}

export interface TypePlan {
  /** Types to create, with every inferred definition. */
  create: EntityTypeRequestBody[];
  /** Existing types to PUT back with their fields plus the definitions they lack. */
  extend: { body: EntityTypeRequestBody; added: string[] }[];
  /** The definitions each type has once the plan is applied. */
  definitions: Map<string, PropertyDefinition[]>;
}

/** The new type for a Terraform resource type (design in docs/terraform-import.md). */
export const newEntityType = (name: string, properties: PropertyDefinition[]): EntityTypeRequestBody => ({
  kind: 'EntityType',
  name,
  states: ['present'],
  initialState: 'present',
  properties,
  syncTracked: true,
  applier: 'terraform',
});

/** The PUT body that keeps every field of `existing` and appends `added` definitions. */
export function extendedEntityType(existing: EntityTypeView, added: PropertyDefinition[]): EntityTypeRequestBody {
  const body: EntityTypeRequestBody = {
    kind: 'EntityType',
    name: existing.name,
    states: existing.states,
    initialState: existing.initialState,
    properties: [...existing.properties, ...added],
    metrics: existing.metrics,
    constraints: existing.constraints,
    syncTracked: existing.syncTracked,
  };
  if (existing.displayName !== null) body.displayName = existing.displayName;
  if (existing.syncFreshness !== null && existing.syncFreshness !== undefined) body.syncFreshness = existing.syncFreshness;
  if (existing.applier !== null) body.applier = existing.applier;
  return body;
}

/** Which types to create or extend, given the project's types now. Existing definitions are never removed or retyped. */
export function planEntityTypes(mapped: MappedState, existing: Map<string, EntityTypeView>): TypePlan {
  const plan: TypePlan = { create: [], extend: [], definitions: new Map() };
  for (const [type, inferred] of mapped.inferred) {
    const inferredDefinitions = [...inferred].map(([name, kind]): PropertyDefinition => ({ name, type: kind }));
    const current = existing.get(type);
    if (!current) {
      plan.create.push(newEntityType(type, inferredDefinitions));
      plan.definitions.set(type, inferredDefinitions);
      continue;
    }
    const declared = new Set(current.properties.map((definition) => definition.name));
    const added = inferredDefinitions.filter((definition) => !declared.has(definition.name));
    if (added.length > 0) plan.extend.push({ body: extendedEntityType(current, added), added: added.map((definition) => definition.name) });
    plan.definitions.set(type, [...current.properties, ...added]);
  }
  return plan;
}

export type ResolvedEntity =
  | { ok: true; properties: Record<string, unknown>; skipped: { property: string; reason: string }[] }
  | { ok: false; reason: string };

/**
 * An entity's attributes as the properties its type's definitions accept:
 * a value of the declared type is kept; a value of another type is stored
 * as JSON text when the definition is `string` (so a name whose values
 * disagreed across instances, or an existing `string` definition, keeps
 * the value), and otherwise left out (reported); a value outside a
 * definition's `enum` is left out too. Then the API's own validation runs
 * (defaults filled, required checked), so the values compared and sent are
 * exactly what the server would store.
 */
export function resolveProperties(entity: DesiredEntity, definitions: PropertyDefinition[]): ResolvedEntity {
  const byName = new Map(definitions.map((definition) => [definition.name, definition]));
  const properties: Record<string, unknown> = {};
  const skipped: { property: string; reason: string }[] = [];
  for (const [name, value] of Object.entries(entity.attributes)) {
    const definition = byName.get(name);
    if (!definition) {
      skipped.push({ property: name, reason: 'not declared by the entity type' });
      continue;
    }
    let stored = value;
    if (!matchesType(definition.type, value)) {
      if (definition.type !== 'string') {
        skipped.push({ property: name, reason: `a ${kindOf(value)} value does not match the type's definition (${definition.type})` });
        continue;
      }
      stored = JSON.stringify(value);
    }
    if (definition.enum && !definition.enum.some((allowed) => JSON.stringify(allowed) === JSON.stringify(stored))) {
      skipped.push({ property: name, reason: "value is not one of the definition's enum" });
      continue;
    }
    properties[name] = stored;
  }
  const validated = validateProperties(definitions, properties, { fillDefaults: true });
  if (!validated.ok) {
    return { ok: false, reason: validated.details.map((detail) => `${detail.path} ${detail.message}`).join('; ') };
  }
  return { ok: true, properties: validated.values, skipped };
}

/**
 * JSON.stringify writes U+0000 as `\u0000` and a lone surrogate as `\udxxx`
 * (a valid pair stays raw), so the serialized entity shows at a glance
 * whether the API's edge check (src/http/hostile-input.ts) could refuse it.
 */
const SUSPECT_JSON = /\\u0000|\\ud[89a-f][0-9a-f]{2}/i;

/**
 * Why the API would refuse this entity's text at its edge (NUL, a lone
 * surrogate), or undefined; `json` is the entity serialized. Nesting past the
 * API's bound is left to the API: its refusal names the item, which the
 * import then reports and drops (run.ts, sendChunk).
 */
export function hostileReason(json: string, item: { properties: Record<string, unknown>; labels: Record<string, string> }): string | undefined {
  if (!SUSPECT_JSON.test(json)) return undefined;
  const details = findHostileJson({ entities: [item] });
  return details.length > 0 ? details.map((detail) => `${detail.path.replace(/^entities\.0\./, '')} ${detail.message}`).join('; ') : undefined;
}
