import { and, eq } from 'drizzle-orm';
import { expect } from 'vitest';
import { auditEvents } from '../../src/db/schema';
import { uniqueSlug } from './fixtures';
import { pullRequestEvent, signEvent, TEST_WEBHOOK_SECRET, type SignedEvent } from './github-events';
import { codehostEnv, generateAppKeys, pemBodyLines, startGitHubServer, type AppKeys, type GitHubServer } from './github-server';
import { createTestApi, manualClock, type ApiResponse, type TestApi } from './node-app';
import { createUserTenant, signUp, type TestUser } from './people';

/**
 * The world of the pull-request run suites (test/node/pull-request-runs.test.ts,
 * test/node/github-webhook-project.test.ts): the local GitHub server
 * (./github-server.ts) with the App's installation 101 on `acme`
 * (acme/infra, acme/pipelines, acme/unlinked), a repository no installation
 * grants (acme-solo/app, reachable with SOLO_TOKEN only), and an API on it
 * (the App configured, retries without jitter, a manual clock at real time)
 * where a user's organization claimed the installation and its project
 * links acme/infra; environments `default` and `staging`, each with its own
 * value of the secret `gh-hook`; an entity type `vm` (provisioning, running,
 * failed). Helpers build pull-request actions, trigger and deliver them, and
 * merge or close their pull requests on GitHub with the signed `closed`
 * event GitHub would send.
 */

export const APP_ID = '4242';
export const INSTALLATION = 101;
export const HOOK_SECRET_DEFAULT = 'hook-secret-default-7f3a91';
export const HOOK_SECRET_STAGING = 'hook-secret-staging-2c6d40';
/** A personal access token GitHub knows, for acme-solo/app only (no installation grants that repository). */
export const SOLO_TOKEN = 'ghp_soloTokenForAppRepo0123456789abcdef';
/** A token GitHub has never issued. */
export const UNKNOWN_TOKEN = 'ghp_neverIssuedByGitHub0123456789abcdef';
/** A token that may open pull requests on acme/infra: stands for a person (or an earlier attempt) on GitHub. */
export const OUTSIDE_TOKEN = 'ghp_outsideTokenOnInfra0123456789abcdef';

export interface Triggered {
  id: string;
  entity: string;
  envName: string;
}

export type PullRequestHarness = Awaited<ReturnType<typeof createPullRequestHarness>>;

