import { App } from '@octokit/app';
import { Octokit } from '@octokit/core';
import type { Config } from '../config';
import { ApiError } from '../http/errors';
import type { Logger } from '../logger';
import type { Clock } from '../platform';
import { assertSigningKey, PrivateKeyError, toPkcs8Pem } from './private-key';
import { InstallationTokenCache, type InstallationToken } from './token-cache';

/**
 * The GitHub App client (SPEC "Code-hosting app integration"), the same on
 * both hosts: @octokit/app signs the App's JWTs (universal-github-app-jwt,
 * WebCrypto), every request goes to CODEHOST_API_URL (github.com's API, a
 * GitHub Enterprise Server's, or the local test server), and installation
 * tokens are cached per installation (./token-cache.ts).
 *
 * One client per configuration object, built on first use and kept for the
 * life of the process (Node) or isolate (Worker): the token cache lives in
 * it. Nothing here logs or returns a token or the key; a failed GitHub call
 * becomes a CodehostApiError that names the operation and GitHub's status
 * and message only.
 */

export interface CodehostDeps {
  config: Config;
  clock: Clock;
  logger: Logger;
}

/** What the service keeps of an installation, as GitHub describes it (`GET /app/installations/{id}`). */
export interface GitHubInstallation {
  id: number;
  accountLogin: string;
  /** `Organization` or `User` (GitHub's `account.type`). */
  accountType: string;
  repositorySelection: 'all' | 'selected';
  /** Set while GitHub has the installation suspended. */
  suspendedAt: string | null;
}

/** The repositories an installation was granted, `owner/name` lowercased (GitHub compares them case-insensitively). */
export interface GrantedRepositories {
  repositorySelection: 'all' | 'selected';
  fullNames: string[];
}

/**
 * A GitHub API call that did not succeed. `status` is GitHub's (undefined
 * for a network error or timeout); `retryable` is true for a 5xx, a 429, a
 * 403 rate limit and network errors, with `retryAt` when GitHub said when
 * (`x-ratelimit-reset` or `retry-after`). The message carries GitHub's own
 * message, never a token.
 */
export class CodehostApiError extends Error {
  constructor(
    readonly operation: string,
    readonly status: number | undefined,
    readonly githubMessage: string | undefined,
    readonly retryable: boolean,
    readonly retryAt?: Date,
  ) {
    super(`GitHub API ${operation}: ${status === undefined ? 'no response' : `HTTP ${status}`}${githubMessage ? ` (${githubMessage})` : ''}`);
    this.name = 'CodehostApiError';
  }
}

/** A GitHub API failure, as Octokit's RequestError (or a fetch failure) reports it. */
export function toCodehostApiError(operation: string, error: unknown, now: Date): CodehostApiError {
  if (error instanceof CodehostApiError) return error;
  const failure = error as { status?: unknown; response?: { headers?: Record<string, string | undefined>; data?: unknown } };
  // Octokit reports a fetch that got no response (refused, reset, timed out) as status 500 without a response
  const status = typeof failure.status === 'number' && failure.status >= 100 && failure.response !== undefined ? failure.status : undefined;
  if (status === undefined) return new CodehostApiError(operation, undefined, undefined, true);
  const headers = failure.response?.headers ?? {};
  const data = failure.response?.data;
  const message = typeof data === 'object' && data !== null && typeof (data as { message?: unknown }).message === 'string'
    ? (data as { message: string }).message.slice(0, 300)
    : undefined;
  const rateLimited = (status === 403 || status === 429) && (headers['x-ratelimit-remaining'] === '0' || headers['retry-after'] !== undefined);
  let retryAt: Date | undefined;
  const retryAfter = Number(headers['retry-after']);
  const reset = Number(headers['x-ratelimit-reset']);
  if (headers['retry-after'] !== undefined && Number.isFinite(retryAfter)) retryAt = new Date(now.getTime() + retryAfter * 1000);
  else if (rateLimited && Number.isFinite(reset)) retryAt = new Date(reset * 1000);
  return new CodehostApiError(operation, status, message, status >= 500 || status === 429 || rateLimited, retryAt);
}

type AppOctokit = InstanceType<typeof Octokit>;

export class CodehostApp {
  readonly appId: string;
  readonly appName: string;
  readonly tokens: InstallationTokenCache;
  readonly #app: App;
  readonly #Octokit: typeof Octokit;
  readonly #clock: Clock;

