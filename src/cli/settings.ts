import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { isMap, isScalar, parseDocument, type Document, type Scalar } from 'yaml';
import { UsageError } from './errors';

/**
 * The client's settings (SPEC "Client configuration"), each resolved in the
 * order flag > environment variable > config file > default, and remembered
 * with where its value came from so `cellplane config get` can say so.
 *
 * The config file is `$XDG_CONFIG_HOME/cellplane/config.yaml`, else
 * `~/.config/cellplane/config.yaml`: owner-only (0600) in an owner-only
 * directory (0700), because it holds the token in plaintext (SPEC).
 */

export const SETTING_KEYS = ['baseUrl', 'token', 'currentOrg', 'currentProject', 'currentEnv'] as const;
export type SettingKey = (typeof SETTING_KEYS)[number];

export interface SettingSpec {
  /** The global flag, as typed. */
  flag: string;
  /** Commander's attribute for the flag. */
  option: 'baseUrl' | 'token' | 'org' | 'project' | 'env';
  /** The environment variable. */
  variable: string;
  /** The built-in default. */
  fallback?: string;
  secret?: boolean;
}

export const SETTINGS: Record<SettingKey, SettingSpec> = {
  baseUrl: { flag: '--base-url', option: 'baseUrl', variable: 'SERVICE_BASE_URL' },
  token: { flag: '--token', option: 'token', variable: 'SERVICE_TOKEN', secret: true },
  currentOrg: { flag: '--org', option: 'org', variable: 'SERVICE_ORG_ID' },
  currentProject: { flag: '--project', option: 'project', variable: 'SERVICE_PROJECT_ID' },
  currentEnv: { flag: '--env', option: 'env', variable: 'SERVICE_ENV_NAME', fallback: 'default' },
};

/** In local mode only: the organization and project the embedded database starts with (issue 13). */
export const LOCAL_DEFAULTS: Partial<Record<SettingKey, string>> = { currentOrg: 'local', currentProject: 'default' };
/** Where local mode keeps its database unless --data-dir or SERVICE_DATA_DIR says otherwise. */
export const DEFAULT_DATA_DIR = '.cellplane';

export type SettingSource =
  | { kind: 'flag'; name: string }
  | { kind: 'env'; name: string }
  | { kind: 'file'; path: string }
  | { kind: 'default'; local?: boolean };

export interface ResolvedSetting {
  value: string | undefined;
  /** Undefined when nothing set it and there is no default. */
  source: SettingSource | undefined;
}

export interface ResolvedSettings {
  values: Record<SettingKey, ResolvedSetting>;
  /** --local, or SERVICE_LOCAL=1. */
  local: boolean;
  /** Local mode's database directory, absolute. */
  dataDir: string;
  /** --json. */
  json: boolean;
  /** SERVICE_DEBUG is set. */
  debug: boolean;
  configPath: string;
  /** Things to tell the user once (a config file others can read, unknown keys in it). */
  warnings: string[];
}

/** The global flags as commander parsed them. */
export interface GlobalFlags {
  baseUrl?: string;
  token?: string;
  org?: string;
  project?: string;
  env?: string;
  json?: boolean;
  local?: boolean;
  dataDir?: string;
}

export type Environment = Record<string, string | undefined>;

/** `$XDG_CONFIG_HOME/cellplane/config.yaml`, else `~/.config/cellplane/config.yaml` (a relative XDG_CONFIG_HOME is ignored, as the XDG spec says). */
export function configFilePath(env: Environment): string {
  const xdg = env.XDG_CONFIG_HOME;
  const base = xdg && isAbsolute(xdg) ? xdg : join(env.HOME || homedir(), '.config');
  return join(base, 'cellplane', 'config.yaml');
}

/** An empty value counts as unset, for flags and variables alike. */
const present = (value: string | undefined): value is string => value !== undefined && value !== '';

const truthy = (value: string | undefined) => value !== undefined && ['1', 'true', 'yes', 'on'].includes(value.trim().toLowerCase());

export function resolveSettings(flags: GlobalFlags, env: Environment, cwd: string): ResolvedSettings {
  const configPath = configFilePath(env);
  const file = readConfigFile(configPath);
  const local = flags.local === true || truthy(env.SERVICE_LOCAL);
  const values = {} as Record<SettingKey, ResolvedSetting>;
  for (const key of SETTING_KEYS) {
    const spec = SETTINGS[key];
    const flag = flags[spec.option];
    let setting: ResolvedSetting;
    if (present(flag)) setting = { value: flag, source: { kind: 'flag', name: spec.flag } };
    else if (present(env[spec.variable])) setting = { value: env[spec.variable], source: { kind: 'env', name: spec.variable } };
    else if (present(file.values[key])) setting = { value: file.values[key], source: { kind: 'file', path: configPath } };
    else if (local && LOCAL_DEFAULTS[key] !== undefined) setting = { value: LOCAL_DEFAULTS[key], source: { kind: 'default', local: true } };
    else if (spec.fallback !== undefined) setting = { value: spec.fallback, source: { kind: 'default' } };
    else setting = { value: undefined, source: undefined };
    values[key] = setting;
  }
  const dataDir = present(flags.dataDir) ? flags.dataDir : present(env.SERVICE_DATA_DIR) ? env.SERVICE_DATA_DIR : DEFAULT_DATA_DIR;
  return {
    values,
    local,
    dataDir: resolve(cwd, dataDir),
    json: flags.json === true,
    debug: present(env.SERVICE_DEBUG),
    configPath,
    warnings: file.warnings,
  };
}

