/**
 * Terraform state, format 4 (what Terraform 0.12 through 1.x writes): parsed,
 * checked, and cut down to what the import reads. Every path listed in an
 * instance's `sensitive_attributes` is removed from its attributes here, as
 * the instance is read, so nothing after this module ever sees a sensitive
 * value; `private` (provider-private data), `outputs` and the sensitivity
 * lists themselves are not kept either (docs/terraform-import.md).
 */

export type IndexKey = number | string;

export interface StateInstance {
  /** `count` index (number), `for_each` key (string), or undefined for a single instance. */
  indexKey: IndexKey | undefined;
  /** The attributes, with every sensitive path already removed. */
  attributes: Record<string, unknown>;
  /** Resource addresses (module path without instance keys), as Terraform records them. */
  dependencies: string[];
}

export interface StateResource {
  mode: 'managed' | 'data';
  type: string;
  name: string;
  /** The module instance path, e.g. `module.a[0].module.b["x"]`; undefined in the root module. */
  module: string | undefined;
  provider: string;
  instances: StateInstance[];
}

export interface TerraformState {
  version: 4;
  terraformVersion: string;
  serial: number;
  lineage: string;
  resources: StateResource[];
}

/** The state cannot be read: not JSON, not format 4, or a field of the wrong shape. The message says where. */
export class StateFormatError extends Error {
  override readonly name = 'StateFormatError';
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Parses and checks a state file's text; sensitive paths are stripped instance by instance. */
export function parseState(text: string, origin = 'the state'): TerraformState {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new StateFormatError(`${origin} is not JSON (${(error as Error).message}); pass a Terraform state file (terraform.tfstate, or \`terraform state pull > state.json\`)`);
  }
  return readState(raw, origin);
}

/** Checks an already parsed state (the object is read, not kept: its sensitive values are dropped with it). */
export function readState(raw: unknown, origin = 'the state'): TerraformState {
  if (!isObject(raw)) throw new StateFormatError(`${origin} is not a Terraform state: expected a JSON object`);
  if (raw.version !== 4) {
    const hint =
      typeof raw.version === 'number' && raw.version < 4
        ? ' (written by Terraform 0.11 or older: run `terraform apply` or `terraform refresh` with Terraform 1.x to upgrade it)'
        : raw.version === undefined
          ? ' (no "version": is this a Terraform state file?)'
          : '';
    throw new StateFormatError(`${origin} has format version ${JSON.stringify(raw.version)}; only format 4 (Terraform 0.12 and later) is supported${hint}`);
  }
  const lineage = raw.lineage;
  if (typeof lineage !== 'string' || lineage.length === 0 || lineage.length > 246) {
    throw new StateFormatError(`${origin}: "lineage" must be a non-empty string of at most 246 characters (it names the import's source, terraform:<lineage>)`);
  }
  if (typeof raw.serial !== 'number' || !Number.isSafeInteger(raw.serial) || raw.serial < 0) {
    throw new StateFormatError(`${origin}: "serial" must be a non-negative integer`);
  }
  const resources = raw.resources ?? [];
  if (!Array.isArray(resources)) throw new StateFormatError(`${origin}: "resources" must be an array`);
  return {
    version: 4,
    terraformVersion: typeof raw.terraform_version === 'string' ? raw.terraform_version : 'unknown',
    serial: raw.serial,
    lineage,
    resources: resources.map((resource, i) => readResource(resource, `${origin}: resources[${i}]`)),
  };
}