  constructor(deps: CodehostDeps, pkcs8Key: string) {
    const settings = deps.config.codehostApp!;
    this.appId = settings.appId;
    this.appName = settings.appName;
    this.#clock = deps.clock;
    this.tokens = new InstallationTokenCache(deps.clock);
    const timeoutMs = deps.config.deliveryAttemptTimeoutMs;
    const log = octokitLog(deps.logger);
    this.#Octokit = Octokit.defaults({
      baseUrl: deps.config.codehostApiUrl,
      userAgent: `cellplane/${deps.config.version}`,
      log,
      // every call is bounded, as an outbound delivery attempt is
      request: { fetch: (input: RequestInfo | URL, init?: RequestInit) => fetch(input, { ...init, signal: init?.signal ?? AbortSignal.timeout(timeoutMs) }) },
    });
    this.#app = new App({ appId: settings.appId, privateKey: pkcs8Key, Octokit: this.#Octokit, log });
  }

  /** The App itself (JWT-authenticated), for calls under /app. */
  get appOctokit(): AppOctokit {
    return this.#app.octokit as AppOctokit;
  }

  /** The installation as GitHub describes it; undefined when GitHub does not know it (404). */
  async getInstallation(installationId: number): Promise<GitHubInstallation | undefined> {
    try {
      const { data } = await this.appOctokit.request('GET /app/installations/{installation_id}', { installation_id: installationId });
      const account = (data.account ?? {}) as { login?: string; slug?: string; type?: string };
      return {
        id: data.id,
        accountLogin: account.login ?? account.slug ?? '',
        accountType: account.type ?? (account.slug ? 'Enterprise' : 'User'),
        repositorySelection: data.repository_selection,
        suspendedAt: data.suspended_at ?? null,
      };
    } catch (error) {
      if ((error as { status?: unknown }).status === 404) return undefined;
      throw toCodehostApiError('GET /app/installations/{installation_id}', error, this.#clock.now());
    }
  }

  /**
   * An installation token: the cached one while it has more than five
   * minutes left, else a new one (`POST /app/installations/{id}/access_tokens`).
   */
  installationToken(installationId: number): Promise<InstallationToken> {
    return this.tokens.get(installationId, async () => {
      try {
        const { data } = await this.appOctokit.request('POST /app/installations/{installation_id}/access_tokens', { installation_id: installationId });
        return { token: data.token, expiresAt: new Date(data.expires_at) };
      } catch (error) {
        throw toCodehostApiError('POST /app/installations/{installation_id}/access_tokens', error, this.#clock.now());
      }
    });
  }

  /** A client acting as the installation, with its (cached) token. */
  async installationOctokit(installationId: number): Promise<AppOctokit> {
    const { token } = await this.installationToken(installationId);
    return new this.#Octokit({ auth: token });
  }

  /** A client acting with a static token (a personal access token or a fine-grained token a trigger names). */
  tokenOctokit(token: string): AppOctokit {
    return new this.#Octokit({ auth: token });
  }

  /** Every repository the installation was granted (`GET /installation/repositories`, all pages). */
  async grantedRepositories(installationId: number): Promise<GrantedRepositories> {
    const octokit = await this.installationOctokit(installationId);
    const fullNames: string[] = [];
    let selection: 'all' | 'selected' = 'selected';
    // 100 per page (GitHub's maximum), at most MAX_REPOSITORY_PAGES pages
    for (let page = 1; page <= MAX_REPOSITORY_PAGES; page++) {
      let data;
      try {
        ({ data } = await octokit.request('GET /installation/repositories', { per_page: 100, page }));
      } catch (error) {
        throw toCodehostApiError('GET /installation/repositories', error, this.#clock.now());
      }
      selection = (data.repository_selection as 'all' | 'selected' | undefined) ?? selection;
      for (const repository of data.repositories) fullNames.push(repository.full_name.toLowerCase());
      if (data.repositories.length < 100 || fullNames.length >= data.total_count) break;
    }
    return { repositorySelection: selection, fullNames: [...new Set(fullNames)].sort() };
  }

  /** Drops the cached token of an installation (deleted, suspended or unsuspended). */
  forgetInstallationTokens(installationId: number): void {
    this.tokens.clear(installationId);
  }
}

/** 10,000 repositories: far beyond what an installation of one organization is granted in practice. */
const MAX_REPOSITORY_PAGES = 100;

/** Octokit's own diagnostics, into the service's logger (which redacts secrets). */
function octokitLog(logger: Logger) {
  return {
    debug: () => {},
    info: () => {},
    warn: (message: string) => logger.warn('GitHub client warning', { message: String(message).slice(0, 500) }),
    error: (message: string) => logger.error('GitHub client error', { message: String(message).slice(0, 500) }),
  };
}

const clients = new WeakMap<Config, Promise<CodehostApp>>();

const NOT_CONFIGURED =
  'the GitHub App is not configured on this server: set CODEHOST_APP_ID, CODEHOST_APP_NAME, CODEHOST_APP_PRIVATE_KEY and CODEHOST_APP_WEBHOOK_SECRET';

/**
 * The App client of this configuration, or 503 codehost_not_configured when
 * any CODEHOST_APP_* variable is missing or the private key is unusable (the
 * server keeps running; the reason is logged once, without the key).
 */
export async function codehostApp(deps: CodehostDeps): Promise<CodehostApp> {
  if (!deps.config.codehostApp) throw new ApiError('codehost_not_configured', NOT_CONFIGURED);
  let client = clients.get(deps.config);
  if (!client) {
    client = (async () => {
      const { pem } = toPkcs8Pem(deps.config.codehostApp!.privateKey.reveal());
      await assertSigningKey(pem);
      return new CodehostApp(deps, pem);
    })();
    clients.set(deps.config, client);
    client.catch((error: unknown) => deps.logger.error('the GitHub App cannot be used', { reason: error instanceof PrivateKeyError ? error.message : 'unexpected error', error }));
  }
  try {
    return await client;
  } catch (error) {
    throw new ApiError('codehost_not_configured', error instanceof PrivateKeyError ? `the GitHub App cannot be used: ${error.message}` : NOT_CONFIGURED);
  }
}

/** Clears an installation's cached tokens, if this configuration's client was ever built (nothing is cached otherwise). */
export async function forgetInstallationTokens(config: Config, installationId: number): Promise<void> {
  const client = clients.get(config);
  if (!client) return;
  try {
    (await client).forgetInstallationTokens(installationId);
  } catch {
    // a client that could not be built holds no tokens
  }
}
