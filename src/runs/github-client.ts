import { Octokit } from '@octokit/core';
import { toCodehostApiError, type CodehostApiError } from '../codehost/app';
import type { Config } from '../config';
import type { Logger } from '../logger';

/**
 * The GitHub REST calls a pull-request run makes (the trigger's delivery and
 * its post-merge repository_dispatch), with one credential: an installation
 * token or a static token (SPEC Authentication 13). Built on @octokit/core,
 * as the App client of src/codehost/ is, and sent to CODEHOST_API_URL
 * (github.com's API, a GitHub Enterprise Server's, or the local test
 * server). That address is the operator's setting, like DATABASE_URL, so
 * these calls do not go through the outbound guard of webhook URLs, which
 * judges addresses a trigger's author chose.
 *
 * Every call is bounded (the attempt timeout, and the attempt's own
 * deadline) and follows the host's stop signal. A call that fails becomes a
 * GitHubCallError: the operation, GitHub's status and message (and, for a
 * 422, the messages of its `errors`), never the token. A call aborted by the
 * host's signal throws the abort itself, so the engine hands the attempt
 * back unrecorded.
 */

export interface GitHubClientOptions {
  config: Pick<Config, 'codehostApiUrl' | 'version'>;
  logger: Logger;
  token: string;
  /** Each call's timeout. */
  timeoutMs: number;
  /** The clock GitHub's `retry-after` is read against. */
  now: () => Date;
  /** The host is stopping. */
  signal?: AbortSignal;
  /** Epoch ms after which no call is started or kept waiting (the attempt's budget). */
  deadline?: number;
}

/** A GitHub call that did not succeed (`api` says whether a later attempt may). */
export class GitHubCallError extends Error {
  constructor(
    readonly api: CodehostApiError,
    /** GitHub's `errors[].message` of a 422, joined; undefined when none. */
    readonly detail: string | undefined,
    /** True when the call was cut short by the attempt's own deadline. */
    readonly outOfTime = false,
  ) {
    super(detail ? `${api.message}: ${detail}` : api.message);
    this.name = 'GitHubCallError';
  }

  get status(): number | undefined {
    return this.api.status;
  }
}

export interface GitHubRepository {
  /** `owner/name` as GitHub spells it. */
  fullName: string;
  ownerLogin: string;
  defaultBranch: string;
}

export interface GitHubPullRequest {
  number: number;
  url: string;
  headSha: string;
}

export interface GitHubFile {
  /** The blob sha, needed to update the file. */
  sha: string;
  /** The content, base64 without line breaks. */
  base64: string | undefined;
}

/** `path/to/file` for a URL: each segment percent-encoded, the slashes kept. */
const encodePath = (path: string) => path.split('/').map(encodeURIComponent).join('/');

export class GitHubClient {
  readonly #octokit: InstanceType<typeof Octokit>;
  readonly #options: GitHubClientOptions;
  /** The HTTP status of the last call that got an answer. */
  lastStatus: number | null = null;

  constructor(options: GitHubClientOptions) {
    this.#options = options;
    const { logger, config } = options;
    this.#octokit = new Octokit({
      baseUrl: config.codehostApiUrl,
      auth: options.token,
      userAgent: `cellplane/${config.version}`,
      log: {
        debug: () => {},
        info: () => {},
        warn: (message: string) => logger.warn('GitHub client warning', { message: String(message).slice(0, 500) }),
        error: (message: string) => logger.error('GitHub client error', { message: String(message).slice(0, 500) }),
      },
      request: { fetch: (input: RequestInfo | URL, init?: RequestInit) => fetch(input, { ...init, signal: this.#signal() }) },
    });
  }

  /** The signal of one call: its timeout, the attempt's deadline, the host's stop. */
  #signal(): AbortSignal {
    const { timeoutMs, deadline, signal } = this.#options;
    const budget = deadline === undefined ? timeoutMs : Math.max(1, Math.min(timeoutMs, deadline - Date.now()));
    const timeout = AbortSignal.timeout(budget);
    return signal ? AbortSignal.any([timeout, signal]) : timeout;
  }

