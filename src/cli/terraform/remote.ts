import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseState, type TerraformState } from './state';

/**
 * Remote state from Terraform Cloud / Enterprise (`--workspace org/name`):
 * which host, which token, and three requests (workspace by name, its
 * current state version, the state download). The token goes only to the
 * API host's origin: never to a download URL, or a redirect, on another
 * origin. Choices in docs/terraform-import.md.
 */

export const DEFAULT_TFC_HOST = 'app.terraform.io';
const MAX_REDIRECTS = 5;
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/** Remote state cannot be read; the message says what to do. Never carries the token. */
export class RemoteStateError extends Error {
  override readonly name = 'RemoteStateError';
}

export interface RemoteStateOptions {
  /** `<organization>/<workspace>`. */
  workspace: string;
  /** `--hostname host[:port]`; else TF_CLOUD_HOSTNAME; else app.terraform.io. */
  hostname?: string;
  /** The environment (process.env in the CLI): TF_TOKEN_*, TF_CLI_CONFIG_DIR, TF_CLOUD_HOSTNAME, SERVICE_TFC_*. */
  env: Record<string, string | undefined>;
  /** Where the warning about a custom host goes (stderr in the CLI). */
  warn: (message: string) => void;
  fetch?: typeof globalThis.fetch;
  /** Home directory for `~/.terraform.d/credentials.tfrc.json`; default os.homedir(). */
  homeDir?: string;
}

export interface ResolvedHost {
  /** `host[:port]`, lower case, without the default port 443: Terraform's "comparison" form. */
  host: string;
  /** `https://host[:port]`, or `http://` for a loopback host. */
  origin: string;
  custom: boolean;
}

/** The host to read from, checked against SERVICE_TFC_ALLOW_CUSTOM_HOST; warns (unless suppressed) when it is not the default. */
export function resolveHost(options: Pick<RemoteStateOptions, 'hostname' | 'env' | 'warn'>): ResolvedHost {
  const given = (options.hostname ?? options.env.TF_CLOUD_HOSTNAME ?? DEFAULT_TFC_HOST).trim();
  const host = normalizeHost(given);
  const custom = host !== DEFAULT_TFC_HOST;
  if (custom && options.env.SERVICE_TFC_ALLOW_CUSTOM_HOST !== '1') {
    throw new RemoteStateError(
      `reading Terraform state from ${host} is refused: only ${DEFAULT_TFC_HOST} is allowed by default. ` +
        'To read from Terraform Enterprise or another host you trust, set SERVICE_TFC_ALLOW_CUSTOM_HOST=1',
    );
  }
  if (custom && options.env.SERVICE_TFC_SUPPRESS_HOST_WARNING !== '1') {
    options.warn(
      `warning: reading Terraform state from ${host}, not ${DEFAULT_TFC_HOST} (SERVICE_TFC_ALLOW_CUSTOM_HOST=1); ` +
        'its API token is sent to that host. Set SERVICE_TFC_SUPPRESS_HOST_WARNING=1 to silence this warning',
    );
  }
  const hostname = host.replace(/:\d+$/, '');
  const scheme = LOOPBACK_HOSTS.has(hostname) ? 'http' : 'https';
  return { host, origin: `${scheme}://${host}`, custom };
}

/** `Host.Example:443` → `host.example`, `café.fr` → `xn--caf-dma.fr`; refuses a URL, a path or anything that is not `host[:port]`. */
export function normalizeHost(given: string): string {
  let url: URL;
  try {
    url = new URL(`https://${given}`);
  } catch {
    throw new RemoteStateError(`"${given}" is not a host name: pass --hostname host[:port] (no scheme, no path), e.g. tfe.example.com`);
  }
  // an IDN host comes back in Punycode, as Terraform compares hosts
  if (/[/?#@\\\s]/.test(given) || url.pathname !== '/' || given === '') {
    throw new RemoteStateError(`"${given}" is not a host name: pass --hostname host[:port] (no scheme, no path), e.g. tfe.example.com`);
  }
  return url.host.replace(/\.$/, '');
}

/**
 * The variable Terraform reads a host's token from: `.` → `_`, `-` → `__`
 * (Terraform's cliconfig). A port stays as `:port`: Terraform decodes the
 * name the same way and keeps any other character, so `TF_TOKEN_tfe_example_com:8443`
 * is what it reads (settable with `env`, not with a shell's `export`).
 */
export const tokenVariableFor = (host: string) => `TF_TOKEN_${host.replace(/-/g, '__').replace(/\./g, '_')}`;

/** The host a `TF_TOKEN_*` variable names, decoded as Terraform decodes it. */
const hostOfVariable = (name: string) =>
  name
    .slice('TF_TOKEN_'.length)
    .replace(/__/g, '-')
    .replace(/_/g, '.')
    .toLowerCase()
    .replace(/:443$/, '');

export function credentialsFile(env: Record<string, string | undefined>, homeDir = homedir()): string {
  return join(env.TF_CLI_CONFIG_DIR || join(homeDir, '.terraform.d'), 'credentials.tfrc.json');
}

/** The token for `host`: a TF_TOKEN_ variable first (as Terraform), then credentials.tfrc.json. */
export async function findToken(host: string, env: Record<string, string | undefined>, homeDir?: string): Promise<{ token: string; from: string }> {
  // Terraform iterates the names sorted and the last one for a host wins; so do we
  const names = Object.keys(env)
    .filter((name) => name.startsWith('TF_TOKEN_'))
    .sort();
  let found: { token: string; from: string } | undefined;
  for (const name of names) {
    const value = env[name];
    if (value && hostOfVariable(name) === host) found = { token: value, from: name };
  }
  if (found) return found;

  const file = credentialsFile(env, homeDir);
  let text: string | undefined;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new RemoteStateError(`cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? 'error'}): check its permissions`);
    }
  }
  if (text !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new RemoteStateError(`${file} is not valid JSON: fix it (terraform login ${host} rewrites it)`);
    }
    const credentials = (parsed as { credentials?: Record<string, { token?: unknown }> } | null)?.credentials;
    if (credentials && typeof credentials === 'object') {
      for (const [key, entry] of Object.entries(credentials)) {
        if (key.toLowerCase().replace(/:443$/, '') === host && typeof entry?.token === 'string' && entry.token) return { token: entry.token, from: file };
      }
    }
  }
  throw new RemoteStateError(
    `no Terraform API token for ${host}: set ${tokenVariableFor(host)}, or run \`terraform login ${host}\` ` +
      `(it writes ${file}; TF_CLI_CONFIG_DIR moves that directory)`,
  );
}