function readResource(raw: unknown, at: string): StateResource {
  if (!isObject(raw)) throw new StateFormatError(`${at} must be an object`);
  const { mode, type, name, module, provider, instances } = raw;
  if (mode !== 'managed' && mode !== 'data') throw new StateFormatError(`${at}.mode must be "managed" or "data"`);
  if (typeof type !== 'string' || type === '') throw new StateFormatError(`${at}.type must be a non-empty string`);
  if (typeof name !== 'string' || name === '') throw new StateFormatError(`${at}.name must be a non-empty string`);
  if (module !== undefined && typeof module !== 'string') throw new StateFormatError(`${at}.module must be a string`);
  if (provider !== undefined && typeof provider !== 'string') throw new StateFormatError(`${at}.provider must be a string`);
  if (!Array.isArray(instances)) throw new StateFormatError(`${at}.instances must be an array`);
  return {
    mode,
    type,
    name,
    module: module === '' ? undefined : module,
    provider: provider ?? '',
    instances: instances.map((instance, i) => readInstance(instance, `${at}.instances[${i}]`)),
  };
}

function readInstance(raw: unknown, at: string): StateInstance {
  if (!isObject(raw)) throw new StateFormatError(`${at} must be an object`);
  const indexKey = raw.index_key;
  if (indexKey !== undefined && indexKey !== null && typeof indexKey !== 'string' && !(typeof indexKey === 'number' && Number.isSafeInteger(indexKey) && indexKey >= 0)) {
    throw new StateFormatError(`${at}.index_key must be a non-negative integer (count) or a string (for_each)`);
  }
  if (raw.attributes === undefined && raw.attributes_flat !== undefined) {
    throw new StateFormatError(
      `${at} holds only legacy "attributes_flat" (written by Terraform 0.11): run \`terraform apply -refresh-only\` with Terraform 1.x, then import again`,
    );
  }
  const attributes = raw.attributes ?? {};
  if (!isObject(attributes)) throw new StateFormatError(`${at}.attributes must be an object`);
  const dependencies = raw.dependencies ?? [];
  if (!Array.isArray(dependencies) || !dependencies.every((d) => typeof d === 'string')) {
    throw new StateFormatError(`${at}.dependencies must be an array of resource addresses`);
  }
  const sensitive = raw.sensitive_attributes ?? [];
  if (!Array.isArray(sensitive)) throw new StateFormatError(`${at}.sensitive_attributes must be an array of paths`);
  return {
    indexKey: indexKey === null ? undefined : (indexKey as IndexKey | undefined),
    attributes: stripSensitive(attributes, sensitive),
    dependencies: dependencies as string[],
  };
}

/**
 * The attributes without any value a `sensitive_attributes` path names: an
 * object key is removed, a list element becomes null (so the positions of
 * the others stay true). A path that cannot be followed (it names nothing
 * present) removes nothing; a path this reader does not understand removes
 * the whole top-level attribute it starts at, or every attribute when it
 * does not start at one — an unreadable path fails closed, never open.
 * Works on a copy: the parsed object, sensitive values included, is dropped
 * by the caller.
 */
export function stripSensitive(attributes: Record<string, unknown>, paths: unknown[]): Record<string, unknown> {
  if (paths.length === 0) return attributes;
  const out = structuredClone(attributes);
  for (const path of paths) {
    const steps = readPath(path);
    if (steps === 'unreadable') {
      const first = firstAttribute(path);
      if (first === undefined) return {};
      delete out[first];
      continue;
    }
    if (steps.length === 0) return {};
    removeAt(out, steps);
  }
  return out;
}

type Step = { kind: 'attr'; name: string } | { kind: 'index'; key: number | string };

/** A path as Terraform writes it: `[{type:"get_attr",value:"x"}, {type:"index",value:{value:0,type:"number"}}]`. */
function readPath(path: unknown): Step[] | 'unreadable' {
  if (!Array.isArray(path)) return 'unreadable';
  const steps: Step[] = [];
  for (const step of path) {
    if (!isObject(step)) return 'unreadable';
    if (step.type === 'get_attr' && typeof step.value === 'string') {
      steps.push({ kind: 'attr', name: step.value });
    } else if (step.type === 'index') {
      const key = isObject(step.value) ? step.value.value : step.value;
      if (typeof key === 'number' || typeof key === 'string') steps.push({ kind: 'index', key });
      else return 'unreadable';
    } else {
      return 'unreadable';
    }
  }
  return steps;
}

