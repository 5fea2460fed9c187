import http from 'node:http';
import { eq, sql } from 'drizzle-orm';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { signCallbackToken } from '../../src/auth/callback-token';
import { actionRuns, githubInstallations, notifications, orgMembers, ssoProviders } from '../../src/db/schema';
import { codehostEnv, generateAppKeys, startGitHubServer } from '../support/github-server';
import { createTenant, seedToken } from '../support/fixtures';
import { createTestApi } from '../support/node-app';
import { signIn, signUp, verifiedUser } from '../support/people';
import { webhookAction } from '../support/run-fixtures';
import {
  bodyMutation,
  dateTimeCount,
  dateTimeEdges,
  encodeLoosely,
  exampleFor,
  hostileQueryValue,
  hostileSegment,
  hostileString,
  listOperations,
  mutateBody,
  wireRequest,
  type Operation,
} from '../support/openapi-fuzz';

/**
 * Every operation of the OpenAPI document, fuzzed (test/support/openapi-fuzz.ts):
 * wrong types, missing and extra fields, deep nesting, huge strings and
 * numbers, NUL, lone surrogates, `%00` and `%2F` in path segments, odd limits,
 * forged cursors, garbage JSON. Called as the owner of a real tenant, with path
 * parameters naming real resources, so the cases reach the handlers. For every
 * case: never a 5xx, nor an error logged; every error is `{ error, code }`
 * (plus `details`); a refused write leaves every table as it was; and a case
 * sent over a real keep-alive connection leaves that connection usable.
 *
 * Bounded and reproducible: a fixed seed and RUNS_PER_OPERATION cases per
 * operation. A failure prints the seed and the shrunk case.
 */

// FUZZ_SEED and FUZZ_RUNS explore further by hand; CI runs the fixed ones
const SEED = Number(process.env.FUZZ_SEED ?? 20261123);
const RUNS_PER_OPERATION = Number(process.env.FUZZ_RUNS ?? 30);

