import definitions from '@octokit/webhooks-examples';
import { sign } from '@octokit/webhooks-methods';

/**
 * Inbound GitHub events for the tests: GitHub's own example payloads
 * (@octokit/webhooks-examples, the documented deliveries), with the ids and
 * names a test needs put in, serialized and signed as GitHub signs them
 * (`X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>`, by
 * @octokit/webhooks-methods). No node: import: the workers tests use it too.
 *
 * ```ts
 * const event = await signEvent('installation', installationEvent('suspend', { installationId: 101 }));
 * await api.call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
 * ```
 */

/** The App webhook secret the tests configure (CODEHOST_APP_WEBHOOK_SECRET) and sign with. */
export const TEST_WEBHOOK_SECRET = 'test-webhook-secret-5f2c9a7e1b';

type Payload = Record<string, any>;

/** A deep copy of one of GitHub's example payloads: the `index`-th of event `name` with `action`. */
export function examplePayload(name: string, action?: string, index = 0): Payload {
  const definition = definitions.find((candidate) => candidate.name === name);
  if (!definition) throw new Error(`no example event ${name}`);
  const examples = (definition.examples as Payload[]).filter((example) => action === undefined || example.action === action);
  const example = examples[index];
  if (!example) throw new Error(`no example ${name}${action ? `.${action}` : ''} #${index}`);
  return structuredClone(example);
}

const repositoryRef = (fullName: string, id: number) => ({
  id,
  node_id: btoa(`010:Repository${id}`),
  name: fullName.split('/')[1]!,
  full_name: fullName,
  private: true,
});

/** A stable made-up repository id for a name (events name repositories by id and full name). */
const repositoryId = (fullName: string) => {
  let hash = 7;
  for (const char of fullName.toLowerCase()) hash = (hash * 31 + char.charCodeAt(0)) % 1_000_000_007;
  return 100_000 + (hash % 900_000_000);
};

/** `installation` created / deleted / suspend / unsuspend / new_permissions_accepted. */
export function installationEvent(
  action: 'created' | 'deleted' | 'suspend' | 'unsuspend' | 'new_permissions_accepted',
  options: { installationId: number; account?: string; repositories?: string[] },
): Payload {
  const payload = examplePayload('installation', action);
  payload.installation.id = options.installationId;
  payload.installation.access_tokens_url = `https://api.github.com/app/installations/${options.installationId}/access_tokens`;
  if (options.account) payload.installation.account.login = options.account;
  if (options.repositories) payload.repositories = options.repositories.map((name) => repositoryRef(name, repositoryId(name)));
  return payload;
}

/** `installation_repositories` added / removed. */
export function installationRepositoriesEvent(
  action: 'added' | 'removed',
  options: { installationId: number; account?: string; added?: string[]; removed?: string[]; repositorySelection?: 'all' | 'selected' },
): Payload {
  const payload = examplePayload('installation_repositories', action);
  payload.installation.id = options.installationId;
  if (options.account) payload.installation.account.login = options.account;
  payload.repository_selection = options.repositorySelection ?? 'selected';
  payload.repositories_added = (options.added ?? []).map((name) => repositoryRef(name, repositoryId(name)));
  payload.repositories_removed = (options.removed ?? []).map((name) => repositoryRef(name, repositoryId(name)));
  return payload;
}

/**
 * `pull_request` with `action` (default `closed`). `pullRequest` is the
 * pull request's JSON as the local GitHub has it (github-server.ts
 * `mergePullRequest`, `closePullRequest`, `pullRequestJson`), or the few
 * fields to set on the example.
 */
export function pullRequestEvent(options: {
  action?: string;
  installationId?: number;
  repository: string | Record<string, unknown>;
  pullRequest: Record<string, unknown> | { number: number; merged: boolean; head?: { ref: string; sha: string } };
}): Payload {
  const action = options.action ?? 'closed';
  const payload = examplePayload('pull_request', action === 'closed' ? 'closed' : action);
  payload.action = action;
  const repository =
    typeof options.repository === 'string'
      ? { ...payload.repository, ...repositoryRef(options.repository, repositoryId(options.repository)), owner: { ...payload.repository.owner, login: options.repository.split('/')[0] } }
      : options.repository;
  payload.repository = repository;
  const pull = options.pullRequest as Record<string, any>;
  if ('url' in pull) payload.pull_request = pull;
  else {
    payload.pull_request.number = pull.number;
    payload.pull_request.merged = pull.merged;
    payload.pull_request.state = action === 'closed' ? 'closed' : 'open';
    payload.pull_request.merged_at = pull.merged ? new Date().toISOString().replace(/\.\d{3}Z$/, 'Z') : null;
    if (pull.head) Object.assign(payload.pull_request.head, pull.head);
    payload.pull_request.base.repo = repository;
    payload.pull_request.head.repo = repository;
  }
  payload.number = payload.pull_request.number;
  if (options.installationId === undefined) delete payload.installation;
  else payload.installation = { id: options.installationId, node_id: btoa(`Installation${options.installationId}`) };
  return payload;
}

/** pull_request_review, workflow_job or workflow_run, as delivered to the App (with its installation). */
export function reservedEvent(name: 'pull_request_review' | 'workflow_job' | 'workflow_run', installationId: number): Payload {
  const payload = examplePayload(name);
  payload.installation = { id: installationId, node_id: btoa(`Installation${installationId}`) };
  return payload;
}

export interface SignedEvent {
  name: string;
  deliveryId: string;
  /** The exact bytes signed: send them as they are. */
  body: string;
  headers: Record<string, string>;
}

/** Serializes and signs a payload as GitHub delivers it (headers included). */
export async function signEvent(name: string, payload: unknown, secret = TEST_WEBHOOK_SECRET, options: { deliveryId?: string } = {}): Promise<SignedEvent> {
  const body = JSON.stringify(payload);
  const deliveryId = options.deliveryId ?? crypto.randomUUID();
  const hook = (payload as { installation?: { id?: number } }).installation;
  return {
    name,
    deliveryId,
    body,
    headers: {
      'content-type': 'application/json',
      'user-agent': 'GitHub-Hookshot/4b3e0a1',
      'x-github-event': name,
      'x-github-delivery': deliveryId,
      'x-github-hook-installation-target-type': 'integration',
      'x-github-hook-installation-target-id': String(hook?.id ?? ''),
      'x-hub-signature-256': await sign(secret, body),
    },
  };
}
