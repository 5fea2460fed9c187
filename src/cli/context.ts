import type { Command } from 'commander';
import { createClient, type CellplaneClient, type EnvRef } from '../sdk/client';
import { UsageError, type ErrorScene } from './errors';
import type { Output } from './output';
import { checkBaseUrl, describeSource, type ResolvedSettings, type SettingKey } from './settings';

/**
 * What a command works with: the settings in effect, the output, and the SDK
 * client for the target — the API at baseUrl, or in local mode the embedded
 * app on the database in dataDir (src/cli/local.ts, imported only then, so
 * a remote command never loads server code).
 */
export interface CliContext {
  readonly settings: ResolvedSettings;
  readonly out: Output;
  /** The process environment, read here rather than from process.env (SERVICE_PASSWORD, …). */
  readonly variables: Record<string, string | undefined>;
  /** The SDK client for the target: embedded (local mode) or remote (needs baseUrl → UsageError otherwise). */
  client(): Promise<CellplaneClient>;
  /** The organization slug (UsageError naming --org / SERVICE_ORG_ID / `cellplane config set currentOrg` when missing). */
  org(): string;
  /** org + project (UsageError naming --org / SERVICE_ORG_ID / `cellplane config set currentOrg` when missing). */
  project(): { org: string; project: string };
  /** org + project + env. */
  env(): EnvRef;
  readonly local: boolean;
  /** Local mode: --data-dir, SERVICE_DATA_DIR, default `.cellplane` in the working directory (absolute). */
  readonly dataDir: string;
  /** Where requests go and for which org/project/env, for error hints. */
  scene(): ErrorScene;
  /** Closes what client() opened (the local database); main calls it after every command, also on error. */
  close(): Promise<void>;
}

/** Each command file exports one of these; main.ts calls them all. */
export type RegisterCommands = (program: Command, context: () => CliContext) => void;

export interface ContextOptions {
  settings: ResolvedSettings;
  out: Output;
  variables: Record<string, string | undefined>;
  /** Sent as User-Agent. */
  version: string;
}

export function createContext({ settings, out, variables, version }: ContextOptions): CliContext {
  let opened: Promise<{ client: CellplaneClient; close(): Promise<void> }> | undefined;
  const values = settings.values;

  const required = (key: SettingKey, what: string, flag: string, variable: string, example: string): string => {
    const value = values[key].value;
    if (value !== undefined) return value;
    throw new UsageError(
      `no ${what} given: pass ${flag} <${example}>, set ${variable}, or run \`cellplane config set ${key} <${example}>\``,
    );
  };
  const org = () => required('currentOrg', 'organization', '--org', 'SERVICE_ORG_ID', 'slug');
  const project = () => ({ org: org(), project: required('currentProject', 'project', '--project', 'SERVICE_PROJECT_ID', 'slug') });

  async function open() {
    if (settings.local) {
      const { openLocal } = await import('./local');
      const { org: orgSlug, project: projectSlug } = project();
      return openLocal({ dataDir: settings.dataDir, org: orgSlug, project: projectSlug, out });
    }
    const baseUrl = values.baseUrl.value;
    if (baseUrl === undefined) {
      throw new UsageError(
        'no API address given: pass --base-url <url>, set SERVICE_BASE_URL, or run `cellplane config set baseUrl <url>` (or use --local for the embedded database)',
      );
    }
    const client = createClient({
      baseUrl: checkBaseUrl(baseUrl, values.baseUrl.source),
      token: values.token.value,
      headers: { 'user-agent': `cellplane-cli/${version}` },
    });
    return { client, close: async () => {} };
  }

  return {
    settings,
    out,
    variables,
    local: settings.local,
    dataDir: settings.dataDir,
    client: async () => (await (opened ??= open())).client,
    org,
    project,
    env: () => ({ ...project(), env: required('currentEnv', 'environment', '--env', 'SERVICE_ENV_NAME', 'name') }),
    scene() {
      const target = settings.local
        ? `the local database in ${settings.dataDir}`
        : values.baseUrl.value === undefined
          ? undefined
          : `${values.baseUrl.value} (from ${describeSource(values.baseUrl.source)})`;
      const parts = [
        values.currentOrg.value && `org ${values.currentOrg.value}`,
        values.currentProject.value && `project ${values.currentProject.value}`,
        values.currentEnv.value && `env ${values.currentEnv.value}`,
      ].filter(Boolean);
      return { target, scope: parts.length > 0 ? parts.join(', ') : undefined };
    },
    async close() {
      if (!opened) return;
      const current = opened;
      opened = undefined;
      const handle = await current.catch(() => undefined);
      // when opening failed, that error is the one reported
      await handle?.close();
    },
  };
}