const FUZZ_SUPER_ADMIN = 'root@fuzz.example';
// the code-hosting routes answer 503 without the App: configure it, against the local GitHub server
const githubKeys = generateAppKeys();
const github = await startGitHubServer({ appId: '4242', publicKeyPem: githubKeys.publicKeyPem });
const api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1', SUPER_ADMIN_EMAILS: FUZZ_SUPER_ADMIN, ...codehostEnv(github, githubKeys) } });
const document = api.app.getOpenAPI31Document({ openapi: '3.1.0', info: { title: 't', version: '1' } });
const operations = listOperations(document);
const components = (document.components?.schemas ?? {}) as Record<string, Record<string, unknown>>;
// deletes last, so the fixtures they remove serve every other operation first
operations.sort((a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE'));

const stats = { cases: 0, overHttp: 0, serverErrors: 0, byStatus: new Map<number, number>() };
const count = (status: number) => {
  stats.cases++;
  stats.byStatus.set(status, (stats.byStatus.get(status) ?? 0) + 1);
  if (status >= 500) stats.serverErrors++;
};

/** The fixture set every case addresses: one of each resource, in `default`. */
const fixtures = await (async () => {
  const tenant = await createTenant(api);
  const doomedEnv = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'doomed' } });
  expect(doomedEnv.status).toBe(201);
  const owner = await seedToken(api, tenant, 'owner');
  // the people routes: a verified super-admin who owns the tenant, and a colleague to change and remove
  const person = await verifiedUser(api, FUZZ_SUPER_ADMIN);
  const colleague = await signUp(api);
  await api.db.insert(orgMembers).values([
    { orgId: tenant.org.id, userId: person.id, role: 'owner' },
    { orgId: tenant.org.id, userId: colleague.id, role: 'member' },
  ]);
  const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
  const env = `${proj}/envs/default`;
  const made = async (method: string, path: string, body: unknown, status = 201) => {
    const response = await api.call(method, path, { token: owner, body });
    expect(response.status, `${method} ${path}: ${JSON.stringify(response.body)}`).toBe(status);
    return response.body;
  };
  const states = ['provisioning', 'running', 'failed'];
  await made('POST', `${proj}/entity-types`, {
    kind: 'EntityType',
    name: 'vm',
    states,
    initialState: 'provisioning',
    properties: [{ name: 'size', type: 'string' }],
    metrics: [{ name: 'cpu', min: 0, max: 100 }],
  });
  await made('POST', `${proj}/entity-types`, { kind: 'EntityType', name: 'host', states: ['up'], initialState: 'up' });
  await made('POST', `${proj}/relationship-types`, { kind: 'RelationshipType', name: 'runs-on', from: 'vm', to: 'host', states: ['active'] });
  await made('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name: 'vm-1', properties: { size: 'small' }, labels: { team: 'fuzz' } });
  await made('POST', `${env}/entities`, { kind: 'Entity', entityType: 'host', name: 'host-1' });
  const relationship = await made('POST', `${env}/relationships`, { relationshipType: 'runs-on', from: 'vm-1', to: 'host-1' });
  await made('POST', `${proj}/cells`, { kind: 'Cell', name: 'cell-a', entityType: 'vm' });
  await made('POST', `${proj}/cells/cell-a/members`, { entityName: 'vm-1', entityTypeName: 'vm' });
  await made('POST', `${proj}/actions`, webhookAction('restart', 'http://127.0.0.1:9/hooks/{{ entity.name }}'));
  await made('PUT', `${env}/secrets/db-password`, { value: 's3cr3t' });
  const run = await made('POST', `${env}/entities/vm-1/actions/restart`, {}, 202);
  const doomedToken = await made('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, { name: 'doomed', role: 'viewer' });
  const tokenId = doomedToken.id as string;
  const adminTarget = await api.call('POST', '/orgs', { token: person.token, body: { name: 'Suspendable', slug: `${tenant.org.slug}-s` } });
  expect(adminTarget.status).toBe(201);
  const view = await made('POST', `${proj}/graph-views`, { name: 'fleet', scope: 'project', config: { depth: 2 } });
  const [notification] = await api.db
    .insert(notifications)
    .values({ userId: person.id, orgId: tenant.org.id, kind: 'org.member_added', title: 'You were added' })
    .returning();
  const [provider] = await api.db
    .insert(ssoProviders)
    .values({ providerId: 'fuzz-idp', issuer: 'https://idp.fuzz.example', domain: 'fuzz.example', organizationId: tenant.org.id })
    .returning();
  github.addInstallation({ id: 4101, account: 'fuzz-owner', repositories: ['fuzz-owner/fuzz-repo'] });
  const [installation] = await api.db
    .insert(githubInstallations)
    .values({ installationId: 4101, orgId: tenant.org.id, accountLogin: 'fuzz-owner', accountType: 'Organization', grantedRepos: ['fuzz-owner/fuzz-repo'] })
    .returning();
  await made('PUT', `${proj}/github/repos/fuzz-owner/fuzz-repo`, undefined);
  const [runRow] = await api.db.select().from(actionRuns).where(eq(actionRuns.id, run.id));
  const callbackToken = await signCallbackToken(
    api.platform.config.authSecret,
    { runId: run.id, orgId: runRow!.orgId, projectId: runRow!.projectId, envId: runRow!.envId },
    runRow!.timeoutAt,
    runRow!.createdAt,
  );
  return {
    tenant,
    owner,
    /** The Bearer value of the owner's user session: for operations only a user may call. */
    session: person.token,
    /** Signing out ends a session: the sign-out operation ends this one, not the one the other cases use. */
    spareSession: (await signIn(api, person)).token,
    /** The organization the /admin/orgs/{id} operations act on (suspending the tenant would refuse every later case). */
    adminTarget: adminTarget.body.slug as string,
    callbackToken,
    /** A path parameter's value, by its name ... */
    byParam: {
      o: tenant.org.slug,
      p: tenant.project.slug,
      orgId: tenant.org.slug,
      projectId: tenant.project.slug,
      envName: 'default',
      entityName: 'vm-1',
      metricName: 'cpu',
      actionName: 'restart',
      owner: 'fuzz-owner',
      repo: 'fuzz-repo',
    } as Record<string, string>,
    /** ... or by the collection segment before it (`/cells/{name}`). */
    byCollection: {
      orgs: tenant.org.slug,
      tokens: tokenId,
      envs: 'doomed',
      'entity-types': 'vm',
      'relationship-types': 'runs-on',
      cells: 'cell-a',
      entities: 'vm-1',
      relationships: relationship.id as string,
      actions: 'restart',
      secrets: 'db-password',
      'action-runs': run.id as string,
      'graph-views': view.id as string,
      users: colleague.id,
      notifications: notification!.id,
      preferences: 'ui.theme',
      'sso-extras': provider!.providerId,
      'sso-providers': provider!.providerId,
      installations: installation!.id,
    } as Record<string, string>,
  };
})();

/** The real resource a path parameter names; a route with a parameter no fixture fills fails here, not silently. */
function realValue(op: Operation, param: string): string {
  // the super-admin's organization routes suspend what they name: an organization of their own
  if (op.path.startsWith('/admin/orgs/{id}')) return fixtures.adminTarget;
  const segments = op.path.split('/');
  const before = segments[segments.indexOf(`{${param}}`) - 1] ?? '';
  const value = fixtures.byParam[param] ?? fixtures.byCollection[before];
  if (value === undefined) throw new Error(`no fixture names {${param}} of ${op.name}: add one to the fuzz fixtures`);
  return value;
}

/** Body fields that name fixtures, so a mutated body still gets past the catalog lookups. */
function fieldsFor(op: Operation, pathValues: Record<string, string>): Record<string, unknown> {
  const typeEnds = op.path.includes('/relationship-types');
  return {
    entityType: 'vm',
    entityTypeName: 'vm',
    relationshipType: 'runs-on',
    from: typeEnds ? 'vm' : 'vm-1',
    to: typeEnds ? 'host' : 'host-1',
    entityName: 'vm-1',
    onSuccess: 'running',
    onFailure: 'failed',
    trigger: { type: 'webhook', url: 'http://127.0.0.1:9/hooks/fuzz', payload: { entity: '{{ entity.name }}', nested: { list: [1, 'two'] } } },
    properties: op.path.includes('-types') ? [] : { size: 'small' },
    labels: { team: 'fuzz' },
    output: { result: { ok: true } },
    name: pathValues.name ?? 'fuzz-made',
  };
}

/** Everything the tenant has, in one statement: a refused write must leave it as it was. */
const TABLES = [
  'orgs', 'projects', 'environments', 'service_tokens', 'entity_types', 'relationship_types', 'cells', 'actions',
  'environment_secrets', 'entities', 'entity_unique_keys', 'entity_metrics', 'relationships', 'cell_members',
  'entity_changes', 'action_runs', 'delivery_jobs', 'run_attempts',
  'users', 'accounts', 'org_members', 'graph_views', 'notifications', 'user_preferences', 'sso_providers', 'audit_events',
];
const FINGERPRINT = sql.raw(
  `select ${TABLES.map((t) => `(select md5(coalesce(string_agg(x::text, ',' order by x::text), '')) from ${t} x) as "${t}"`).join(', ')}`,
);
const fingerprint = async () => ((await api.db.execute(FINGERPRINT)) as unknown as { rows: Record<string, string>[] }).rows[0];

const errorLines = () => api.logs.filter((line) => line.includes('"level":"error"')).length;

function expectErrorShape(status: number, text: string, where: string): void {
  if (status < 400) return;
  let body: unknown;
  expect(() => (body = JSON.parse(text)), `${where}: error body is not JSON: ${text.slice(0, 200)}`).not.toThrow();
  const { error, code, details, ...rest } = body as Record<string, unknown>;
  expect(typeof error, `${where}: ${text.slice(0, 300)}`).toBe('string');
  expect(typeof code, `${where}: ${text.slice(0, 300)}`).toBe('string');
  expect(rest, where).toEqual({});
  if (details !== undefined) {
    expect(Array.isArray(details), where).toBe(true);
    for (const detail of details as Record<string, unknown>[]) {
      expect(typeof detail.path, where).toBe('string');
      expect(typeof detail.message, where).toBe('string');
    }
  }
}

const caseArbitrary = (op: Operation) =>
  fc.record({
    // null: the real resource
    segments: fc.tuple(...op.pathParams.map(() => fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: hostileSegment }))),
    query: fc.tuple(
      ...op.queryParams.map((param) =>
        fc.oneof(
          { weight: 3, arbitrary: fc.constant([] as string[]) },
          { weight: 3, arbitrary: hostileQueryValue.map((v) => [v]) },
          { weight: 1, arbitrary: fc.array(hostileQueryValue, { minLength: 2, maxLength: 3 }) },
          // a date-time parameter meets the edges no store takes
          ...(param.schema.format === 'date-time' ? [{ weight: 3, arbitrary: fc.constantFrom(...dateTimeEdges).map((v) => [encodeURIComponent(v)]) }] : []),
        ),
      ),
    ),
    extraQuery: fc.oneof(
      { weight: 4, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.tuple(hostileString.filter((s) => s.length < 200).map(encodeLoosely), hostileQueryValue) },
    ),
    headers: fc.tuple(
      ...op.headerParams.map(() =>
        fc.oneof({ weight: 1, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.constantFrom('', ' ', 'key-1', 'ÿÿ', 'x'.repeat(10_000)) }),
      ),
    ),
    body: op.method === 'GET' ? fc.constant({ kind: 'none' as const }) : bodyMutation,
    contentType: fc.oneof(
      { weight: 8, arbitrary: fc.constant('application/json') },
      { weight: 1, arbitrary: fc.constantFrom('application/json; charset=utf-8', 'application/merge-patch+json', 'text/plain', 'none') },
    ),
    overHttp: fc.nat({ max: 3 }).map((n) => n === 0),
  });

