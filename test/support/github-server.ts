import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { importSPKI, jwtVerify, type CryptoKey } from 'jose';
import { TEST_WEBHOOK_SECRET } from './github-events';

export { TEST_WEBHOOK_SECRET };

/**
 * A local GitHub: node:http on 127.0.0.1 (port 0) speaking the part of
 * GitHub's REST API the service uses, with GitHub's response shapes, status
 * codes, error bodies and rate-limit headers. It stands in for
 * api.github.com through CODEHOST_API_URL; nothing is mocked in the service.
 *
 * ## Using it
 *
 * ```ts
 * const keys = generateAppKeys();                        // an RSA key pair: PKCS#1, PKCS#8, public (SPKI) PEMs
 * const github = await startGitHubServer({ appId: '4242', publicKeyPem: keys.publicKeyPem });
 * github.addInstallation({ id: 101, account: 'acme', repositories: ['acme/infra'] });
 * const api = await createTestApi({ env: codehostEnv(github, keys) });   // the four CODEHOST_APP_* + CODEHOST_API_URL
 * …
 * github.requestsTo('create_pull')                       // the request log, by route name
 * github.fail('create_pull', { status: 502 }, { status: 502 });   // the next two calls of that route fail
 * github.fail('create_ref', faults.rateLimited(60));     // 403 + x-ratelimit-remaining: 0 + x-ratelimit-reset
 * github.mergePullRequest('acme/infra', 1);               // or closePullRequest: then send the signed event (github-events.ts)
 * await github.close();
 * ```
 *
 * ## What it checks, as GitHub does
 *
 * - `/app/...` routes need the App's JWT (`Authorization: Bearer <jwt>`):
 *   RS256, verified against the App's public key, `iss` = the app id, `exp`
 *   at most 10 minutes ahead, `iat` not in the future (60 s leeway). Anything
 *   else is 401 with GitHub's message.
 * - Every other route needs a token (`Authorization: token …` or `Bearer …`):
 *   an installation token this server minted (unexpired, installation
 *   neither suspended nor deleted) or a static token added with
 *   `addStaticToken` (a personal access token). Unknown: 401 Bad credentials.
 *   A repository the token cannot see is 404; a write its permissions do not
 *   allow is 403 "Resource not accessible by integration".
 * - Git refs, contents, pulls and dispatches keep real state: a branch
 *   created twice is 422 "Reference already exists"; a second open pull
 *   request for one head is 422 "A pull request already exists for
 *   owner:branch."; a file updated without its `sha` is 422.
 *
 * ## Routes (names for `fail`, `requestsTo`)
 *
 * `get_app` GET /app · `get_installation` GET /app/installations/{id} ·
 * `create_installation_token` POST /app/installations/{id}/access_tokens ·
 * `list_installation_repositories` GET /installation/repositories ·
 * `get_repo` GET /repos/{o}/{r} · `get_ref` GET /repos/{o}/{r}/git/ref/heads/{branch} ·
 * `create_ref` POST /repos/{o}/{r}/git/refs · `get_contents` GET /repos/{o}/{r}/contents/{path} ·
 * `put_contents` PUT /repos/{o}/{r}/contents/{path} · `create_pull` POST /repos/{o}/{r}/pulls ·
 * `list_pulls` GET /repos/{o}/{r}/pulls (`head=owner:branch`, `base`, `state`) ·
 * `get_pull` GET /repos/{o}/{r}/pulls/{number} · `dispatches` POST /repos/{o}/{r}/dispatches (204).
 *
 * ## Faults
 *
 * `fail(route, ...faults)` queues faults: each request to the route takes
 * the next one (before its credentials are looked at), then the route works
 * again. A fault is a status (`{ status: 404 | 422 | 500 | 502 | … }`,
 * GitHub's body for it, or your own `message`/`body`/`headers`),
 * `faults.rateLimited(resetInSeconds)` (403, `x-ratelimit-remaining: 0`,
 * `x-ratelimit-reset`), `faults.secondaryRateLimit(retryAfterSeconds)` (403
 * with `retry-after`), `faults.networkReset()` (the socket is destroyed), or
 * `faults.delay(ms)` (the request is answered normally, late).
 *
 * ## From workerd (test/workers)
 *
 * Tests inside workerd cannot hold this object; the same server answers
 * control requests under `/__control` (not a GitHub path):
 * `POST /__control/installations` (body: addInstallation's options),
 * `POST /__control/installations/{id}/{suspend|unsuspend|delete}`,
 * `PUT /__control/installations/{id}/repositories` `{ repositories }`,
 * `POST /__control/repos` `{ fullName, defaultBranch? }`,
 * `POST /__control/faults` `{ route, faults }`,
 * `GET /__control/requests` (the log), `DELETE /__control/requests`,
 * `POST /__control/pulls/{merge|close}` `{ repo, number }` (the pull request).
 */

export const GITHUB_DOCS = 'https://docs.github.com/rest';

export type GitHubRoute =
  | 'get_app'
  | 'get_installation'
  | 'create_installation_token'
  | 'list_installation_repositories'
  | 'get_repo'
  | 'get_ref'
  | 'create_ref'
  | 'get_contents'
  | 'put_contents'
  | 'create_pull'
  | 'list_pulls'
  | 'get_pull'
  | 'dispatches';

export type Fault =
  | { status: number; message?: string; body?: unknown; headers?: Record<string, string> }
  | { rateLimit: { resetInSeconds: number } }
  | { secondaryRateLimit: { retryAfterSeconds: number } }
  | { network: 'reset' }
  | { delayMs: number };

/** Constructors of the faults GitHub produces. */
export const faults = {
  notFound: (): Fault => ({ status: 404 }),
  unprocessable: (message = 'Validation Failed'): Fault => ({ status: 422, message }),
  serverError: (status: 500 | 502 | 503 | 504 = 500): Fault => ({ status }),
  rateLimited: (resetInSeconds = 60): Fault => ({ rateLimit: { resetInSeconds } }),
  secondaryRateLimit: (retryAfterSeconds = 60): Fault => ({ secondaryRateLimit: { retryAfterSeconds } }),
  networkReset: (): Fault => ({ network: 'reset' }),
  delay: (delayMs: number): Fault => ({ delayMs }),
};

/** GitHub's permission levels, as an installation or a fine-grained token holds them. */
export type Permissions = Record<string, 'read' | 'write'>;

/** SPEC Authentication 14: what the App is granted. */
export const APP_PERMISSIONS: Permissions = {
  contents: 'write',
  actions: 'write',
  pull_requests: 'write',
  issues: 'write',
  metadata: 'read',
};