  async #call<T>(operation: string, request: () => Promise<{ status: number; data: unknown }>, read: (data: any) => T): Promise<T> {
    const { deadline, signal } = this.#options;
    if (deadline !== undefined && Date.now() >= deadline) {
      throw new GitHubCallError(toCodehostApiError(operation, new Error('out of time'), this.#options.now()), undefined, true);
    }
    try {
      const response = await request();
      this.lastStatus = response.status;
      return read(response.data);
    } catch (error) {
      if (signal?.aborted) throw error;
      const status = (error as { status?: unknown; response?: unknown }).response !== undefined ? (error as { status?: number }).status : undefined;
      if (typeof status === 'number') this.lastStatus = status;
      const outOfTime = status === undefined && deadline !== undefined && Date.now() >= deadline - 5;
      return Promise.reject(new GitHubCallError(toCodehostApiError(operation, error, this.#options.now()), validationDetail(error), outOfTime));
    }
  }

  getRepository(owner: string, repo: string): Promise<GitHubRepository> {
    return this.#call(
      'GET /repos/{owner}/{repo}',
      () => this.#octokit.request('GET /repos/{owner}/{repo}', { owner, repo }),
      (data: { full_name: string; owner: { login: string }; default_branch: string }) => ({
        fullName: data.full_name,
        ownerLogin: data.owner.login,
        defaultBranch: data.default_branch,
      }),
    );
  }

  /** The commit a branch points at; undefined when there is no such branch. */
  async branchSha(owner: string, repo: string, branch: string): Promise<string | undefined> {
    try {
      return await this.#call(
        'GET /repos/{owner}/{repo}/git/ref/heads/{branch}',
        () => this.#octokit.request(`GET /repos/{owner}/{repo}/git/ref/heads/${encodePath(branch)}`, { owner, repo }),
        (data: { object: { sha: string } }) => data.object.sha,
      );
    } catch (error) {
      if (error instanceof GitHubCallError && error.status === 404) return undefined;
      throw error;
    }
  }

  /** Creates `branch` at `sha`: `exists` when GitHub already has it (422 "Reference already exists"). */
  async createBranch(owner: string, repo: string, branch: string, sha: string): Promise<'created' | 'exists'> {
    try {
      await this.#call(
        'POST /repos/{owner}/{repo}/git/refs',
        () => this.#octokit.request('POST /repos/{owner}/{repo}/git/refs', { owner, repo, ref: `refs/heads/${branch}`, sha }),
        () => undefined,
      );
      return 'created';
    } catch (error) {
      if (error instanceof GitHubCallError && error.status === 422 && /reference already exists/i.test(error.api.githubMessage ?? '')) return 'exists';
      throw error;
    }
  }

  /** A file on a branch; undefined when it is not there. */
  async file(owner: string, repo: string, path: string, branch: string): Promise<GitHubFile | undefined> {
    try {
      return await this.#call(
        'GET /repos/{owner}/{repo}/contents/{path}',
        () => this.#octokit.request(`GET /repos/{owner}/{repo}/contents/${encodePath(path)}`, { owner, repo, ref: branch }),
        (data: { type?: string; sha: string; content?: string; encoding?: string }) => ({
          sha: data.sha,
          base64: data.encoding === 'base64' && typeof data.content === 'string' ? data.content.replace(/\s/g, '') : undefined,
        }),
      );
    } catch (error) {
      if (error instanceof GitHubCallError && error.status === 404) return undefined;
      throw error;
    }
  }

  /** Creates or updates a file on a branch (one commit); `sha` is the blob it replaces. */
  putFile(owner: string, repo: string, path: string, input: { branch: string; message: string; base64: string; sha?: string }): Promise<void> {
    return this.#call(
      'PUT /repos/{owner}/{repo}/contents/{path}',
      () =>
        this.#octokit.request(`PUT /repos/{owner}/{repo}/contents/${encodePath(path)}`, {
          owner,
          repo,
          branch: input.branch,
          message: input.message,
          content: input.base64,
          ...(input.sha === undefined ? {} : { sha: input.sha }),
        }),
      () => undefined,
    );
  }

  /** The open pull request of `owner:branch` into `base`, if there is one (the newest). */
  openPullRequest(owner: string, repo: string, headOwner: string, branch: string, base: string): Promise<GitHubPullRequest | undefined> {
    return this.#call(
      'GET /repos/{owner}/{repo}/pulls',
      () => this.#octokit.request('GET /repos/{owner}/{repo}/pulls', { owner, repo, head: `${headOwner}:${branch}`, base, state: 'open', per_page: 10 }),
      (data: PullJson[]) => (data.length > 0 ? pullOf(data[0]!) : undefined),
    );
  }

  createPullRequest(owner: string, repo: string, input: { title: string; body?: string; head: string; base: string }): Promise<GitHubPullRequest> {
    return this.#call(
      'POST /repos/{owner}/{repo}/pulls',
      () => this.#octokit.request('POST /repos/{owner}/{repo}/pulls', { owner, repo, ...input }),
      (data: PullJson) => pullOf(data),
    );
  }

  /** POST /repos/{owner}/{repo}/dispatches (204). */
  dispatch(owner: string, repo: string, eventType: string, clientPayload: Record<string, unknown>): Promise<void> {
    return this.#call(
      'POST /repos/{owner}/{repo}/dispatches',
      () => this.#octokit.request('POST /repos/{owner}/{repo}/dispatches', { owner, repo, event_type: eventType, client_payload: clientPayload }),
      () => undefined,
    );
  }
}

interface PullJson {
  number: number;
  html_url: string;
  head: { sha: string };
}

const pullOf = (data: PullJson): GitHubPullRequest => ({ number: data.number, url: data.html_url, headSha: data.head.sha });

/** GitHub's `errors[].message` (or code and field) of a 422, for the run's error. */
function validationDetail(error: unknown): string | undefined {
  const data = (error as { response?: { data?: unknown } }).response?.data as { errors?: unknown } | undefined;
  if (!data || !Array.isArray(data.errors)) return undefined;
  const parts = data.errors
    .slice(0, 5)
    .map((item: unknown) => {
      if (typeof item === 'string') return item;
      const entry = item as { message?: unknown; code?: unknown; field?: unknown };
      if (typeof entry.message === 'string') return entry.message;
      return [entry.field, entry.code].filter((part) => typeof part === 'string').join(' ');
    })
    .filter((part) => part.length > 0)
    .map((part) => part.slice(0, 300));
  return parts.length > 0 ? parts.join('; ') : undefined;
}

/** UTF-8 text as base64, without node:buffer (the core runs in workerd too). */
export function utf8ToBase64(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}