export async function createPullRequestHarness() {
  const keys: AppKeys = generateAppKeys();
  const github: GitHubServer = await startGitHubServer({ appId: APP_ID, publicKeyPem: keys.publicKeyPem });
  github.addInstallation({ id: INSTALLATION, account: 'acme', repositories: ['acme/infra', 'acme/pipelines', 'acme/unlinked'] });
  github.addRepository('acme-solo/app');
  github.addStaticToken(SOLO_TOKEN, { repositories: ['acme-solo/app'] });
  github.addStaticToken(OUTSIDE_TOKEN, { repositories: ['acme/infra'] });
  const clock = manualClock(new Date());
  const api: TestApi = await createTestApi({ clock, env: codehostEnv(github, keys), engine: { random: () => 0 } });
  /** Every response of the suite's own calls, for the leak checks. */
  const responses: ApiResponse[] = [];
  let owner: TestUser;

  async function call(method: string, path: string, body?: unknown, token: string | undefined = owner.token): Promise<ApiResponse> {
    const response = await api.call(method, path, { token, body });
    responses.push(response);
    return response;
  }

  async function ok(status: number, pending: Promise<ApiResponse>): Promise<any> {
    const response = await pending;
    expect(response.status, JSON.stringify(response.body)).toBe(status);
    return response.body;
  }

  owner = await signUp(api, { name: 'Owner' });
  const { org, project } = await createUserTenant(api, owner);
  const proj = `/${org.slug}/${project.slug}`;
  // the organization claims the installation (as the install callback would) and the project links its repository
  await ok(200, call('POST', '/github/installations/recover', { orgId: org.slug, installationId: INSTALLATION }));
  await ok(201, call('PUT', `${proj}/github/repos/acme/infra`));
  await ok(201, call('POST', `${proj}/envs`, { name: 'staging' }));
  await ok(
    201,
    call('POST', `${proj}/entity-types`, { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' }),
  );
  await ok(201, call('PUT', `${proj}/envs/default/secrets/gh-hook`, { value: HOOK_SECRET_DEFAULT }));
  await ok(201, call('PUT', `${proj}/envs/staging/secrets/gh-hook`, { value: HOOK_SECRET_STAGING }));
  await ok(201, call('PUT', `${proj}/envs/default/secrets/solo-token`, { value: SOLO_TOKEN }));

  /** A pull-request action on `vm` (onSuccess running, onFailure failed); `trigger` fields replace the defaults. */
  async function prAction(trigger: Record<string, unknown> = {}, fields: Record<string, unknown> = {}): Promise<string> {
    const name = uniqueSlug('resize');
    await ok(
      201,
      call('POST', `${proj}/actions`, {
        kind: 'Action',
        name,
        entityType: 'vm',
        onSuccess: 'running',
        onFailure: 'failed',
        parameters: [{ name: 'size', type: 'string', default: 'small' }],
        trigger: {
          type: 'pull-request',
          repo: 'acme/infra',
          title: 'Resize {{ entity.name }} to {{ parameters.size }}',
          body: 'Opened by run {{ run.id }}',
          files: [{ path: 'envs/{{ entity.name }}.tfvars', content: 'size = "{{ parameters.size }}"\n' }],
          webhookSecret: '{{ secrets.gh-hook }}',
          ...trigger,
        },
        ...fields,
      }),
    );
    return name;
  }

  /** A new `vm` in `envName`, the action triggered on it (202, pending). */
  async function trigger(action: string, options: { envName?: string; parameters?: Record<string, unknown> } = {}): Promise<Triggered> {
    const envName = options.envName ?? 'default';
    const entity = uniqueSlug('vm');
    await ok(201, call('POST', `${proj}/envs/${envName}/entities`, { kind: 'Entity', entityType: 'vm', name: entity }));
    const run = await ok(202, call('POST', `${proj}/envs/${envName}/entities/${entity}/actions/${action}`, { parameters: options.parameters ?? { size: 'large' } }));
    expect(run.status).toBe('pending');
    return { id: run.id, entity, envName };
  }

  const getRun = (run: Pick<Triggered, 'id' | 'envName'>) => ok(200, call('GET', `${proj}/envs/${run.envName}/action-runs/${run.id}`));
  const stateOf = async (run: Pick<Triggered, 'entity' | 'envName'>): Promise<string> =>
    (await ok(200, call('GET', `${proj}/envs/${run.envName}/entities/${run.entity}`))).state;

  /** Triggered and delivered: the run is running with its pull request. */
  async function opened(action: string, options: { envName?: string } = {}): Promise<Triggered & { prNumber: number; run: any }> {
    const run = await trigger(action, options);
    await api.jobs.drain();
    const body = await getRun(run);
    expect(body.status, JSON.stringify(body)).toBe('running');
    return { ...run, prNumber: body.prNumber, run: body };
  }

  /** GitHub merges (or closes) the pull request, and the `closed` event is signed as GitHub signs it (the App's secret by default). */
  async function closedEvent(repo: string, number: number, options: { merged: boolean; secret?: string; installationId?: number }): Promise<SignedEvent> {
    const pull = options.merged ? github.mergePullRequest(repo, number) : github.closePullRequest(repo, number);
    const payload = pullRequestEvent({ installationId: options.installationId, repository: github.repositoryJson(repo), pullRequest: pull });
    return signEvent('pull_request', payload, options.secret ?? TEST_WEBHOOK_SECRET);
  }

  async function deliverToApp(event: SignedEvent): Promise<ApiResponse> {
    const response = await api.call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
    responses.push(response);
    return response;
  }

  async function deliverToProject(event: SignedEvent, headers: Record<string, string> = {}, path = `${proj}/webhooks/github`): Promise<ApiResponse> {
    const response = await api.call('POST', path, { rawBody: event.body, headers: { ...event.headers, ...headers } });
    responses.push(response);
    return response;
  }

  /** The audit events `github-dispatch-attempted` of a run, oldest first. */
  const auditsOf = async (runId: string) =>
    (
      await api.db
        .select()
        .from(auditEvents)
        .where(and(eq(auditEvents.action, 'github-dispatch-attempted'), eq(auditEvents.targetId, runId)))
        .orderBy(auditEvents.at)
    ).map((row) => row.data as Record<string, unknown>);

  const envId = async (name: string): Promise<string> =>
    ((await ok(200, call('GET', `${proj}/envs`))) as { id: string; name: string }[]).find((env) => env.name === name)!.id;

  return {
    keys,
    github,
    api,
    clock,
    owner,
    org,
    project,
    proj,
    responses,
    call,
    ok,
    prAction,
    trigger,
    getRun,
    stateOf,
    opened,
    closedEvent,
    deliverToApp,
    deliverToProject,
    auditsOf,
    envId,
    /** The branch a run's pull request comes from when the trigger names none. */
    branchOf: (runId: string) => `cellplane/run-${runId}`,
    /** The pull requests of `branch` (the run's own by default). */
    pullsOf: (repo: string, runId: string, branch = `cellplane/run-${runId}`) => github.pulls(repo).filter((pull) => pull.head === branch),
    /** Every token of the suite registered with the secret scan, then the API closed (which runs the scan) and GitHub stopped. */
    async close(): Promise<void> {
      for (const issued of github.issuedTokens) api.secretScan.register(issued.token, 'an installation token');
      api.secretScan.register(SOLO_TOKEN, 'a static token');
      api.secretScan.register(UNKNOWN_TOKEN, 'an unknown static token');
      api.secretScan.register(OUTSIDE_TOKEN, 'a token used on GitHub directly');
      for (const line of pemBodyLines(keys.pkcs1Pem)) api.secretScan.register(line, 'a line of the App private key');
      try {
        await api.close();
      } finally {
        await github.close();
      }
    },
    /** Nothing secret in the suite's responses and log lines so far (the scan on close covers the rest). */
    expectNoSecretsSoFar(): void {
      const everything = [...responses.map((response) => JSON.stringify(response.body)), ...api.logs].join('\n');
      for (const value of [SOLO_TOKEN, UNKNOWN_TOKEN, OUTSIDE_TOKEN, HOOK_SECRET_DEFAULT, HOOK_SECRET_STAGING, ...github.issuedTokens.map((issued) => issued.token)]) {
        expect(everything).not.toContain(value);
      }
      for (const line of pemBodyLines(keys.pkcs1Pem)) expect(everything).not.toContain(line);
    },
  };
}