/** `org/name`, both parts non-empty. */
export function parseWorkspace(workspace: string): { organization: string; name: string } {
  const match = /^([^/\s]+)\/([^/\s]+)$/.exec(workspace);
  if (!match) throw new RemoteStateError(`--workspace must be <organization>/<workspace>, got "${workspace}"`);
  return { organization: match[1]!, name: match[2]! };
}

interface JsonApiErrors {
  errors?: { status?: string; title?: string; detail?: string }[];
}

const describeErrors = (body: unknown): string => {
  const first = (body as JsonApiErrors | null)?.errors?.[0];
  const text = [first?.title, first?.detail].filter((part) => typeof part === 'string' && part).join(': ');
  return text ? ` (${text.slice(0, 200)})` : '';
};

/** Reads the workspace's current state, parsed and with sensitive paths stripped. */
export async function fetchRemoteState(options: RemoteStateOptions): Promise<TerraformState & { workspace: string; host: string }> {
  const { organization, name } = parseWorkspace(options.workspace);
  const resolved = resolveHost(options);
  const { token, from } = await findToken(resolved.host, options.env, options.homeDir);
  const fetchImpl = options.fetch ?? globalThis.fetch;
  const workspace = `${organization}/${name}`;

  /** GET with the token only while the URL is on the API's origin; redirects followed by hand under the same rule. */
  async function get(url: string, accept: string): Promise<Response> {
    let current = new URL(url, resolved.origin);
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      const loopback = LOOPBACK_HOSTS.has(current.hostname);
      if (current.protocol !== 'https:' && !(current.protocol === 'http:' && loopback)) {
        throw new RemoteStateError(`${resolved.host} pointed at ${current.origin}, which is not https: refusing to read state from it`);
      }
      const headers: Record<string, string> = { accept };
      if (current.origin === resolved.origin) headers.authorization = `Bearer ${token}`;
      let response: Response;
      try {
        response = await fetchImpl(current, { headers, redirect: 'manual' });
      } catch (error) {
        const cause = error instanceof Error ? ((error.cause as Error | undefined)?.message ?? error.message) : String(error);
        throw new RemoteStateError(`could not reach ${current.host} (${cause}): check --hostname and the network`);
      }
      const location = response.headers.get('location');
      if (response.status >= 300 && response.status < 400 && location) {
        await response.body?.cancel();
        current = new URL(location, current);
        continue;
      }
      return response;
    }
    throw new RemoteStateError(`${resolved.host} redirected more than ${MAX_REDIRECTS} times`);
  }

  async function api(path: string, what: string): Promise<any> {
    const response = await get(`${resolved.origin}/api/v2${path}`, 'application/vnd.api+json');
    const body = await response.json().catch(() => undefined);
    if (response.status === 401) {
      throw new RemoteStateError(
        `${resolved.host} refused the token from ${from} (401)${describeErrors(body)}: it is expired, revoked or for another host; ` +
          `create a new one (terraform login ${resolved.host}) and set it in ${tokenVariableFor(resolved.host)} or credentials.tfrc.json`,
      );
    }
    if (response.status === 404) {
      throw new RemoteStateError(
        what === 'workspace'
          ? `workspace ${workspace} was not found on ${resolved.host} (404): check the organization and workspace names, and that the token from ${from} can read this workspace`
          : `workspace ${workspace} on ${resolved.host} has no state yet (404 on its current state version), or the token from ${from} may not read state: run terraform apply in it, or grant the token state read access`,
      );
    }
    if (!response.ok) throw new RemoteStateError(`${resolved.host} answered ${response.status} reading the ${what} of ${workspace}${describeErrors(body)}`);
    return body;
  }

  const found = await api(`/organizations/${encodeURIComponent(organization)}/workspaces/${encodeURIComponent(name)}`, 'workspace');
  const workspaceId = found?.data?.id;
  if (typeof workspaceId !== 'string' || !workspaceId) throw new RemoteStateError(`${resolved.host} answered the workspace ${workspace} without an id: is it a Terraform Cloud / Enterprise API?`);
  const version = await api(`/workspaces/${encodeURIComponent(workspaceId)}/current-state-version`, 'current state version');
  const downloadUrl = version?.data?.attributes?.['hosted-state-download-url'];
  if (typeof downloadUrl !== 'string' || !downloadUrl) {
    throw new RemoteStateError(`the current state version of ${workspace} has no hosted-state-download-url: the state may still be uploading; try again shortly`);
  }
  const download = await get(downloadUrl, 'application/json');
  if (!download.ok) {
    await download.body?.cancel();
    throw new RemoteStateError(`downloading the state of ${workspace} answered ${download.status}: the link may have expired; try again`);
  }
  const state = parseState(await download.text(), `the state of workspace ${workspace}`);
  return { ...state, workspace, host: resolved.host };
}
