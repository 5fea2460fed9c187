import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signInstallState } from '../../src/codehost/install-state';
import { auditEvents, githubInstallations, orgMembers, projectGithubRepos } from '../../src/db/schema';
import { Secret } from '../../src/secret';
import { expectError } from '../support/fixtures';
import { TEST_WEBHOOK_SECRET, installationEvent, signEvent } from '../support/github-events';
import { codehostEnv, faults, generateAppKeys, pemBodyLines, startGitHubServer, type AppKeys, type GitHubServer } from '../support/github-server';
import { createTestApi, TEST_SECRETS, type ApiResponse, type CallOptions, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, type TestUser } from '../support/people';

/**
 * The install flow and repository links (SPEC "Code-hosting app
 * integration"; DECISIONS §8; docs/codehost.md) against the local GitHub
 * server: install URL, callback (good, expired, forged, claimed elsewhere),
 * recovery, soft delete, repository links, and the three deployment cases
 * (cloud, oss, unconfigured). Every response is checked for the tokens the
 * local GitHub minted; the key and the webhook secret are in the secret scan.
 */

const APP_ID = '4242';
const authSecret = new Secret(TEST_SECRETS.AUTH_SECRET);
let nextInstallation = 5000;
const freshInstallationId = () => ++nextInstallation;

let keys: AppKeys;
let github: GitHubServer;

beforeAll(async () => {
  keys = generateAppKeys();
  github = await startGitHubServer({ appId: APP_ID, publicKeyPem: keys.publicKeyPem });
});
afterAll(async () => {
  await github.close();
});

/** A test API whose responses are also searched for every token the local GitHub minted so far. */
function watched(api: TestApi) {
  return async (method: string, path: string, options?: CallOptions): Promise<ApiResponse> => {
    const response = await api.call(method, path, options);
    const text = JSON.stringify(response.body ?? '') + JSON.stringify([...response.headers]);
    for (const issued of github.issuedTokens) expect(text).not.toContain(issued.token);
    return response;
  };
}

/** Closes an API after registering the tokens the local GitHub minted: the log scan then looks for them too. */
async function closeScanned(api: TestApi) {
  for (const issued of github.issuedTokens) api.secretScan.register(issued.token, 'an installation token');
  for (const line of pemBodyLines(keys.pkcs8Pem)) api.secretScan.register(line, 'a line of the App key (PKCS#8)');
  api.secretScan.register(TEST_WEBHOOK_SECRET, 'the App webhook secret');
  await api.close();
}

interface World {
  owner: TestUser;
  admin: TestUser;
  member: TestUser;
  outsider: TestUser;
  org: { id: string; slug: string; name?: string };
  project: { id: string; slug: string };
  other: { org: { id: string; slug: string }; project: { id: string; slug: string } };
  /** An owner service token of the world's project. */
  ownerToken: string;
}

async function world(api: TestApi): Promise<World> {
  const owner = await signUp(api, { name: 'Owner' });
  const tenant = await createUserTenant(api, owner);
  const admin = await signUp(api, { name: 'Admin' });
  const member = await signUp(api, { name: 'Member' });
  await api.db.insert(orgMembers).values([
    { orgId: tenant.org.id, userId: admin.id, role: 'admin' },
    { orgId: tenant.org.id, userId: member.id, role: 'member' },
  ]);
  const outsider = await signUp(api, { name: 'Outsider' });
  const other = await createUserTenant(api, outsider, { project: tenant.project.slug });
  const minted = await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
    token: owner.token,
    body: { name: 'owner-token', role: 'owner' },
  });
  expect(minted.status).toBe(201);
  return { owner, admin, member, outsider, ...tenant, other, ownerToken: minted.body.token };
}

const stateOf = (url: string) => new URL(url).searchParams.get('state')!;