type FuzzCase = ReturnType<typeof caseArbitrary> extends fc.Arbitrary<infer C> ? C : never;

/**
 * Cases sent before the random ones, whatever the seed: each of dateTimeEdges
 * in each date-time query parameter, and in each date-time of the example
 * body, of an operation that has any.
 */
function dateEdgeCases(op: Operation, example: unknown): FuzzCase[] {
  const inQuery = op.queryParams.some((q) => q.schema.format === 'date-time');
  const inBody = op.method === 'GET' ? 0 : dateTimeCount(example);
  if (!inQuery && inBody === 0) return [];
  return dateTimeEdges.flatMap((edge) =>
    Array.from({ length: Math.max(1, inBody) }, (_, at) => ({
      segments: op.pathParams.map(() => null),
      query: op.queryParams.map((q) => (q.schema.format === 'date-time' ? [encodeURIComponent(edge)] : [])),
      extraQuery: null,
      headers: op.headerParams.map(() => null),
      body: inBody === 0 ? ({ kind: op.method === 'GET' ? 'none' : 'asIs' } as const) : ({ kind: 'dateEdge', at, value: edge } as const),
      contentType: 'application/json',
      overHttp: false,
    })),
  );
}

describe('fuzzing every operation of the OpenAPI document', () => {
  let base: string;
  // one socket, so each good request after a bad one goes on the bad one's connection when it was kept alive
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

  afterAll(async () => {
    agent.destroy();
    const statuses = [...stats.byStatus.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s}×${n}`).join(' ');
    console.info(`fuzz: ${stats.cases} cases (${stats.overHttp} over HTTP), ${stats.serverErrors} 5xx; statuses ${statuses}`);
    await api.close();
    await github.close();
  });

  it('covers every documented operation, the run callback included', () => {
    expect(operations.length).toBeGreaterThan(50);
    expect(operations.map((op) => op.name)).toContain('POST /{o}/{p}/envs/{envName}/action-runs/{id}/callback');
    for (const op of operations) for (const param of op.pathParams) expect(realValue(op, param)).toBeTruthy();
  });

  for (const op of operations) {
    it(`${op.name}`, async () => {
      base ??= await api.listen();
      const token = op.security.includes('callbackToken')
        ? fixtures.callbackToken
        : op.path === '/api/auth/sign-out'
          ? fixtures.spareSession
        : op.security.includes('bearerAuth') || op.security.length === 0
          ? fixtures.owner
          : fixtures.session;
      const realPath = Object.fromEntries(op.pathParams.map((param) => [param, realValue(op, param)]));
      const example = op.body ? exampleFor(op.body.schema, components, fieldsFor(op, realPath)) : {};
      await fc.assert(
        fc.asyncProperty(caseArbitrary(op), async (fuzz) => {
          const path = op.pathParams.reduce(
            (p, param, i) => p.replace(`{${param}}`, fuzz.segments[i] ?? encodeURIComponent(realPath[param]!)),
            op.path,
          );
          const pairs = op.queryParams.flatMap((q, i) => fuzz.query[i]!.map((v) => `${encodeURIComponent(q.name)}=${v}`));
          if (fuzz.extraQuery) pairs.push(`${fuzz.extraQuery[0]}=${fuzz.extraQuery[1]}`);
          const url = pairs.length ? `${path}?${pairs.join('&')}` : path;
          const body = mutateBody(example, fuzz.body);
          const headers: Record<string, string> = { authorization: `Bearer ${token}` };
          op.headerParams.forEach((h, i) => {
            const value = fuzz.headers[i];
            if (value !== null && value !== undefined) headers[h.name] = value;
          });
          if (body !== undefined && fuzz.contentType !== 'none') headers['content-type'] = fuzz.contentType;
          const where = `${op.method} ${url.slice(0, 300)} ${body === undefined ? '' : body.slice(0, 300)}`;

          const before = op.method === 'GET' ? undefined : await fingerprint();
          const errorsBefore = errorLines();
          let status: number;
          let text: string;
          /** Node's HTTP parser refused it (a request head over 16 KiB is 431): the app never saw the request. */
          let refusedByParser = false;
          if (fuzz.overHttp) {
            stats.overHttp++;
            const response = await wireRequest(agent, base, op.method, url, headers, body);
            ({ status, body: text } = response);
            count(status);
            refusedByParser = response.headers['x-request-id'] === undefined;
            if (refusedByParser) {
              // answered in the error shape too (src/node/client-errors.ts), and the connection ends
              expect({ status, connection: response.headers.connection }, where).toEqual({ status: 431, connection: 'close' });
              expect(JSON.parse(text), where).toEqual({ error: expect.any(String), code: 'headers_too_large' });
            }
            // a 413 leaves the body unread on the wire: the server must end the connection, and say so
            if (status === 413) expect(response.headers.connection, where).toBe('close');
            // the connection is still good: a plain request on the same agent answers, on the same socket if it was kept
            const after = await wireRequest(agent, base, 'GET', `/orgs/${fixtures.tenant.org.slug}`, { authorization: `Bearer ${fixtures.owner}` });
            expect(after.status, `after ${where}`).toBe(200);
            if (!response.cut && response.headers.connection !== 'close') expect(after.reusedSocket, `after ${where}`).toBe(true);
          } else {
            const response = await api.app.request(url, { method: op.method, headers, body });
            status = response.status;
            if ((response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
              await response.body?.cancel();
              text = '';
            } else {
              text = await response.text();
            }
            count(status);
          }

          expect(status, `${where}\n→ ${text.slice(0, 300)}`).toBeLessThan(500);
          expect(errorLines(), `${where}: logged an error`).toBe(errorsBefore);
          if (!refusedByParser) expectErrorShape(status, text, where);
          if (before && status >= 400) expect(await fingerprint(), `${where}: a refused write changed the tables`).toEqual(before);
        }),
        { numRuns: RUNS_PER_OPERATION, seed: SEED, examples: dateEdgeCases(op, example).map((edgeCase) => [edgeCase] as [FuzzCase]) },
      );
    });
  }
});