export const APP_EVENTS = ['pull_request', 'pull_request_review', 'workflow_job', 'workflow_run'];

export interface AppKeys {
  /** `-----BEGIN RSA PRIVATE KEY-----`: what GitHub's "Generate a private key" downloads. */
  pkcs1Pem: string;
  /** `-----BEGIN PRIVATE KEY-----`. */
  pkcs8Pem: string;
  /** SPKI `-----BEGIN PUBLIC KEY-----`: what this server verifies the App's JWTs with. */
  publicKeyPem: string;
}

/** A fresh RSA-2048 key pair for a test App. */
export function generateAppKeys(): AppKeys {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    pkcs1Pem: privateKey.export({ type: 'pkcs1', format: 'pem' }) as string,
    pkcs8Pem: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }) as string,
  };
}

/** The lines of a PEM's base64 body: register them with a secret scan (a whole PEM never survives JSON escaping intact). */
export function pemBodyLines(pem: string): string[] {
  return pem
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.length >= 32 && !line.startsWith('-----'));
}

export interface LoggedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  route: GitHubRoute | 'unknown';
  /** The credential kind: the App's JWT, an installation token, a static token, none, or one that was refused. */
  auth: 'app' | 'installation' | 'token' | 'none' | 'refused';
  installationId?: number;
  body?: unknown;
  status: number;
  /** True when a queued fault answered it. */
  fault?: boolean;
}

interface Repository {
  id: number;
  owner: string;
  name: string;
  fullName: string;
  private: boolean;
  defaultBranch: string;
  branches: Map<string, string>;
  /** Every commit: sha → its files (path → base64 content) and its parent. */
  commits: Map<string, { parent: string | null; files: Map<string, string>; message: string }>;
  pulls: PullRequest[];
  dispatches: { event_type: string; client_payload: unknown; at: string }[];
}

export interface PullRequest {
  id: number;
  number: number;
  title: string;
  body: string | null;
  head: string;
  base: string;
  headSha: string;
  baseSha: string;
  state: 'open' | 'closed';
  merged: boolean;
  mergedAt: string | null;
  closedAt: string | null;
  mergeCommitSha: string | null;
  createdAt: string;
  updatedAt: string;
  user: string;
}

export interface Installation {
  id: number;
  account: { login: string; id: number; type: 'Organization' | 'User' };
  repositorySelection: 'all' | 'selected';
  /** Lowercased full names (selection `selected`). */
  repositories: Set<string>;
  permissions: Permissions;
  suspendedAt: string | null;
  deleted: boolean;
  createdAt: string;
}

export interface AddInstallationOptions {
  id: number;
  /** The account's login (an organization unless `accountType` says User). */
  account: string;
  accountType?: 'Organization' | 'User';
  /** `owner/name` of each repository granted (created when missing). */
  repositories?: string[];
  /** `all`: every repository whose owner is the account. Default `selected`. */
  repositorySelection?: 'all' | 'selected';
  permissions?: Permissions;
  suspended?: boolean;
}

export interface GitHubServerOptions {
  appId: string;
  /** The App's public key (SPKI PEM): JWTs are verified with it. */
  publicKeyPem: string;
  /** The App's slug (for GET /app and html URLs). Default `cellplane-test`. */
  appSlug?: string;
  /** How long an installation token lives. Default 3600 s, GitHub's. */
  tokenLifetimeSeconds?: number;
  /** The web origin in `html_url` fields. Default https://github.com. */
  htmlBase?: string;
}

export interface GitHubServer {
  /** The API base, for CODEHOST_API_URL: `http://127.0.0.1:PORT`. */
  url: string;
  /** host:port. */
  host: string;
  appId: string;
  appSlug: string;
  addInstallation(options: AddInstallationOptions): Installation;
  installation(id: number): Installation | undefined;
  setInstallationRepositories(id: number, repositories: string[]): void;
  suspendInstallation(id: number): void;
  unsuspendInstallation(id: number): void;
  deleteInstallation(id: number): void;
  /** A repository with its default branch and one commit holding README.md. Idempotent. */
  addRepository(fullName: string, options?: { defaultBranch?: string; private?: boolean }): void;
  /** A personal access token: sees `repositories` (or every one), with `permissions`. */
  addStaticToken(token: string, options?: { repositories?: string[] | 'all'; permissions?: Permissions }): void;
  /** Queues faults for a route: each of its next requests takes one. */
  fail(route: GitHubRoute, ...faults: Fault[]): void;
  /** Drops every queued fault. */
  clearFaults(): void;
  /** Every request received, oldest first. */
  readonly requests: LoggedRequest[];
  requestsTo(route: GitHubRoute): LoggedRequest[];
  /** Every installation token minted, with its installation (for a secret scan: none may appear in logs or responses). */
  readonly issuedTokens: { token: string; installationId: number; expiresAt: string }[];
  /** A repository's branch head, or undefined. */
  branchSha(fullName: string, branch: string): string | undefined;
  /** A file's decoded content on a branch, or undefined. */
  fileContent(fullName: string, branch: string, path: string): string | undefined;
  pulls(fullName: string): PullRequest[];
  dispatches(fullName: string): { event_type: string; client_payload: unknown; at: string }[];
  /** GitHub's JSON of a pull request (what its API and a `pull_request` event carry). */
  pullRequestJson(fullName: string, number: number): Record<string, unknown>;
  /** GitHub's JSON of a repository. */
  repositoryJson(fullName: string): Record<string, unknown>;
  /** Merges an open pull request (base branch moves to a merge commit); returns its JSON. */
  mergePullRequest(fullName: string, number: number): Record<string, unknown>;
  /** Closes an open pull request without merging; returns its JSON. */
  closePullRequest(fullName: string, number: number): Record<string, unknown>;
  close(): Promise<void>;
}

/** The environment that points a test API's App at this server (all four CODEHOST_APP_* and CODEHOST_API_URL). */
export function codehostEnv(
  github: Pick<GitHubServer, 'url' | 'appId' | 'appSlug'>,
  keys: Pick<AppKeys, 'pkcs1Pem' | 'pkcs8Pem'>,
  options: { keyFormat?: 'pkcs1' | 'pkcs8'; webhookSecret?: string } = {},
): Record<string, string> {
  return {
    CODEHOST_APP_ID: github.appId,
    CODEHOST_APP_NAME: github.appSlug,
    CODEHOST_APP_PRIVATE_KEY: options.keyFormat === 'pkcs8' ? keys.pkcs8Pem : keys.pkcs1Pem,
    CODEHOST_APP_WEBHOOK_SECRET: options.webhookSecret ?? TEST_WEBHOOK_SECRET,
    CODEHOST_API_URL: github.url,
  };
}