describe('in cloud mode with the App configured', () => {
  let api: TestApi;
  let call: ReturnType<typeof watched>;
  let w: World;

  beforeAll(async () => {
    api = await createTestApi({ env: codehostEnv(github, keys, { keyFormat: 'pkcs8' }) });
    call = watched(api);
    w = await world(api);
  });
  afterAll(() => closeScanned(api));

  const installUrl = async (user: TestUser, orgId = w.org.slug) => {
    const response = await call('POST', '/github/install-url', { token: user.token, body: { orgId } });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body.url as string;
  };
  const callback = (installationId: number | string, state: string) =>
    call('GET', `/github/install-callback?installation_id=${installationId}&setup_action=install&state=${encodeURIComponent(state)}`);
  const auditOf = async (action: string, installationId: number) =>
    (await api.db.select().from(auditEvents).where(eq(auditEvents.action, action))).filter((event) => (event.data as { installationId?: number }).installationId === installationId);

  describe('POST /github/install-url', () => {
    it("answers GitHub's install page of the App, with a state naming the organization and the user", async () => {
      const url = new URL(await installUrl(w.owner));
      expect(`${url.origin}${url.pathname}`).toBe('https://github.com/apps/cellplane-test/installations/new');
      expect([...url.searchParams.keys()]).toEqual(['state']);
      const [, payload] = stateOf(url.href).split('.');
      const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>;
      expect(claims).toMatchObject({ org: w.org.id, sub: w.owner.id, iss: 'cellplane', aud: 'cellplane:github-install' });
      expect((claims.exp as number) - (claims.iat as number)).toBe(600);
    });

    it('takes the organization by id or slug, for an owner or an admin', async () => {
      await installUrl(w.admin);
      await installUrl(w.owner, w.org.id);
    });

    it('refuses a member (403), a non-member (404, as if absent), a service token and no session (401)', async () => {
      expectError(await call('POST', '/github/install-url', { token: w.member.token, body: { orgId: w.org.slug } }), 403, 'forbidden');
      expectError(await call('POST', '/github/install-url', { token: w.outsider.token, body: { orgId: w.org.slug } }), 404, 'not_found');
      expectError(await call('POST', '/github/install-url', { token: w.outsider.token, body: { orgId: w.org.id } }), 404, 'not_found');
      expectError(await call('POST', '/github/install-url', { token: w.ownerToken, body: { orgId: w.org.slug } }), 401, 'unauthorized');
      expectError(await call('POST', '/github/install-url', { body: { orgId: w.org.slug } }), 401, 'unauthorized');
      expectError(await call('POST', '/github/install-url', { token: w.owner.token, body: { orgId: 'no-such-org' } }), 404, 'not_found');
    });

    it('refuses a body without orgId or with more (400)', async () => {
      expectError(await call('POST', '/github/install-url', { token: w.owner.token, body: {} }), 400, 'validation_failed');
      expectError(await call('POST', '/github/install-url', { token: w.owner.token, body: { orgId: w.org.slug, extra: 1 } }), 400, 'validation_failed');
    });
  });

  describe('GET /github/install-callback', () => {
    it('records the installation for the organization of the state, with its granted repositories, and audits it', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'Acme-Co', repositories: ['Acme-Co/Infra', 'acme-co/website'] });
      const response = await callback(id, stateOf(await installUrl(w.owner)));
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toEqual({
        installation: {
          id: expect.any(String),
          installationId: id,
          orgId: w.org.id,
          accountLogin: 'Acme-Co',
          accountType: 'Organization',
          status: 'active',
          repositorySelection: 'selected',
          grantedRepos: ['acme-co/infra', 'acme-co/website'],
          createdAt: expect.any(String),
          updatedAt: expect.any(String),
          deletedAt: null,
        },
      });
      const [row] = await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id));
      expect(row).toMatchObject({ orgId: w.org.id, status: 'active', claimedByUserId: w.owner.id });
      const [audit] = await auditOf('github.installation_claimed', id);
      expect(audit).toMatchObject({ orgId: w.org.id, actorType: 'user', actorId: w.owner.id, targetType: 'github-installation', targetId: row!.id });
      // GitHub was asked as the App, then as the installation
      expect(github.requestsTo('get_installation').at(-1)).toMatchObject({ auth: 'app', installationId: id, status: 200 });
      expect(github.requestsTo('list_installation_repositories').at(-1)).toMatchObject({ auth: 'installation', installationId: id });
    });

    it('refreshes the record when the same organization comes back (repositories changed on GitHub)', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'refresh-co', repositories: ['refresh-co/a'] });
      const first = await callback(id, stateOf(await installUrl(w.owner)));
      expect(first.status).toBe(200);
      github.setInstallationRepositories(id, ['refresh-co/a', 'refresh-co/b']);
      const second = await callback(id, stateOf(await installUrl(w.admin)));
      expect(second.status).toBe(200);
      expect(second.body.installation).toMatchObject({ id: first.body.installation.id, grantedRepos: ['refresh-co/a', 'refresh-co/b'] });
      expect(await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id))).toHaveLength(1);
    });

    it('refuses an expired state (401), and writes nothing', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'late-co', repositories: ['late-co/x'] });
      const stale = await signInstallState(authSecret, { orgId: w.org.id, userId: w.owner.id }, new Date(Date.now() - 11 * 60 * 1000));
      const response = await callback(id, stale);
      expectError(response, 401, 'unauthorized');
      expect(response.body.error).toMatch(/expired/);
      expect(await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id))).toEqual([]);
    });

    it('refuses a forged, altered or missing state (401) before reading the query', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'forged-co', repositories: ['forged-co/x'] });
      const forged = await signInstallState(new Secret('not-the-auth-secret-0123456789abcdefgh'), { orgId: w.org.id, userId: w.owner.id }, new Date());
      expectError(await callback(id, forged), 401, 'unauthorized');
      const [header, payload, signature] = stateOf(await installUrl(w.owner)).split('.');
      const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>;
      claims.org = w.other.org.id;
      expectError(await callback(id, `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${signature}`), 401, 'unauthorized');
      expectError(await call('GET', `/github/install-callback?installation_id=${id}`), 401, 'unauthorized');
      expectError(await call('GET', '/github/install-callback?installation_id=not-a-number'), 401, 'unauthorized');
      // a service token or a session is not a state
      expectError(await call('GET', `/github/install-callback?installation_id=${id}`, { token: w.ownerToken }), 401, 'unauthorized');
      expectError(await call('GET', `/github/install-callback?installation_id=${id}`, { token: w.owner.token }), 401, 'unauthorized');
      expect(await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id))).toEqual([]);
    });

    it('with a valid state, a missing or malformed installation_id is 400', async () => {
      const state = stateOf(await installUrl(w.owner));
      expectError(await call('GET', `/github/install-callback?state=${state}`), 400, 'validation_failed');
      expectError(await call('GET', `/github/install-callback?installation_id=abc&state=${state}`), 400, 'validation_failed');
    });

    it('answers 409 installation_claimed for an installation another organization claimed, never naming it', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'contested', repositories: ['contested/infra'] });
      const theirs = await callback(id, stateOf(await installUrl(w.outsider, w.other.org.slug)));
      expect(theirs.status).toBe(200);
      const ours = await callback(id, stateOf(await installUrl(w.owner)));
      expectError(ours, 409, 'installation_claimed');
      const text = JSON.stringify(ours.body);
      for (const name of [w.other.org.id, w.other.org.slug, w.outsider.id, w.outsider.email]) expect(text).not.toContain(name);
      const [row] = await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id));
      expect(row!.orgId).toBe(w.other.org.id);
      expect(await auditOf('github.installation_claimed', id)).toHaveLength(1);
    });

    it('gives a contested installation to exactly one of two organizations claiming it at once', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'raced', repositories: ['raced/x'] });
      const [ours, theirs] = await Promise.all([
        installUrl(w.owner).then((url) => callback(id, stateOf(url))),
        installUrl(w.outsider, w.other.org.slug).then((url) => callback(id, stateOf(url))),
      ]);
      expect([ours.status, theirs.status].sort()).toEqual([200, 409]);
      const rows = await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id));
      expect(rows).toHaveLength(1);
      expect(rows[0]!.orgId).toBe(ours.status === 200 ? w.org.id : w.other.org.id);
      expect(await auditOf('github.installation_claimed', id)).toHaveLength(1);
    });

    it('lets another organization claim an installation its first organization deleted (released)', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'released', repositories: ['released/infra'] });
      expect((await callback(id, stateOf(await installUrl(w.outsider, w.other.org.slug)))).status).toBe(200);
      expect((await call('DELETE', `/github/installations/${id}`, { token: w.outsider.token })).status).toBe(200);
      const ours = await callback(id, stateOf(await installUrl(w.owner)));
      expect(ours.status, JSON.stringify(ours.body)).toBe(200);
      expect(ours.body.installation).toMatchObject({ orgId: w.org.id, status: 'active', deletedAt: null, grantedRepos: ['released/infra'] });
    });

    it('is 404 for an installation GitHub does not know, and 403 when the user is no longer owner or admin', async () => {
      expectError(await callback(987654321, stateOf(await installUrl(w.owner))), 404, 'not_found');
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'demoted', repositories: ['demoted/x'] });
      const state = stateOf(await installUrl(w.admin));
      await api.db.update(orgMembers).set({ role: 'member' }).where(and(eq(orgMembers.orgId, w.org.id), eq(orgMembers.userId, w.admin.id)));
      try {
        expectError(await callback(id, state), 403, 'forbidden');
      } finally {
        await api.db.update(orgMembers).set({ role: 'admin' }).where(and(eq(orgMembers.orgId, w.org.id), eq(orgMembers.userId, w.admin.id)));
      }
    });

    it('records a suspended installation as suspended, without reading its repositories', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'paused', repositories: ['paused/x'], suspended: true });
      const before = github.requestsTo('create_installation_token').length;
      const response = await callback(id, stateOf(await installUrl(w.owner)));
      expect(response.status).toBe(200);
      expect(response.body.installation).toMatchObject({ status: 'suspended', grantedRepos: [] });
      expect(github.requestsTo('create_installation_token')).toHaveLength(before);
    });

    it('answers 502 codehost_unavailable when GitHub fails, naming the call, writing nothing and showing no token', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'flaky', repositories: ['flaky/x'] });
      github.fail('list_installation_repositories', faults.serverError(502));
      const response = await callback(id, stateOf(await installUrl(w.owner)));
      expectError(response, 502, 'codehost_unavailable');
      expect(response.body.error).toMatch(/HTTP 502/);
      expect(response.body.error).toMatch(/try again/);
      expect(await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id))).toEqual([]);
    });
  });

  describe('POST /github/installations/recover', () => {
    it('claims an installation the callback did not record, for an owner or admin, and audits it', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'lost', repositories: ['lost/infra'] });
      const response = await call('POST', '/github/installations/recover', { token: w.admin.token, body: { orgId: w.org.slug, installationId: id } });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body.installation).toMatchObject({ installationId: id, orgId: w.org.id, status: 'active', grantedRepos: ['lost/infra'] });
      const [audit] = await auditOf('github.installation_recovered', id);
      expect(audit).toMatchObject({ actorType: 'user', actorId: w.admin.id, orgId: w.org.id });
    });

    it('refuses a member (403), a non-member (404), a service token (401)', async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'guarded', repositories: ['guarded/x'] });
      const body = { orgId: w.org.slug, installationId: id };
      expectError(await call('POST', '/github/installations/recover', { token: w.member.token, body }), 403, 'forbidden');
      expectError(await call('POST', '/github/installations/recover', { token: w.outsider.token, body }), 404, 'not_found');
      expectError(await call('POST', '/github/installations/recover', { token: w.ownerToken, body }), 401, 'unauthorized');
      expect(await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, id))).toEqual([]);
    });

    it('is 404 for an installation GitHub does not know, 409 for one another organization claimed, 400 for a bad body', async () => {
      expectError(await call('POST', '/github/installations/recover', { token: w.owner.token, body: { orgId: w.org.slug, installationId: 99999999 } }), 404, 'not_found');
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'taken', repositories: ['taken/x'] });
      expect((await call('POST', '/github/installations/recover', { token: w.outsider.token, body: { orgId: w.other.org.slug, installationId: id } })).status).toBe(200);
      const claimed = await call('POST', '/github/installations/recover', { token: w.owner.token, body: { orgId: w.org.slug, installationId: id } });
      expectError(claimed, 409, 'installation_claimed');
      expect(JSON.stringify(claimed.body)).not.toContain(w.other.org.slug);
      expectError(await call('POST', '/github/installations/recover', { token: w.owner.token, body: { orgId: w.org.slug, installationId: '12' } }), 400, 'validation_failed');
      expectError(await call('POST', '/github/installations/recover', { token: w.owner.token, body: { orgId: w.org.slug } }), 400, 'validation_failed');
    });

    it("reuses the installation's token while it is fresh", async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'cached', repositories: ['cached/x'] });
      const minted = () => github.requestsTo('create_installation_token').filter((request) => request.installationId === id).length;
      const body = { orgId: w.org.slug, installationId: id };
      expect((await call('POST', '/github/installations/recover', { token: w.owner.token, body })).status).toBe(200);
      expect((await call('POST', '/github/installations/recover', { token: w.owner.token, body })).status).toBe(200);
      expect(minted()).toBe(1);
      // the installation.suspend event clears it: the next read mints anew (GitHub unsuspended it meanwhile)
      const suspend = await signEvent('installation', installationEvent('suspend', { installationId: id }));
      expect((await call('POST', '/webhooks/github', { rawBody: suspend.body, headers: suspend.headers })).body.outcome).toMatchObject({ kind: 'installation-suspended' });
      expect((await call('POST', '/github/installations/recover', { token: w.owner.token, body })).status).toBe(200);
      expect(minted()).toBe(2);
    });
  });

  describe('DELETE /github/installations/{id}', () => {
    async function claimed(account: string) {
      const id = freshInstallationId();
      github.addInstallation({ id, account, repositories: [`${account}/x`] });
      const response = await callback(id, stateOf(await installUrl(w.owner)));
      expect(response.status).toBe(200);
      return response.body.installation as { id: string; installationId: number };
    }

    it("soft-deletes by the record's id or GitHub's, once, audited once; nothing is uninstalled on GitHub", async () => {
      const first = await claimed('gone-one');
      const deleted = await call('DELETE', `/github/installations/${first.id}`, { token: w.admin.token });
      expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
      expect(deleted.body.installation).toMatchObject({ id: first.id, status: 'deleted', deletedAt: expect.any(String) });
      const again = await call('DELETE', `/github/installations/${first.installationId}`, { token: w.owner.token });
      expect(again.status).toBe(200);
      expect(again.body.installation.deletedAt).toBe(deleted.body.installation.deletedAt);
      expect(await auditOf('github.installation_deleted', first.installationId)).toHaveLength(1);
      expect(github.installation(first.installationId)!.deleted).toBe(false);
    });

    it("refuses a member (403), another organization's owner (404, without naming the organization), a token (401), an unknown id (404)", async () => {
      const target = await claimed('kept');
      expectError(await call('DELETE', `/github/installations/${target.id}`, { token: w.member.token }), 403, 'forbidden');
      const hidden = await call('DELETE', `/github/installations/${target.id}`, { token: w.outsider.token });
      expectError(hidden, 404, 'not_found');
      expect(JSON.stringify(hidden.body)).not.toContain(w.org.id);
      expectError(await call('DELETE', `/github/installations/${target.installationId}`, { token: w.outsider.token }), 404, 'not_found');
      expectError(await call('DELETE', `/github/installations/${target.id}`, { token: w.ownerToken }), 401, 'unauthorized');
      expectError(await call('DELETE', `/github/installations/${crypto.randomUUID()}`, { token: w.owner.token }), 404, 'not_found');
      expectError(await call('DELETE', '/github/installations/not-an-id', { token: w.owner.token }), 400, 'validation_failed');
      const [row] = await api.db.select().from(githubInstallations).where(eq(githubInstallations.id, target.id));
      expect(row!.status).toBe('active');
    });
  });

  describe('repository links PROJ/github/repos/{owner}/{repo}', () => {
    const linkPath = (owner: string, repo: string, project = w.project.slug, org = w.org.slug) => `/${org}/${project}/github/repos/${owner}/${repo}`;
    let viewerToken: string;
    let memberToken: string;
    let adminToken: string;

    beforeAll(async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'linked-co', repositories: ['linked-co/infra', 'linked-co/site'] });
      expect((await callback(id, stateOf(await installUrl(w.owner)))).status).toBe(200);
      const tokens = `/orgs/${w.org.slug}/projects/${w.project.slug}/tokens`;
      const mint = async (role: string) => (await api.call('POST', tokens, { token: w.owner.token, body: { name: role, role } })).body.token as string;
      viewerToken = await mint('viewer');
      memberToken = await mint('member');
      adminToken = await mint('admin');
    });

    it('links a granted repository (201, then 200), lowercased, and reads it back with the installation that grants it', async () => {
      const created = await call('PUT', linkPath('Linked-Co', 'Infra'), { token: adminToken });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body).toEqual({ owner: 'linked-co', name: 'infra', fullName: 'linked-co/infra', createdAt: expect.any(String), installationId: expect.any(Number) });
      const again = await call('PUT', linkPath('linked-co', 'infra'), { token: w.owner.token });
      expect(again.status).toBe(200);
      expect(again.body.createdAt).toBe(created.body.createdAt);
      const read = await call('GET', linkPath('LINKED-CO', 'infra'), { token: viewerToken });
      expect(read.status).toBe(200);
      expect(read.body).toEqual(created.body);
      const rows = await api.db.select().from(projectGithubRepos).where(eq(projectGithubRepos.projectId, w.project.id));
      expect(rows.map((row) => `${row.owner}/${row.name}`)).toContain('linked-co/infra');
    });

    it('refuses a repository no active installation of the organization grants (400 invalid_reference)', async () => {
      const response = await call('PUT', linkPath('linked-co', 'not-granted'), { token: adminToken });
      expectError(response, 400, 'invalid_reference');
      // granted to another organization's installation only
      expectError(await call('PUT', linkPath('contested', 'infra'), { token: adminToken }), 400, 'invalid_reference');
    });

    it("accepts any repository of the account of an installation with repository selection 'all'", async () => {
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'everything-co', repositorySelection: 'all' });
      github.addRepository('everything-co/created-later');
      expect((await callback(id, stateOf(await installUrl(w.owner)))).body.installation.repositorySelection).toBe('all');
      expect((await call('PUT', linkPath('everything-co', 'brand-new'), { token: adminToken })).status).toBe(201);
      expectError(await call('PUT', linkPath('someone-else', 'brand-new'), { token: adminToken }), 400, 'invalid_reference');
    });

    it('shows no installation once the granting one is suspended, and unlinks (404 after)', async () => {
      expect((await call('PUT', linkPath('linked-co', 'site'), { token: adminToken })).status).toBe(201);
      const [row] = await api.db.select().from(githubInstallations).where(eq(githubInstallations.accountLogin, 'linked-co'));
      await api.db.update(githubInstallations).set({ status: 'suspended' }).where(eq(githubInstallations.id, row!.id));
      try {
        expect((await call('GET', linkPath('linked-co', 'site'), { token: viewerToken })).body.installationId).toBeNull();
      } finally {
        await api.db.update(githubInstallations).set({ status: 'active' }).where(eq(githubInstallations.id, row!.id));
      }
      const deleted = await call('DELETE', linkPath('Linked-Co', 'site'), { token: adminToken });
      expect(deleted.status).toBe(200);
      expect(deleted.body).toEqual({ deleted: true, name: 'linked-co/site' });
      expectError(await call('DELETE', linkPath('linked-co', 'site'), { token: adminToken }), 404, 'not_found');
      expectError(await call('GET', linkPath('linked-co', 'site'), { token: adminToken }), 404, 'not_found');
    });

    it('needs catalog:read to read and catalog:write to change; another organization sees nothing', async () => {
      expectError(await call('PUT', linkPath('linked-co', 'infra'), { token: memberToken }), 403, 'forbidden');
      expectError(await call('DELETE', linkPath('linked-co', 'infra'), { token: viewerToken }), 403, 'forbidden');
      expectError(await call('PUT', linkPath('linked-co', 'infra'), { token: w.member.token }), 403, 'forbidden');
      expect((await call('GET', linkPath('linked-co', 'infra'), { token: w.member.token })).status).toBe(200);
      // the outsider's organization has a project of the same slug
      expectError(await call('GET', linkPath('linked-co', 'infra'), { token: w.outsider.token }), 404, 'not_found');
      expectError(await call('GET', linkPath('linked-co', 'infra')), 401, 'unauthorized');
    });

    it('refuses names GitHub cannot have (400)', async () => {
      for (const [owner, repo] of [
        ['-bad', 'infra'],
        ['a'.repeat(40), 'infra'],
        ['ok', 'has space'],
        ['ok', 'x'.repeat(101)],
      ]) {
        expectError(await call('PUT', linkPath(owner!, encodeURIComponent(repo!)), { token: adminToken }), 400, 'validation_failed');
      }
    });
  });

  it('keeps neither the key nor a token in any log line', async () => {
    const secrets = [...pemBodyLines(keys.pkcs8Pem), ...github.issuedTokens.map((issued) => issued.token), TEST_WEBHOOK_SECRET];
    expect(github.issuedTokens.length).toBeGreaterThan(0);
    for (const line of api.logs) for (const secret of secrets) expect(line).not.toContain(secret);
    // nor the install state (it travels in the callback's query, which the request log does not keep)
    expect(api.logs.some((line) => line.includes('/github/install-callback'))).toBe(true);
    expect(api.logs.some((line) => /state=|eyJ[A-Za-z0-9_-]{10,}\.eyJ/.test(line))).toBe(false);
  });
});