function firstAttribute(path: unknown): string | undefined {
  if (!Array.isArray(path)) return undefined;
  const first: unknown = path[0];
  return isObject(first) && first.type === 'get_attr' && typeof first.value === 'string' ? first.value : undefined;
}

function removeAt(root: Record<string, unknown>, steps: Step[]): void {
  let container: unknown = root;
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i]!;
    const last = i === steps.length - 1;
    const key = step.kind === 'attr' ? step.name : step.key;
    if (Array.isArray(container)) {
      if (typeof key !== 'number' || key < 0 || key >= container.length) return;
      if (last) {
        container[key] = null;
        return;
      }
      container = container[key];
    } else if (isObject(container)) {
      const name = String(key);
      if (!Object.hasOwn(container, name)) return;
      if (last) {
        delete container[name];
        return;
      }
      container = container[name];
    } else {
      return;
    }
  }
}

/** `[0]` or `["us-east-1a"]`, as Terraform prints an instance key. */
export const formatIndexKey = (key: IndexKey | undefined): string =>
  key === undefined ? '' : typeof key === 'number' ? `[${key}]` : `[${JSON.stringify(key)}]`;

/** The resource's address without its instance key: `module.app[0].aws_instance.web`, `data.aws_ami.ubuntu`. */
export function resourceAddress(resource: Pick<StateResource, 'mode' | 'type' | 'name' | 'module'>): string {
  const prefix = resource.module ? `${resource.module}.` : '';
  return `${prefix}${resource.mode === 'data' ? 'data.' : ''}${resource.type}.${resource.name}`;
}

/** The instance's full address: `module.app[0].aws_instance.web[1]`. */
export const instanceAddress = (resource: StateResource, instance: Pick<StateInstance, 'indexKey'>): string =>
  resourceAddress(resource) + formatIndexKey(instance.indexKey);

export interface ModuleStep {
  name: string;
  key: IndexKey | undefined;
}

/**
 * `module.a[0].module.b["x.y"]` → `[{name:"a",key:0},{name:"b",key:"x.y"}]`.
 * String keys are JSON-quoted, so a key may hold `.`, `]` or `"`.
 */
export function parseModulePath(module: string | undefined): ModuleStep[] {
  if (!module) return [];
  const steps: ModuleStep[] = [];
  let at = 0;
  const fail = (): never => {
    throw new StateFormatError(`module path ${JSON.stringify(module)} is not of the form module.<name>[<key>].module.<name>…`);
  };
  while (at < module.length) {
    if (!module.startsWith('module.', at)) fail();
    at += 'module.'.length;
    const nameMatch = /^[A-Za-z_][A-Za-z0-9_-]*/.exec(module.slice(at));
    if (!nameMatch) fail();
    const name = nameMatch![0];
    at += name.length;
    let key: IndexKey | undefined;
    if (module[at] === '[') {
      if (module[at + 1] === '"') {
        // a JSON string: find its closing quote, skipping escapes
        let end = at + 2;
        while (end < module.length && module[end] !== '"') end += module[end] === '\\' ? 2 : 1;
        if (module[end + 1] !== ']') fail();
        try {
          key = JSON.parse(module.slice(at + 1, end + 1)) as string;
        } catch {
          fail();
        }
        at = end + 2;
      } else {
        const numberMatch = /^\[(\d+)\]/.exec(module.slice(at));
        if (!numberMatch) fail();
        key = Number(numberMatch![1]);
        at += numberMatch![0].length;
      }
    }
    steps.push({ name, key });
    if (at < module.length) {
      if (module[at] !== '.') fail();
      at += 1;
    }
  }
  return steps;
}

/** The module path without instance keys (`module.a.module.b`), as `dependencies` name it. */
export const moduleConfigPath = (module: string | undefined): string =>
  parseModulePath(module)
    .map((step) => `module.${step.name}`)
    .join('.');