const PERMISSION_OF: Partial<Record<GitHubRoute, [string, 'read' | 'write']>> = {
  get_repo: ['metadata', 'read'],
  get_ref: ['contents', 'read'],
  create_ref: ['contents', 'write'],
  get_contents: ['contents', 'read'],
  put_contents: ['contents', 'write'],
  create_pull: ['pull_requests', 'write'],
  list_pulls: ['pull_requests', 'read'],
  get_pull: ['pull_requests', 'read'],
  // GitHub: "create a repository dispatch event" needs contents: write
  dispatches: ['contents', 'write'],
};

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: Record<string, string> = {},
  ) {
    super(`HTTP ${status}`);
  }
}

const githubError = (status: number, message: string, documentation = GITHUB_DOCS, extra: Record<string, unknown> = {}) =>
  new HttpError(status, { message, documentation_url: documentation, status: String(status), ...extra });

const notFound = () => githubError(404, 'Not Found');

const DEFAULT_FAULT_MESSAGES: Record<number, string> = {
  400: 'Problems parsing JSON',
  401: 'Bad credentials',
  403: 'Forbidden',
  404: 'Not Found',
  409: 'Conflict',
  422: 'Validation Failed',
  500: 'Server Error',
};

const base62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const randomToken = (prefix: string) => prefix + Array.from(randomBytes(36), (byte) => base62[byte % 62]).join('');
const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');
/** GitHub's timestamps: seconds, no fraction. */
const githubTime = (date: Date) => date.toISOString().replace(/\.\d{3}Z$/, 'Z');