describe('with SERVICE_UI_BASE_URL set', () => {
  it('sends the browser back to the UI after a good callback (303)', async () => {
    const api = await createTestApi({ env: { ...codehostEnv(github, keys), SERVICE_UI_BASE_URL: 'https://ui.cellplane.test/' } });
    try {
      const owner = await signUp(api);
      const tenant = await createUserTenant(api, owner);
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'ui-co', repositories: ['ui-co/x'] });
      const url = (await api.call('POST', '/github/install-url', { token: owner.token, body: { orgId: tenant.org.slug } })).body.url as string;
      const response = await api.call('GET', `/github/install-callback?installation_id=${id}&state=${stateOf(url)}`);
      expect(response.status).toBe(303);
      expect(response.headers.get('location')).toBe(`https://ui.cellplane.test/orgs/${tenant.org.slug}/integrations/github?installation_id=${id}&status=active`);
      // errors stay JSON errors
      expectError(await api.call('GET', `/github/install-callback?installation_id=${id}&state=forged`), 401, 'unauthorized');
    } finally {
      await closeScanned(api);
    }
  });
});

describe('with GitHub Enterprise Server as CODEHOST_API_URL', () => {
  it("points the install URL at the server's own install page", async () => {
    const api = await createTestApi({ env: { ...codehostEnv(github, keys), CODEHOST_API_URL: 'https://ghe.example.com/api/v3' } });
    try {
      const owner = await signUp(api);
      const tenant = await createUserTenant(api, owner);
      const response = await api.call('POST', '/github/install-url', { token: owner.token, body: { orgId: tenant.org.slug } });
      expect(response.status).toBe(200);
      expect(response.body.url).toMatch(/^https:\/\/ghe\.example\.com\/github-apps\/cellplane-test\/installations\/new\?state=/);
    } finally {
      await closeScanned(api);
    }
  });
});