/** `flag --org`, `env SERVICE_ORG_ID`, `file /home/me/.config/cellplane/config.yaml`, `default`. */
export function describeSource(source: SettingSource | undefined): string {
  if (!source) return 'not set';
  switch (source.kind) {
    case 'flag':
      return `flag ${source.name}`;
    case 'env':
      return `env ${source.name}`;
    case 'file':
      return `file ${source.path}`;
    case 'default':
      return source.local ? 'default (local mode)' : 'default';
  }
}

/** The token shown as `****` and its last four characters, enough to tell two tokens apart. */
export function maskSecret(value: string): string {
  return value.length <= 8 ? '****' : `****${value.slice(-4)}`;
}

export function isSettingKey(key: string): key is SettingKey {
  return (SETTING_KEYS as readonly string[]).includes(key);
}

/** A value `config set` accepts for `key`; throws UsageError otherwise. */
export function checkSettingValue(key: SettingKey, value: string): string {
  if (value === '') throw new UsageError(`an empty ${key} is not a value: to remove it, run \`cellplane config unset ${key}\``);
  if (key === 'baseUrl') return checkBaseUrl(value, { kind: 'flag', name: 'config set baseUrl' });
  if (/[\s]/.test(value) && key !== 'token') throw new UsageError(`${key} cannot contain spaces: "${value}"; give the slug or name as the API shows it`);
  return value;
}

/** The API address without trailing slashes; a UsageError naming where it came from when it is not an http(s) URL. */
export function checkBaseUrl(value: string, source: SettingSource | undefined): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`the API address "${value}" (${describeSource(source)}) is not a URL: give one such as http://127.0.0.1:3000`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new UsageError(`the API address "${value}" (${describeSource(source)}) must be http:// or https://, such as http://127.0.0.1:3000`);
  }
  return value.replace(/\/+$/, '');
}

export interface ConfigFile {
  values: Partial<Record<SettingKey, string>>;
  warnings: string[];
}

/** Reads the config file; a missing file is an empty one. A file others can read is used, with a warning. */
export function readConfigFile(path: string): ConfigFile {
  if (!existsSync(path)) return { values: {}, warnings: [] };
  const warnings: string[] = [];
  if (process.platform !== 'win32') {
    const mode = statSync(path).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      warnings.push(`${path} is readable by others (mode ${mode.toString(8).padStart(4, '0')}) and holds your token: run \`chmod 600 ${path}\``);
    }
  }
  const document = loadDocument(path);
  const values: Partial<Record<SettingKey, string>> = {};
  const contents = document.toJS() as unknown;
  if (contents === null || contents === undefined) return { values, warnings };
  for (const [key, value] of Object.entries(contents as Record<string, unknown>)) {
    if (!isSettingKey(key)) {
      warnings.push(`${path}: unknown key "${key}" is ignored (keys: ${SETTING_KEYS.join(', ')})`);
      continue;
    }
    if (value === null || value === undefined) continue;
    if (typeof value === 'object') throw new UsageError(`${path}: ${key} must be a plain value, not a list or map; fix it with \`cellplane config set ${key} <value>\``);
    values[key] = String(value);
  }
  return { values, warnings };
}

/** Removes `key`; a comment written above it moves to the next key (or the end), rather than leaving with it. */
function deleteKeepingComments(document: Document, key: string): void {
  const map = document.contents;
  if (!isMap(map)) return;
  const index = map.items.findIndex((pair) => isScalar(pair.key) && pair.key.value === key);
  if (index < 0) return;
  const removed = map.items[index]!.key as Scalar;
  const comment = removed.commentBefore;
  map.items.splice(index, 1);
  if (!comment) return;
  const next = map.items[index]?.key;
  if (isScalar(next)) next.commentBefore = next.commentBefore ? `${comment}\n${next.commentBefore}` : comment;
  else document.comment = document.comment ? `${document.comment}\n${comment}` : comment;
}

function loadDocument(path: string): Document {
  const text = readFileSync(path, 'utf8');
  const document = parseDocument(text);
  if (document.errors.length > 0) {
    throw new UsageError(`${path} is not valid YAML (${document.errors[0]!.message.split('\n')[0]}): fix it, or delete it and run \`cellplane config set\` again`);
  }
  const contents = document.contents;
  if (contents !== null && !isMap(contents)) {
    throw new UsageError(`${path} must be a map of keys (${SETTING_KEYS.join(', ')}): fix it, or delete it and run \`cellplane config set\` again`);
  }
  return document;
}

/**
 * Changes the config file: `set` values, `undefined` removes the key. The
 * directory is made 0700 and the file 0600 on every write; the new content
 * is written to a 0600 temporary file and renamed over the old one, so the
 * token is never in a file others can read, not even for a moment.
 * Comments and the order of keys in the file are kept.
 */
export function writeConfigFile(path: string, changes: Partial<Record<SettingKey, string | undefined>>): void {
  const directory = dirname(path);
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  chmodSync(directory, 0o700);
  const document = existsSync(path) ? loadDocument(path) : parseDocument('');
  if (document.contents === null) document.contents = document.createNode({}) as never;
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined) deleteKeepingComments(document, key);
    else document.set(key, value);
  }
  const text = isMap(document.contents) && document.contents.items.length === 0 ? '' : document.toString();
  const temporary = join(directory, `.config.yaml.${process.pid}.tmp`);
  writeFileSync(temporary, text, { mode: 0o600 });
  chmodSync(temporary, 0o600);
  renameSync(temporary, path);
  chmodSync(path, 0o600);
}