export async function startGitHubServer(options: GitHubServerOptions): Promise<GitHubServer> {
  const appSlug = options.appSlug ?? 'cellplane-test';
  const htmlBase = options.htmlBase ?? 'https://github.com';
  const tokenLifetimeMs = (options.tokenLifetimeSeconds ?? 3600) * 1000;
  const publicKey: CryptoKey = await importSPKI(options.publicKeyPem, 'RS256');
  const repos = new Map<string, Repository>();
  const installations = new Map<number, Installation>();
  const tokens = new Map<string, { installationId: number; expiresAt: number }>();
  const staticTokens = new Map<string, { repositories: Set<string> | 'all'; permissions: Permissions }>();
  const queuedFaults = new Map<GitHubRoute, Fault[]>();
  const requests: LoggedRequest[] = [];
  const issuedTokens: GitHubServer['issuedTokens'] = [];
  const sockets = new Set<Socket>();
  let nextRepoId = 1000;
  let nextPullId = 5000;
  let nextAccountId = 9000;
  const accountIds = new Map<string, number>();
  let baseUrl = '';

  const accountId = (login: string) => {
    const key = login.toLowerCase();
    if (!accountIds.has(key)) accountIds.set(key, nextAccountId++);
    return accountIds.get(key)!;
  };

  const repoOf = (fullName: string): Repository | undefined => repos.get(fullName.toLowerCase());

  function addRepository(fullName: string, repoOptions: { defaultBranch?: string; private?: boolean } = {}): void {
    if (repoOf(fullName)) return;
    const [owner, name] = fullName.split('/');
    if (!owner || !name) throw new Error(`expects owner/name, got ${fullName}`);
    const defaultBranch = repoOptions.defaultBranch ?? 'main';
    const files = new Map([['README.md', Buffer.from(`# ${name}\n`).toString('base64')]]);
    const sha = sha1(`${fullName} initial commit`);
    repos.set(fullName.toLowerCase(), {
      id: nextRepoId++,
      owner,
      name,
      fullName,
      private: repoOptions.private ?? true,
      defaultBranch,
      branches: new Map([[defaultBranch, sha]]),
      commits: new Map([[sha, { parent: null, files, message: 'Initial commit' }]]),
      pulls: [],
      dispatches: [],
    });
  }

  function addInstallation(installOptions: AddInstallationOptions): Installation {
    for (const fullName of installOptions.repositories ?? []) addRepository(fullName);
    const installation: Installation = {
      id: installOptions.id,
      account: { login: installOptions.account, id: accountId(installOptions.account), type: installOptions.accountType ?? 'Organization' },
      repositorySelection: installOptions.repositorySelection ?? 'selected',
      repositories: new Set((installOptions.repositories ?? []).map((name) => name.toLowerCase())),
      permissions: installOptions.permissions ?? { ...APP_PERMISSIONS },
      suspendedAt: installOptions.suspended ? githubTime(new Date()) : null,
      deleted: false,
      createdAt: githubTime(new Date()),
    };
    installations.set(installation.id, installation);
    return installation;
  }

  const installationOrThrow = (id: number) => {
    const installation = installations.get(id);
    if (!installation) throw new Error(`no installation ${id}`);
    return installation;
  };

  /** What an installation may see: its granted repositories, or every repository of its account. */
  const installationSees = (installation: Installation, repo: Repository) =>
    installation.repositorySelection === 'all'
      ? repo.owner.toLowerCase() === installation.account.login.toLowerCase()
      : installation.repositories.has(repo.fullName.toLowerCase());

  const installationRepositories = (installation: Installation) => [...repos.values()].filter((repo) => installationSees(installation, repo));

  // --- JSON shapes ---------------------------------------------------------------

  const userJson = (login: string, type = 'User') => ({
    login,
    id: accountId(login),
    node_id: Buffer.from(`04:${type}${accountId(login)}`).toString('base64'),
    avatar_url: `https://avatars.githubusercontent.com/u/${accountId(login)}?v=4`,
    gravatar_id: '',
    url: `${baseUrl}/users/${login}`,
    html_url: `${htmlBase}/${login}`,
    type,
    site_admin: false,
  });

  const repositoryJson = (repo: Repository) => ({
    id: repo.id,
    node_id: Buffer.from(`010:Repository${repo.id}`).toString('base64'),
    name: repo.name,
    full_name: repo.fullName,
    private: repo.private,
    owner: userJson(repo.owner, 'Organization'),
    html_url: `${htmlBase}/${repo.fullName}`,
    description: null,
    fork: false,
    url: `${baseUrl}/repos/${repo.fullName}`,
    pulls_url: `${baseUrl}/repos/${repo.fullName}/pulls{/number}`,
    git_refs_url: `${baseUrl}/repos/${repo.fullName}/git/refs{/sha}`,
    contents_url: `${baseUrl}/repos/${repo.fullName}/contents/{+path}`,
    created_at: '2024-01-01T00:00:00Z',
    updated_at: '2024-01-01T00:00:00Z',
    pushed_at: '2024-01-01T00:00:00Z',
    visibility: repo.private ? 'private' : 'public',
    default_branch: repo.defaultBranch,
    archived: false,
    disabled: false,
  });

  const branchJson = (repo: Repository, ref: string, sha: string) => ({
    label: `${repo.owner}:${ref}`,
    ref,
    sha,
    user: userJson(repo.owner, 'Organization'),
    repo: repositoryJson(repo),
  });

  const pullJson = (repo: Repository, pull: PullRequest) => ({
    url: `${baseUrl}/repos/${repo.fullName}/pulls/${pull.number}`,
    id: pull.id,
    node_id: Buffer.from(`011:PullRequest${pull.id}`).toString('base64'),
    html_url: `${htmlBase}/${repo.fullName}/pull/${pull.number}`,
    diff_url: `${htmlBase}/${repo.fullName}/pull/${pull.number}.diff`,
    issue_url: `${baseUrl}/repos/${repo.fullName}/issues/${pull.number}`,
    number: pull.number,
    state: pull.state,
    locked: false,
    title: pull.title,
    user: userJson(pull.user, 'Bot'),
    body: pull.body,
    created_at: pull.createdAt,
    updated_at: pull.updatedAt,
    closed_at: pull.closedAt,
    merged_at: pull.mergedAt,
    merge_commit_sha: pull.mergeCommitSha,
    assignee: null,
    assignees: [],
    requested_reviewers: [],
    labels: [],
    draft: false,
    // an open pull request's head follows its branch; a closed one keeps the commit it closed at
    head: branchJson(repo, pull.head, pull.state === 'open' ? (repo.branches.get(pull.head) ?? pull.headSha) : pull.headSha),
    base: branchJson(repo, pull.base, pull.baseSha),
    author_association: 'NONE',
    merged: pull.merged,
    mergeable: pull.state === 'open' ? true : null,
    merged_by: pull.merged ? userJson('octocat') : null,
    comments: 0,
    commits: 1,
    additions: 1,
    deletions: 0,
    changed_files: 1,
  });

  const installationJson = (installation: Installation) => ({
    id: installation.id,
    account: userJson(installation.account.login, installation.account.type),
    repository_selection: installation.repositorySelection,
    access_tokens_url: `${baseUrl}/app/installations/${installation.id}/access_tokens`,
    repositories_url: `${baseUrl}/installation/repositories`,
    html_url: `${htmlBase}/organizations/${installation.account.login}/settings/installations/${installation.id}`,
    app_id: Number(options.appId),
    app_slug: appSlug,
    target_id: installation.account.id,
    target_type: installation.account.type,
    permissions: installation.permissions,
    events: APP_EVENTS,
    created_at: installation.createdAt,
    updated_at: installation.createdAt,
    single_file_name: null,
    has_multiple_single_files: false,
    single_file_paths: [],
    suspended_by: installation.suspendedAt ? userJson(installation.account.login) : null,
    suspended_at: installation.suspendedAt,
  });

  const refJson = (repo: Repository, branch: string, sha: string) => ({
    ref: `refs/heads/${branch}`,
    node_id: Buffer.from(`03:Ref${repo.id}:${branch}`).toString('base64'),
    url: `${baseUrl}/repos/${repo.fullName}/git/refs/heads/${branch}`,
    object: { sha, type: 'commit', url: `${baseUrl}/repos/${repo.fullName}/git/commits/${sha}` },
  });

  const fileJson = (repo: Repository, path: string, blobSha: string, content?: string) => ({
    type: 'file',
    name: path.split('/').at(-1),
    path,
    sha: blobSha,
    size: content === undefined ? 0 : Buffer.from(content, 'base64').length,
    url: `${baseUrl}/repos/${repo.fullName}/contents/${path}`,
    html_url: `${htmlBase}/${repo.fullName}/blob/${repo.defaultBranch}/${path}`,
    git_url: `${baseUrl}/repos/${repo.fullName}/git/blobs/${blobSha}`,
    download_url: null,
    ...(content === undefined ? {} : { content, encoding: 'base64' }),
    _links: { self: `${baseUrl}/repos/${repo.fullName}/contents/${path}`, git: `${baseUrl}/repos/${repo.fullName}/git/blobs/${blobSha}`, html: `${htmlBase}/${repo.fullName}/blob/${repo.defaultBranch}/${path}` },
  });

  const blobSha = (content: string) => sha1(`blob ${content}`);

  // --- credentials ---------------------------------------------------------------

  type Credential =
    | { kind: 'app' }
    | { kind: 'installation'; installation: Installation }
    | { kind: 'token'; repositories: Set<string> | 'all'; permissions: Permissions }
    | { kind: 'none' };

  const bearerOf = (req: IncomingMessage) => /^(?:bearer|token)\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];

  async function appCredential(req: IncomingMessage, log: LoggedRequest): Promise<void> {
    const jwt = bearerOf(req);
    if (!jwt || jwt.split('.').length !== 3) {
      log.auth = 'refused';
      throw githubError(401, 'A JSON web token could not be decoded');
    }
    try {
      const { payload } = await jwtVerify(jwt, publicKey, { algorithms: ['RS256'], clockTolerance: 60 });
      const now = Math.floor(Date.now() / 1000);
      if (String(payload.iss) !== options.appId) throw githubError(401, "'Issuer' claim ('iss') must be an Integer");
      if (typeof payload.exp !== 'number' || payload.exp - now > 600 + 60) {
        throw githubError(401, "'Expiration time' claim ('exp') is too far in the future");
      }
      if (typeof payload.iat !== 'number' || payload.iat > now + 60) {
        throw githubError(401, "'Issued at' claim ('iat') must be an Integer representing a time in the past");
      }
      log.auth = 'app';
    } catch (error) {
      log.auth = 'refused';
      if (error instanceof HttpError) throw error;
      throw githubError(401, 'A JSON web token could not be decoded');
    }
  }

  function tokenCredential(req: IncomingMessage, log: LoggedRequest): Credential {
    const token = bearerOf(req);
    if (!token) return { kind: 'none' };
    const minted = tokens.get(token);
    if (minted) {
      const installation = installations.get(minted.installationId);
      if (minted.expiresAt > Date.now() && installation && !installation.deleted && !installation.suspendedAt) {
        log.auth = 'installation';
        log.installationId = installation.id;
        return { kind: 'installation', installation };
      }
    }
    const fixed = staticTokens.get(token);
    if (fixed) {
      log.auth = 'token';
      return { kind: 'token', ...fixed };
    }
    log.auth = 'refused';
    throw githubError(401, 'Bad credentials');
  }

  /** The repository a token credential addresses: 404 when it cannot see it, 403 when it may not do `route`. */
  function repoFor(credential: Credential, owner: string, name: string, route: GitHubRoute): Repository {
    const repo = repoOf(`${owner}/${name}`);
    let permissions: Permissions;
    switch (credential.kind) {
      case 'installation':
        if (!repo || !installationSees(credential.installation, repo)) throw notFound();
        permissions = credential.installation.permissions;
        break;
      case 'token':
        if (!repo || (credential.repositories !== 'all' && !credential.repositories.has(repo.fullName.toLowerCase()))) throw notFound();
        permissions = credential.permissions;
        break;
      case 'none': {
        const write = PERMISSION_OF[route]?.[1] === 'write';
        if (!repo || repo.private || write) throw write ? githubError(401, 'Requires authentication') : notFound();
        return repo;
      }
      case 'app':
        throw githubError(403, 'Resource not accessible by integration');
    }
    const needed = PERMISSION_OF[route];
    if (needed) {
      const held = permissions[needed[0]];
      if (!held || (needed[1] === 'write' && held !== 'write')) throw githubError(403, 'Resource not accessible by integration');
    }
    return repo;
  }

  // --- the routes ------------------------------------------------------------------

  interface Matched {
    route: GitHubRoute;
    params: string[];
  }

  function match(method: string, path: string): Matched | undefined {
    const segments = path.split('/').slice(1).map((segment) => decodeURIComponent(segment));
    const [a, b, c, d, e, f, g] = segments;
    if (a === 'app' && segments.length === 1 && method === 'GET') return { route: 'get_app', params: [] };
    if (a === 'app' && b === 'installations' && c && segments.length === 3 && method === 'GET') return { route: 'get_installation', params: [c] };
    if (a === 'app' && b === 'installations' && c && d === 'access_tokens' && segments.length === 4 && method === 'POST') {
      return { route: 'create_installation_token', params: [c] };
    }
    if (a === 'installation' && b === 'repositories' && segments.length === 2 && method === 'GET') return { route: 'list_installation_repositories', params: [] };
    if (a !== 'repos' || !b || !c) return undefined;
    if (segments.length === 3 && method === 'GET') return { route: 'get_repo', params: [b, c] };
    if (d === 'git' && e === 'ref' && f === 'heads' && g && method === 'GET') return { route: 'get_ref', params: [b, c, segments.slice(6).join('/')] };
    if (d === 'git' && e === 'refs' && segments.length === 5 && method === 'POST') return { route: 'create_ref', params: [b, c] };
    if (d === 'contents' && e && method === 'GET') return { route: 'get_contents', params: [b, c, segments.slice(4).join('/')] };
    if (d === 'contents' && e && method === 'PUT') return { route: 'put_contents', params: [b, c, segments.slice(4).join('/')] };
    if (d === 'pulls' && segments.length === 4 && method === 'POST') return { route: 'create_pull', params: [b, c] };
    if (d === 'pulls' && segments.length === 4 && method === 'GET') return { route: 'list_pulls', params: [b, c] };
    if (d === 'pulls' && e && segments.length === 5 && method === 'GET') return { route: 'get_pull', params: [b, c, e] };
    if (d === 'dispatches' && segments.length === 4 && method === 'POST') return { route: 'dispatches', params: [b, c] };
    return undefined;
  }

  const asObject = (body: unknown): Record<string, unknown> => {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw githubError(400, 'Problems parsing JSON');
    return body as Record<string, unknown>;
  };

  const installationId = (raw: string) => {
    const id = Number(raw);
    if (!Number.isInteger(id)) throw notFound();
    return id;
  };

  async function handle(req: IncomingMessage, matched: Matched, query: URLSearchParams, body: unknown, log: LoggedRequest): Promise<{ status: number; body?: unknown; headers?: Record<string, string> }> {
    const { route, params } = matched;
    if (route === 'get_app' || route === 'get_installation' || route === 'create_installation_token') {
      await appCredential(req, log);
      if (route === 'get_app') {
        return {
          status: 200,
          body: {
            id: Number(options.appId),
            slug: appSlug,
            node_id: 'MDM6QXBwMQ==',
            owner: userJson('cellplane', 'Organization'),
            name: appSlug,
            description: 'A test App',
            external_url: 'http://cellplane.test',
            html_url: `${htmlBase}/apps/${appSlug}`,
            created_at: '2024-01-01T00:00:00Z',
            updated_at: '2024-01-01T00:00:00Z',
            permissions: APP_PERMISSIONS,
            events: APP_EVENTS,
            installations_count: [...installations.values()].filter((i) => !i.deleted).length,
          },
        };
      }
      const installation = installations.get(installationId(params[0]!));
      if (!installation || installation.deleted) throw notFound();
      log.installationId = installation.id;
      if (route === 'get_installation') return { status: 200, body: installationJson(installation) };
      if (installation.suspendedAt) {
        throw githubError(403, 'This installation has been suspended', 'https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app');
      }
      const token = randomToken('ghs_');
      const expiresAt = Date.now() + tokenLifetimeMs;
      tokens.set(token, { installationId: installation.id, expiresAt });
      issuedTokens.push({ token, installationId: installation.id, expiresAt: githubTime(new Date(expiresAt)) });
      return {
        status: 201,
        body: {
          token,
          expires_at: githubTime(new Date(expiresAt)),
          permissions: installation.permissions,
          repository_selection: installation.repositorySelection,
        },
      };
    }

    const credential = tokenCredential(req, log);
    if (route === 'list_installation_repositories') {
      if (credential.kind !== 'installation') {
        if (credential.kind === 'none') throw githubError(401, 'Requires authentication');
        throw githubError(403, 'You must authenticate with an installation access token in order to list repositories for an installation.');
      }
      const all = installationRepositories(credential.installation);
      const perPage = Math.min(100, Math.max(1, Number(query.get('per_page') ?? 30) || 30));
      const page = Math.max(1, Number(query.get('page') ?? 1) || 1);
      const slice = all.slice((page - 1) * perPage, page * perPage);
      const headers: Record<string, string> = {};
      const last = Math.max(1, Math.ceil(all.length / perPage));
      if (page < last) {
        const link = (p: number) => `<${baseUrl}/installation/repositories?per_page=${perPage}&page=${p}>`;
        headers.link = `${link(page + 1)}; rel="next", ${link(last)}; rel="last"`;
      }
      return {
        status: 200,
        headers,
        body: { total_count: all.length, repository_selection: credential.installation.repositorySelection, repositories: slice.map(repositoryJson) },
      };
    }

    const [owner, name] = params as [string, string];
    const repo = repoFor(credential, owner, name, route);
    const actor = credential.kind === 'installation' ? `${appSlug}[bot]` : 'octocat';
    switch (route) {
      case 'get_repo':
        return { status: 200, body: repositoryJson(repo) };
      case 'get_ref': {
        const sha = repo.branches.get(params[2]!);
        if (!sha) throw githubError(404, 'Not Found', 'https://docs.github.com/rest/git/refs#get-a-reference');
        return { status: 200, body: refJson(repo, params[2]!, sha) };
      }
      case 'create_ref': {
        const input = asObject(body);
        const ref = input.ref;
        const sha = input.sha;
        if (typeof ref !== 'string' || typeof sha !== 'string') {
          throw githubError(422, 'Invalid request.\n\n"ref", "sha" weren\'t supplied.', 'https://docs.github.com/rest/git/refs#create-a-reference');
        }
        if (!/^refs\/heads\/.+/.test(ref) || ref.split('/').length < 3) {
          throw githubError(422, 'Reference name must start with \'refs/\' and have at least two slashes.', 'https://docs.github.com/rest/git/refs#create-a-reference');
        }
        const branch = ref.slice('refs/heads/'.length);
        if (repo.branches.has(branch)) throw githubError(422, 'Reference already exists', 'https://docs.github.com/rest/git/refs#create-a-reference');
        if (!repo.commits.has(sha)) throw githubError(422, 'Object does not exist', 'https://docs.github.com/rest/git/refs#create-a-reference');
        repo.branches.set(branch, sha);
        return { status: 201, body: refJson(repo, branch, sha) };
      }
      case 'get_contents': {
        const branch = query.get('ref') ?? repo.defaultBranch;
        const sha = repo.branches.get(branch) ?? (repo.commits.has(branch) ? branch : undefined);
        if (!sha) throw githubError(404, `No commit found for the ref ${branch}`, 'https://docs.github.com/rest/repos/contents#get-repository-content');
        const content = repo.commits.get(sha)!.files.get(params[2]!);
        if (content === undefined) throw githubError(404, 'Not Found', 'https://docs.github.com/rest/repos/contents#get-repository-content');
        return { status: 200, body: fileJson(repo, params[2]!, blobSha(content), content) };
      }
      case 'put_contents': {
        const input = asObject(body);
        const path = params[2]!;
        if (typeof input.message !== 'string' || typeof input.content !== 'string') {
          throw githubError(422, 'Invalid request.\n\n"message", "content" weren\'t supplied.', 'https://docs.github.com/rest/repos/contents#create-or-update-file-contents');
        }
        if (!/^[A-Za-z0-9+/]*={0,2}$/.test(input.content.replace(/\s/g, ''))) {
          throw githubError(422, 'content is not valid Base64', 'https://docs.github.com/rest/repos/contents#create-or-update-file-contents');
        }
        const branch = typeof input.branch === 'string' ? input.branch : repo.defaultBranch;
        const head = repo.branches.get(branch);
        if (!head) throw githubError(404, `Branch ${branch} not found`, 'https://docs.github.com/rest/repos/contents#create-or-update-file-contents');
        const files = new Map(repo.commits.get(head)!.files);
        const existing = files.get(path);
        if (existing !== undefined) {
          if (typeof input.sha !== 'string') {
            throw githubError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.', 'https://docs.github.com/rest/repos/contents#create-or-update-file-contents');
          }
          if (input.sha !== blobSha(existing)) {
            throw githubError(409, `${path} does not match ${input.sha}`, 'https://docs.github.com/rest/repos/contents#create-or-update-file-contents');
          }
        }
        const content = input.content.replace(/\s/g, '');
        files.set(path, content);
        const commit = sha1(`${repo.fullName} ${head} ${path} ${content} ${randomBytes(4).toString('hex')}`);
        repo.commits.set(commit, { parent: head, files, message: input.message });
        repo.branches.set(branch, commit);
        return {
          status: existing === undefined ? 201 : 200,
          body: {
            content: fileJson(repo, path, blobSha(content)),
            commit: {
              sha: commit,
              node_id: Buffer.from(`06:Commit${commit}`).toString('base64'),
              url: `${baseUrl}/repos/${repo.fullName}/git/commits/${commit}`,
              html_url: `${htmlBase}/${repo.fullName}/commit/${commit}`,
              author: { name: actor, email: 'bot@users.noreply.github.com', date: githubTime(new Date()) },
              committer: { name: actor, email: 'bot@users.noreply.github.com', date: githubTime(new Date()) },
              message: input.message,
              tree: { sha: sha1(`tree ${commit}`), url: `${baseUrl}/repos/${repo.fullName}/git/trees/${sha1(`tree ${commit}`)}` },
              parents: [{ sha: head, url: `${baseUrl}/repos/${repo.fullName}/git/commits/${head}`, html_url: `${htmlBase}/${repo.fullName}/commit/${head}` }],
              verification: { verified: false, reason: 'unsigned', signature: null, payload: null },
            },
          },
        };
      }
      case 'create_pull': {
        const input = asObject(body);
        const documentation = 'https://docs.github.com/rest/pulls/pulls#create-a-pull-request';
        if (typeof input.head !== 'string' || typeof input.base !== 'string' || (typeof input.title !== 'string' && input.issue === undefined)) {
          throw githubError(422, 'Validation Failed', documentation, {
            errors: [{ resource: 'PullRequest', code: 'missing_field', field: typeof input.head !== 'string' ? 'head' : typeof input.base !== 'string' ? 'base' : 'title' }],
          });
        }
        const head = input.head.includes(':') ? input.head.split(':')[1]! : input.head;
        const headSha = repo.branches.get(head);
        const baseSha = repo.branches.get(input.base);
        if (!headSha || !baseSha) {
          throw githubError(422, 'Validation Failed', documentation, { errors: [{ resource: 'PullRequest', field: headSha ? 'base' : 'head', code: 'invalid' }] });
        }
        if (repo.pulls.some((pull) => pull.state === 'open' && pull.head === head && pull.base === input.base)) {
          throw githubError(422, 'Validation Failed', documentation, {
            errors: [{ resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${repo.owner}:${head}.` }],
          });
        }
        if (headSha === baseSha) {
          throw githubError(422, 'Validation Failed', documentation, {
            errors: [{ resource: 'PullRequest', code: 'custom', message: `No commits between ${input.base} and ${head}` }],
          });
        }
        const now = githubTime(new Date());
        const pull: PullRequest = {
          id: nextPullId++,
          number: repo.pulls.length + 1,
          title: String(input.title),
          body: typeof input.body === 'string' ? input.body : null,
          head,
          base: input.base,
          headSha,
          baseSha,
          state: 'open',
          merged: false,
          mergedAt: null,
          closedAt: null,
          mergeCommitSha: null,
          createdAt: now,
          updatedAt: now,
          user: actor,
        };
        repo.pulls.push(pull);
        return { status: 201, body: pullJson(repo, pull) };
      }
      case 'list_pulls': {
        const state = query.get('state') ?? 'open';
        const head = query.get('head');
        const baseBranch = query.get('base');
        const rows = repo.pulls.filter(
          (pull) =>
            (state === 'all' || pull.state === state) &&
            (head === null || `${repo.owner}:${pull.head}`.toLowerCase() === head.toLowerCase()) &&
            (baseBranch === null || pull.base === baseBranch),
        );
        return { status: 200, body: rows.reverse().map((pull) => pullJson(repo, pull)) };
      }
      case 'get_pull': {
        const pull = repo.pulls.find((candidate) => candidate.number === Number(params[2]));
        if (!pull) throw githubError(404, 'Not Found', 'https://docs.github.com/rest/pulls/pulls#get-a-pull-request');
        return { status: 200, body: pullJson(repo, pull) };
      }
      case 'dispatches': {
        const input = asObject(body);
        const documentation = 'https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event';
        if (typeof input.event_type !== 'string' || input.event_type.length === 0 || input.event_type.length > 100) {
          throw githubError(422, "Invalid request.\n\nFor 'properties/event_type', nil is not a string.", documentation);
        }
        const payload = input.client_payload;
        if (payload !== undefined && (typeof payload !== 'object' || payload === null || Array.isArray(payload))) {
          throw githubError(422, "Invalid request.\n\nFor 'properties/client_payload', it is not an object.", documentation);
        }
        if (payload && Object.keys(payload).length > 10) {
          throw githubError(422, 'Invalid request.\n\nNo more than 10 properties are allowed; 11 were supplied.', documentation);
        }
        repo.dispatches.push({ event_type: input.event_type, client_payload: payload ?? {}, at: new Date().toISOString() });
        return { status: 204 };
      }
      default:
        throw notFound();
    }
  }

  function faultResponse(fault: Exclude<Fault, { network: 'reset' } | { delayMs: number }>): HttpError {
    if ('rateLimit' in fault) {
      const reset = Math.floor(Date.now() / 1000) + fault.rateLimit.resetInSeconds;
      return new HttpError(
        403,
        {
          message: 'API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.',
          documentation_url: 'https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting',
          status: '403',
        },
        { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(reset), 'x-ratelimit-used': '5000' },
      );
    }
    if ('secondaryRateLimit' in fault) {
      return new HttpError(
        403,
        {
          message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.',
          documentation_url: 'https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits',
          status: '403',
        },
        { 'retry-after': String(fault.secondaryRateLimit.retryAfterSeconds) },
      );
    }
    const body = fault.body ?? (fault.status === 502 || fault.status === 503 || fault.status === 504
      ? undefined
      : { message: fault.message ?? DEFAULT_FAULT_MESSAGES[fault.status] ?? 'Error', documentation_url: GITHUB_DOCS, status: String(fault.status) });
    return new HttpError(fault.status, body, fault.headers ?? {});
  }

  const rateLimitHeaders = (): Record<string, string> => ({
    'x-ratelimit-limit': '5000',
    'x-ratelimit-remaining': '4999',
    'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 3600),
    'x-ratelimit-used': '1',
    'x-ratelimit-resource': 'core',
  });

  function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    const common = {
      'x-github-request-id': randomBytes(8).toString('hex').toUpperCase(),
      'x-github-media-type': 'github.v3; format=json',
      'github-authentication-token-expiration': undefined,
      ...rateLimitHeaders(),
      ...headers,
    };
    const defined = Object.fromEntries(Object.entries(common).filter(([, value]) => value !== undefined)) as Record<string, string>;
    if (status === 204) {
      res.writeHead(204, defined);
      res.end();
    } else if (body === undefined) {
      // GitHub's 502/503 pages are HTML, not JSON
      res.writeHead(status, { ...defined, 'content-type': 'text/html; charset=utf-8' });
      res.end('<html><body><h1>Unicorn!</h1><p>No server is currently available to service your request.</p></body></html>');
    } else {
      res.writeHead(status, { ...defined, 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify(body));
    }
  }

  // --- control (for workerd) -------------------------------------------------------

  function control(method: string, path: string, body: unknown): { status: number; body?: unknown } {
    const segments = path.split('/').slice(2);
    const input = (body ?? {}) as Record<string, any>;
    if (method === 'POST' && segments[0] === 'installations' && segments.length === 1) {
      const installation = addInstallation(input as AddInstallationOptions);
      return { status: 201, body: installationJson(installation) };
    }
    if (segments[0] === 'installations' && segments[1]) {
      const id = Number(segments[1]);
      if (method === 'POST' && segments[2] === 'suspend') server.suspendInstallation(id);
      else if (method === 'POST' && segments[2] === 'unsuspend') server.unsuspendInstallation(id);
      else if (method === 'POST' && segments[2] === 'delete') server.deleteInstallation(id);
      else if (method === 'PUT' && segments[2] === 'repositories') server.setInstallationRepositories(id, input.repositories ?? []);
      else return { status: 404, body: { error: 'unknown control route' } };
      return { status: 200, body: installationJson(installationOrThrow(id)) };
    }
    if (method === 'POST' && segments[0] === 'repos') {
      addRepository(String(input.fullName), { defaultBranch: input.defaultBranch });
      return { status: 201, body: repositoryJson(repoOf(String(input.fullName))!) };
    }
    if (method === 'POST' && segments[0] === 'faults') {
      server.fail(input.route as GitHubRoute, ...((input.faults ?? []) as Fault[]));
      return { status: 200, body: { queued: (input.faults ?? []).length } };
    }
    if (segments[0] === 'requests' && method === 'GET') return { status: 200, body: requests };
    if (segments[0] === 'requests' && method === 'DELETE') {
      requests.length = 0;
      return { status: 200, body: { cleared: true } };
    }
    if (method === 'POST' && segments[0] === 'pulls' && (segments[1] === 'merge' || segments[1] === 'close')) {
      const pull = segments[1] === 'merge' ? server.mergePullRequest(input.repo, Number(input.number)) : server.closePullRequest(input.repo, Number(input.number));
      return { status: 200, body: pull };
    }
    return { status: 404, body: { error: 'unknown control route' } };
  }

  const httpServer: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        const url = new URL(req.url ?? '/', 'http://github.local');
        const method = req.method ?? 'GET';
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown;
        let badJson = false;
        if (text.length > 0) {
          try {
            body = JSON.parse(text);
          } catch {
            badJson = true;
          }
        }
        if (url.pathname.startsWith('/__control/')) {
          try {
            const answer = control(method, url.pathname, body);
            res.writeHead(answer.status, { 'content-type': 'application/json' });
            res.end(JSON.stringify(answer.body ?? {}));
          } catch (error) {
            res.writeHead(400, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ error: String(error) }));
          }
          return;
        }
        const query = url.searchParams;
        const matched = match(method, url.pathname);
        const log: LoggedRequest = {
          method,
          path: url.pathname,
          query: Object.fromEntries(query),
          route: matched?.route ?? 'unknown',
          auth: req.headers.authorization ? 'refused' : 'none',
          ...(body === undefined ? {} : { body }),
          status: 0,
        };
        requests.push(log);
        const respond = (status: number, responseBody: unknown, headers?: Record<string, string>) => {
          log.status = status;
          send(res, status, responseBody, headers);
        };
        if (!matched) return respond(404, { message: 'Not Found', documentation_url: GITHUB_DOCS, status: '404' });
        const fault = queuedFaults.get(matched.route)?.shift();
        if (fault && 'network' in fault) {
          log.status = -1;
          log.fault = true;
          req.socket.destroy();
          return;
        }
        if (fault && 'delayMs' in fault) await new Promise((resolve) => setTimeout(resolve, fault.delayMs));
        else if (fault) {
          log.fault = true;
          const error = faultResponse(fault);
          return respond(error.status, error.body, error.headers);
        }
        try {
          if (badJson) throw githubError(400, 'Problems parsing JSON');
          const answer = await handle(req, matched, query, body, log);
          respond(answer.status, answer.body, answer.headers);
        } catch (error) {
          if (error instanceof HttpError) return respond(error.status, error.body, error.headers);
          respond(500, { message: `local GitHub failed: ${String(error)}`, documentation_url: GITHUB_DOCS });
        }
      })();
    });
  });
  httpServer.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
  const { port } = httpServer.address() as AddressInfo;
  baseUrl = `http://127.0.0.1:${port}`;

  const pullOf = (fullName: string, number: number) => {
    const repo = repoOf(fullName);
    const pull = repo?.pulls.find((candidate) => candidate.number === number);
    if (!repo || !pull) throw new Error(`no pull request ${fullName}#${number}`);
    return { repo, pull };
  };

  const server: GitHubServer = {
    url: baseUrl,
    host: `127.0.0.1:${port}`,
    appId: options.appId,
    appSlug,
    addInstallation,
    installation: (id) => installations.get(id),
    setInstallationRepositories(id, repositories) {
      for (const fullName of repositories) addRepository(fullName);
      installationOrThrow(id).repositories = new Set(repositories.map((name) => name.toLowerCase()));
    },
    suspendInstallation(id) {
      installationOrThrow(id).suspendedAt = githubTime(new Date());
    },
    unsuspendInstallation(id) {
      installationOrThrow(id).suspendedAt = null;
    },
    deleteInstallation(id) {
      installationOrThrow(id).deleted = true;
    },
    addRepository,
    addStaticToken(token, tokenOptions = {}) {
      const listed = tokenOptions.repositories ?? 'all';
      if (listed !== 'all') for (const fullName of listed) addRepository(fullName);
      staticTokens.set(token, {
        repositories: listed === 'all' ? 'all' : new Set(listed.map((name) => name.toLowerCase())),
        permissions: tokenOptions.permissions ?? { contents: 'write', pull_requests: 'write', metadata: 'read', actions: 'write' },
      });
    },
    fail(route, ...queued) {
      queuedFaults.set(route, [...(queuedFaults.get(route) ?? []), ...queued]);
    },
    clearFaults() {
      queuedFaults.clear();
    },
    requests,
    requestsTo: (route) => requests.filter((request) => request.route === route),
    issuedTokens,
    branchSha: (fullName, branch) => repoOf(fullName)?.branches.get(branch),
    fileContent(fullName, branch, path) {
      const repo = repoOf(fullName);
      const sha = repo?.branches.get(branch);
      const content = sha ? repo!.commits.get(sha)!.files.get(path) : undefined;
      return content === undefined ? undefined : Buffer.from(content, 'base64').toString('utf8');
    },
    pulls: (fullName) => repoOf(fullName)?.pulls ?? [],
    dispatches: (fullName) => repoOf(fullName)?.dispatches ?? [],
    pullRequestJson(fullName, number) {
      const { repo, pull } = pullOf(fullName, number);
      return pullJson(repo, pull);
    },
    repositoryJson(fullName) {
      const repo = repoOf(fullName);
      if (!repo) throw new Error(`no repository ${fullName}`);
      return repositoryJson(repo);
    },
    mergePullRequest(fullName, number) {
      const { repo, pull } = pullOf(fullName, number);
      if (pull.state !== 'open') throw new Error(`pull request ${fullName}#${number} is ${pull.state}`);
      const baseHead = repo.branches.get(pull.base)!;
      const merged = sha1(`merge ${fullName}#${number} ${pull.headSha}`);
      const headFiles = repo.commits.get(repo.branches.get(pull.head) ?? pull.headSha)!.files;
      repo.commits.set(merged, { parent: baseHead, files: new Map([...repo.commits.get(baseHead)!.files, ...headFiles]), message: `Merge pull request #${number}` });
      repo.branches.set(pull.base, merged);
      const now = githubTime(new Date());
      pull.headSha = repo.branches.get(pull.head) ?? pull.headSha;
      Object.assign(pull, { state: 'closed', merged: true, mergedAt: now, closedAt: now, updatedAt: now, mergeCommitSha: merged });
      return pullJson(repo, pull);
    },
    closePullRequest(fullName, number) {
      const { repo, pull } = pullOf(fullName, number);
      if (pull.state !== 'open') throw new Error(`pull request ${fullName}#${number} is ${pull.state}`);
      const now = githubTime(new Date());
      pull.headSha = repo.branches.get(pull.head) ?? pull.headSha;
      Object.assign(pull, { state: 'closed', merged: false, closedAt: now, updatedAt: now });
      return pullJson(repo, pull);
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => httpServer.close(() => resolve()));
    },
  };
  return server;
}