/** Every code-hosting route, called with a plausible request. */
function everyRoute(w: { org: { slug: string; id: string }; project: { slug: string } }, state: string) {
  return [
    ['POST', '/github/install-url', { orgId: w.org.slug }],
    ['GET', `/github/install-callback?installation_id=1&state=${state}`, undefined],
    ['POST', '/github/installations/recover', { orgId: w.org.slug, installationId: 1 }],
    ['DELETE', '/github/installations/1', undefined],
    ['GET', `/${w.org.slug}/${w.project.slug}/github/repos/acme/infra`, undefined],
    ['PUT', `/${w.org.slug}/${w.project.slug}/github/repos/acme/infra`, undefined],
    ['DELETE', `/${w.org.slug}/${w.project.slug}/github/repos/acme/infra`, undefined],
    ['POST', '/webhooks/github', { action: 'created' }],
  ] as const;
}

describe('in oss mode', () => {
  it('answers 404 on every code-hosting route, even with the App configured', async () => {
    const api = await createTestApi({ env: { ...codehostEnv(github, keys), SERVICE_DEPLOYMENT: 'oss' } });
    try {
      const owner = await signUp(api);
      const tenant = await createUserTenant(api, owner);
      const state = await signInstallState(authSecret, { orgId: tenant.org.id, userId: owner.id }, new Date());
      for (const [method, path, body] of everyRoute(tenant, state)) {
        expectError(await api.call(method, path, { token: owner.token, body }), 404, 'not_found');
      }
      const document = (await api.call('GET', '/openapi.json')).body as { paths: Record<string, unknown> };
      // the App's routes are gone; a project's own pull_request webhook (a per-run secret) serves oss too
      expect(Object.keys(document.paths).filter((path) => path.includes('github') && !path.startsWith('/admin/'))).toEqual(['/{o}/{p}/webhooks/github']);
    } finally {
      await closeScanned(api);
    }
  });
});

describe('in cloud mode without the App configured', () => {
  let api: TestApi;
  let w: World;
  let state: string;

  beforeAll(async () => {
    // CODEHOST_API_URL alone configures nothing: the four CODEHOST_APP_* are needed
    api = await createTestApi({ env: { CODEHOST_APP_ID: APP_ID, CODEHOST_APP_NAME: 'cellplane-test', CODEHOST_API_URL: github.url } });
    w = await world(api);
    state = await signInstallState(authSecret, { orgId: w.org.id, userId: w.owner.id }, new Date());
    // a record from when the App was configured: DELETE finds it (and its organization) before it answers 503
    await api.db.insert(githubInstallations).values({ installationId: 1, orgId: w.org.id, accountLogin: 'acme', accountType: 'Organization' });
  });
  afterAll(() => closeScanned(api));

  it('answers 503 codehost_not_configured on every code-hosting route to an authorized caller, and keeps serving the rest', async () => {
    for (const [method, path, body] of everyRoute(w, state)) {
      const token = path.startsWith(`/${w.org.slug}`) ? w.ownerToken : w.owner.token;
      const response = await api.call(method, path, { token, body });
      expectError(response, 503, 'codehost_not_configured');
      expect(response.body.error).toMatch(/CODEHOST_APP_PRIVATE_KEY/);
    }
    expect((await api.call('GET', `/orgs/${w.org.slug}`, { token: w.owner.token })).status).toBe(200);
    expect((await api.call('GET', '/healthz')).status).toBe(200);
  });

  it("checks the caller's credential first: 401, 403 and 404 come before 503", async () => {
    expectError(await api.call('POST', '/github/install-url', { body: { orgId: w.org.slug } }), 401, 'unauthorized');
    expectError(await api.call('POST', '/github/install-url', { token: w.ownerToken, body: { orgId: w.org.slug } }), 401, 'unauthorized');
    expectError(await api.call('POST', '/github/install-url', { token: w.member.token, body: { orgId: w.org.slug } }), 403, 'forbidden');
    expectError(await api.call('POST', '/github/install-url', { token: w.outsider.token, body: { orgId: w.org.slug } }), 404, 'not_found');
    expectError(await api.call('GET', `/github/install-callback?installation_id=1&state=forged`), 401, 'unauthorized');
    expectError(await api.call('GET', `/${w.org.slug}/${w.project.slug}/github/repos/acme/infra`), 401, 'unauthorized');
    // the webhook's credential is an HMAC with CODEHOST_APP_WEBHOOK_SECRET: without it, nothing can be checked
    expectError(await api.call('POST', '/webhooks/github', { body: { action: 'created' } }), 503, 'codehost_not_configured');
  });

  it('lists the routes in the OpenAPI document all the same', async () => {
    const document = (await api.call('GET', '/openapi.json')).body as { paths: Record<string, unknown> };
    expect(Object.keys(document.paths).filter((path) => path.includes('github') && !path.startsWith('/admin/')).sort()).toEqual([
      '/github/install-callback',
      '/github/install-url',
      '/github/installations/recover',
      '/github/installations/{id}',
      '/webhooks/github',
      '/{o}/{p}/github/repos/{owner}/{repo}',
      '/{o}/{p}/webhooks/github',
    ]);
  });
});

describe('with a PKCS#1 key', () => {
  it('runs the whole install flow (GitHub checks the JWT it signs)', async () => {
    const api = await createTestApi({ env: codehostEnv(github, keys, { keyFormat: 'pkcs1' }) });
    try {
      const owner = await signUp(api);
      const tenant = await createUserTenant(api, owner);
      const id = freshInstallationId();
      github.addInstallation({ id, account: 'pkcs1-co', repositories: ['pkcs1-co/x'] });
      const url = (await api.call('POST', '/github/install-url', { token: owner.token, body: { orgId: tenant.org.slug } })).body.url as string;
      const response = await api.call('GET', `/github/install-callback?installation_id=${id}&state=${stateOf(url)}`);
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body.installation.grantedRepos).toEqual(['pkcs1-co/x']);
      expect(github.requestsTo('create_installation_token').filter((request) => request.installationId === id)).toMatchObject([{ auth: 'app', status: 201 }]);
      for (const line of pemBodyLines(keys.pkcs1Pem)) for (const log of api.logs) expect(log).not.toContain(line);
    } finally {
      await closeScanned(api);
    }
  });
});

// the constraint the upsert relies on: one row per GitHub installation
it('keeps one row per GitHub installation', async () => {
  const api = await createTestApi();
  try {
    const result = await api.db.execute(sql`select indexdef from pg_indexes where indexname = 'github_installations_installation_unique'`);
    expect(JSON.stringify(result)).toContain('UNIQUE');
  } finally {
    await api.close();
  }
});
