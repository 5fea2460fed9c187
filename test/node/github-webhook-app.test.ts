import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditEvents, githubInstallations, notifications, orgMembers } from '../../src/db/schema';
import { expectError } from '../support/fixtures';
import {
  examplePayload,
  installationEvent,
  installationRepositoriesEvent,
  pullRequestEvent,
  reservedEvent,
  signEvent,
  TEST_WEBHOOK_SECRET,
  type SignedEvent,
} from '../support/github-events';
import { codehostEnv, generateAppKeys, pemBodyLines, startGitHubServer, type AppKeys, type GitHubServer } from '../support/github-server';
import { createTestApi, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, type TestUser } from '../support/people';

/**
 * The App webhook, POST /webhooks/github (SPEC "Inbound code-hosting webhook
 * events", "Code-hosting installation status"): every row of the table, with
 * GitHub's own example payloads signed as GitHub signs them; the signature
 * check and what it logs; the 500 that makes GitHub retry when the audit or
 * notification insert fails; and the installation tokens the status events
 * clear (the local GitHub counts the mints).
 */

const APP_ID = '4242';
let keys: AppKeys;
let github: GitHubServer;
let api: TestApi;
let owner: TestUser;
let admin: TestUser;
let member: TestUser;
let org: { id: string; slug: string };
let nextInstallation = 8000;

const deliver = (event: SignedEvent, headers: Record<string, string> = {}) =>
  api.call('POST', '/webhooks/github', { rawBody: event.body, headers: { ...event.headers, ...headers } });

/** An installation GitHub has and the organization claimed (through the install callback), with one token minted for it. */
async function claimedInstallation(repositories: string[] = []): Promise<number> {
  const id = ++nextInstallation;
  github.addInstallation({ id, account: `acct-${id}`, repositories });
  const response = await api.call('POST', '/github/installations/recover', { token: owner.token, body: { orgId: org.slug, installationId: id } });
  expect(response.status, JSON.stringify(response.body)).toBe(200);
  return id;
}

const rowOf = async (installationId: number) =>
  (await api.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, installationId)))[0];
const mintsFor = (installationId: number) => github.requestsTo('create_installation_token').filter((request) => request.installationId === installationId).length;
/** Reads the installation's repositories through the API: uses its cached token, or mints one. */
const readThroughApi = async (installationId: number) =>
  expect((await api.call('POST', '/github/installations/recover', { token: owner.token, body: { orgId: org.slug, installationId } })).status).toBe(200);

beforeAll(async () => {
  keys = generateAppKeys();
  github = await startGitHubServer({ appId: APP_ID, publicKeyPem: keys.publicKeyPem });
  api = await createTestApi({ env: codehostEnv(github, keys) });
  owner = await signUp(api, { name: 'Owner' });
  ({ org } = await createUserTenant(api, owner));
  admin = await signUp(api, { name: 'Admin' });
  member = await signUp(api, { name: 'Member' });
  await api.db.insert(orgMembers).values([
    { orgId: org.id, userId: admin.id, role: 'admin' },
    { orgId: org.id, userId: member.id, role: 'member' },
  ]);
});
afterAll(async () => {
  await github.close();
  for (const issued of github.issuedTokens) api.secretScan.register(issued.token, 'an installation token');
  await api.close();
});

describe('the signature', () => {
  it('refuses a delivery signed with another secret, unsigned, or with a malformed signature (401), logging the event and installation id only', async () => {
    const payload = installationEvent('deleted', { installationId: 424242, account: 'payload-marker-login' });
    const wrong = await signEvent('installation', payload, 'not-the-webhook-secret');
    const before = api.logs.length;
    for (const headers of [{} as Record<string, string>, { 'x-hub-signature-256': '' }, { 'x-hub-signature-256': 'sha256=zz' }, { 'x-hub-signature-256': `sha1=${'0'.repeat(40)}` }]) {
      expectError(await deliver(wrong, headers), 401, 'invalid_signature');
    }
    const unsigned = { ...wrong.headers };
    delete (unsigned as Record<string, string>)['x-hub-signature-256'];
    expectError(await api.call('POST', '/webhooks/github', { rawBody: wrong.body, headers: unsigned }), 401, 'invalid_signature');
    const refused = api.logs.slice(before).filter((line) => line.includes('invalid signature'));
    expect(refused).toHaveLength(5);
    for (const line of refused) {
      const record = JSON.parse(line) as Record<string, unknown>;
      expect(record).toMatchObject({ level: 'warn', event: 'installation', installationId: 424242 });
      expect(Object.keys(record).sort()).toEqual(['event', 'installationId', 'level', 'msg', 'requestId', 'time']);
      expect(line).not.toContain('payload-marker-login');
      expect(line).not.toContain(wrong.body.slice(0, 40));
    }
  });

  it('refuses a body changed after signing', async () => {
    const event = await signEvent('installation', installationEvent('created', { installationId: 1 }));
    expectError(await api.call('POST', '/webhooks/github', { rawBody: event.body.replace('"created"', '"deleted"'), headers: event.headers }), 401, 'invalid_signature');
  });

  it('answers 400 invalid_json to a signed body that is not JSON, and 400 to a payload it cannot use', async () => {
    const body = '{"action": "created", ';
    const { sign } = await import('@octokit/webhooks-methods');
    const headers = { 'content-type': 'application/json', 'x-github-event': 'installation', 'x-hub-signature-256': await sign(TEST_WEBHOOK_SECRET, body) };
    expectError(await api.call('POST', '/webhooks/github', { rawBody: body, headers }), 400, 'invalid_json');
    const malformed = await signEvent('installation', { action: 'deleted', installation: { id: 'not-a-number' } });
    expectError(await deliver(malformed), 400, 'validation_failed');
    const array = await signEvent('installation', [1, 2]);
    expectError(await deliver(array), 400, 'validation_failed');
  });

  it('takes a form-encoded delivery (content type application/x-www-form-urlencoded) as GitHub sends it', async () => {
    const payload = JSON.stringify(installationEvent('created', { installationId: 31337 }));
    const body = new URLSearchParams({ payload }).toString();
    const { sign } = await import('@octokit/webhooks-methods');
    const response = await api.call('POST', '/webhooks/github', {
      rawBody: body,
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-github-event': 'installation', 'x-hub-signature-256': await sign(TEST_WEBHOOK_SECRET, body) },
    });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'installation-created', installationId: 31337 } });
  });
});

describe('installation events', () => {
  it('created: acknowledged, no record (the install callback makes it)', async () => {
    const response = await deliver(await signEvent('installation', installationEvent('created', { installationId: 777001, repositories: ['x/y'] })));
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'installation-created', installationId: 777001 } });
    expect(await rowOf(777001)).toBeUndefined();
  });

  it('deleted: the record becomes deleted and its cached token is cleared', async () => {
    const id = await claimedInstallation(['acct/a']);
    await readThroughApi(id);
    expect(mintsFor(id)).toBe(1);
    const response = await deliver(await signEvent('installation', installationEvent('deleted', { installationId: id })));
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'installation-deleted', installationId: id, status: 'deleted' } });
    expect(await rowOf(id)).toMatchObject({ status: 'deleted', deletedAt: expect.any(Date) });
    // the same event again changes nothing
    expect((await deliver(await signEvent('installation', installationEvent('deleted', { installationId: id })))).body.outcome).toEqual({
      kind: 'installation-unchanged',
      installationId: id,
      status: 'deleted',
    });
    // a suspend does not revive it
    expect((await deliver(await signEvent('installation', installationEvent('suspend', { installationId: id })))).body.outcome.kind).toBe('installation-unchanged');
    // the next read (a recovery, since the record is deleted) mints a new token
    await readThroughApi(id);
    expect(mintsFor(id)).toBe(2);
  });

  it('suspend / unsuspend: suspended then active, the cached token cleared each time', async () => {
    const id = await claimedInstallation(['acct/b']);
    await readThroughApi(id);
    expect(mintsFor(id)).toBe(1);
    github.suspendInstallation(id);
    const suspended = await deliver(await signEvent('installation', installationEvent('suspend', { installationId: id })));
    expect(suspended.body).toEqual({ ok: true, outcome: { kind: 'installation-suspended', installationId: id, status: 'suspended' } });
    expect((await rowOf(id))!.status).toBe('suspended');
    github.unsuspendInstallation(id);
    const unsuspended = await deliver(await signEvent('installation', installationEvent('unsuspend', { installationId: id })));
    expect(unsuspended.body.outcome).toEqual({ kind: 'installation-unsuspended', installationId: id, status: 'active' });
    expect((await rowOf(id))!.status).toBe('active');
    await readThroughApi(id);
    expect(mintsFor(id)).toBe(2);
    // unsuspend of an active one: unchanged
    expect((await deliver(await signEvent('installation', installationEvent('unsuspend', { installationId: id })))).body.outcome.kind).toBe('installation-unchanged');
  });

  it('an installation no organization claimed: acknowledged as unknown; other actions ignored', async () => {
    for (const action of ['deleted', 'suspend', 'unsuspend'] as const) {
      const response = await deliver(await signEvent('installation', installationEvent(action, { installationId: 990001 })));
      expect(response.status).toBe(200);
      expect(response.body.outcome).toEqual({ kind: 'installation-unknown', installationId: 990001 });
    }
    const permissions = await deliver(await signEvent('installation', installationEvent('new_permissions_accepted', { installationId: 990001 })));
    expect(permissions.body).toEqual({ ok: true, outcome: { kind: 'event-ignored', event: 'installation', action: 'new_permissions_accepted' } });
  });
});

describe('installation_repositories events', () => {
  const eventsOf = async (installationId: number) =>
    (await api.db.select().from(auditEvents).where(eq(auditEvents.action, 'github.installation_repositories'))).filter(
      (event) => (event.data as { installationId?: number }).installationId === installationId,
    );
  const notificationsOf = async (userId: string, installationId: number) =>
    (await api.db.select().from(notifications).where(and(eq(notifications.userId, userId), eq(notifications.kind, 'github.repositories_changed')))).filter(
      (row) => (row.data as { installationId?: number }).installationId === installationId,
    );

  it('added / removed update granted_repos, audit it, and tell the owners and admins', async () => {
    const id = await claimedInstallation(['acct/one']);
    const added = await signEvent('installation_repositories', installationRepositoriesEvent('added', { installationId: id, added: ['Acct/Two', 'acct/three'] }));
    const response = await deliver(added);
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'repositories-updated', installationId: id, added: 2, removed: 0, granted: 3 } });
    expect((await rowOf(id))!.grantedRepos).toEqual(['acct/one', 'acct/three', 'acct/two']);

    const removed = await deliver(await signEvent('installation_repositories', installationRepositoriesEvent('removed', { installationId: id, removed: ['acct/one'] })));
    expect(removed.body.outcome).toMatchObject({ kind: 'repositories-updated', removed: 1, granted: 2 });
    expect((await rowOf(id))!.grantedRepos).toEqual(['acct/three', 'acct/two']);

    const audit = await eventsOf(id);
    expect(audit).toHaveLength(2);
    expect(audit.find((event) => (event.data as { action: string }).action === 'added')).toMatchObject({
      orgId: org.id,
      actorType: 'codehost',
      actorId: added.deliveryId,
      targetType: 'github-installation',
      data: { installationId: id, added: ['acct/two', 'acct/three'], removed: [], addedCount: 2, removedCount: 0, grantedCount: 3 },
    });
    for (const user of [owner, admin]) {
      const rows = await notificationsOf(user.id, id);
      expect(rows).toHaveLength(2);
      expect(rows[0]).toMatchObject({ orgId: org.id, title: expect.stringContaining(`acct-${id}`) });
    }
    expect(await notificationsOf(member.id, id)).toEqual([]);
    // the owner reads it through the notification API
    const listed = await api.call('GET', '/notifications', { token: owner.token });
    expect(listed.body.items.some((item: { kind: string }) => item.kind === 'github.repositories_changed')).toBe(true);
  });

  it('for an unknown or deleted installation: acknowledged, nothing written', async () => {
    const unknown = await deliver(await signEvent('installation_repositories', installationRepositoriesEvent('added', { installationId: 990002, added: ['x/y'] })));
    expect(unknown.body.outcome).toEqual({ kind: 'installation-unknown', installationId: 990002 });
    expect(await eventsOf(990002)).toEqual([]);
  });

  describe('when the audit or notification insert fails', () => {
    beforeAll(async () => {
      // database-level faults: the audit row, or the notification, of an installation named "doomed-…" cannot be written
      await api.db.execute(sql`
        create function refuse_doomed_codehost_audit() returns trigger language plpgsql as $$
        begin
          if new.action = 'github.installation_repositories' and new.data->>'accountLogin' like 'acct-doomed-audit%' then
            raise exception 'audit refused';
          end if;
          return new;
        end $$`);
      await api.db.execute(sql`create trigger refuse_doomed_codehost_audit before insert on audit_events for each row execute function refuse_doomed_codehost_audit()`);
      await api.db.execute(sql`
        create function refuse_doomed_codehost_notification() returns trigger language plpgsql as $$
        begin
          if new.kind = 'github.repositories_changed' and new.data->>'accountLogin' like 'acct-doomed-notify%' then
            raise exception 'notification refused';
          end if;
          return new;
        end $$`);
      await api.db.execute(
        sql`create trigger refuse_doomed_codehost_notification before insert on notifications for each row execute function refuse_doomed_codehost_notification()`,
      );
    });

    for (const which of ['audit', 'notify'] as const) {
      it(`answers 500 when the ${which === 'audit' ? 'audit' : 'notification'} insert throws, so GitHub retries, and keeps nothing`, async () => {
        const id = ++nextInstallation;
        await api.db.insert(githubInstallations).values({ installationId: id, orgId: org.id, accountLogin: `acct-doomed-${which}-${id}`, accountType: 'Organization', grantedRepos: ['x/kept'] });
        const event = await signEvent('installation_repositories', installationRepositoriesEvent('added', { installationId: id, added: ['x/new'] }));
        const response = await deliver(event);
        expectError(response, 500, 'internal');
        expect((await rowOf(id))!.grantedRepos).toEqual(['x/kept']);
        expect(await eventsOf(id)).toEqual([]);
        expect(await notificationsOf(owner.id, id)).toEqual([]);
        // GitHub's retry, once the fault is gone, applies it
        await api.db.update(githubInstallations).set({ accountLogin: `acct-fixed-${id}` }).where(eq(githubInstallations.installationId, id));
        const retried = await deliver(event);
        expect(retried.status).toBe(200);
        expect((await rowOf(id))!.grantedRepos).toEqual(['x/kept', 'x/new']);
      });
    }
  });
});

describe('other events', () => {
  it('pull_request closed goes to the run-completion seam; other pull_request actions are ignored', async () => {
    github.addRepository('acct/prs');
    const closed = await deliver(await signEvent('pull_request', pullRequestEvent({ installationId: 1, repository: 'acct/prs', pullRequest: { number: 7, merged: true } })));
    expect(closed.status).toBe(200);
    expect(closed.body).toEqual({ ok: true, outcome: { kind: 'no-matching-run' } });
    const opened = await deliver(await signEvent('pull_request', pullRequestEvent({ action: 'opened', installationId: 1, repository: 'acct/prs', pullRequest: { number: 8, merged: false } })));
    expect(opened.body).toEqual({ ok: true, outcome: { kind: 'event-ignored', event: 'pull_request', action: 'opened' } });
  });

  it.each(['pull_request_review', 'workflow_job', 'workflow_run'] as const)('%s: acknowledged, reserved, no effect', async (name) => {
    const response = await deliver(await signEvent(name, reservedEvent(name, 1)));
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'event-reserved', event: name } });
  });

  it.each(['ping', 'push', 'star', 'github_app_authorization'])('an unrecognized event (%s): 200 event-ignored', async (name) => {
    const payload = name === 'push' ? examplePayload('push') : { zen: 'Keep it logically awesome.', hook_id: 1 };
    const response = await deliver(await signEvent(name, payload));
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'event-ignored', event: name } });
  });

  it('a delivery without X-GitHub-Event is an unrecognized event', async () => {
    const event = await signEvent('', { zen: 'no event name' });
    const headers = { ...event.headers };
    delete (headers as Record<string, string>)['x-github-event'];
    const response = await api.call('POST', '/webhooks/github', { rawBody: event.body, headers });
    expect(response.body).toEqual({ ok: true, outcome: { kind: 'event-ignored', event: '' } });
  });
});

it('never logs the webhook secret, the key or a token', () => {
  const secrets = [TEST_WEBHOOK_SECRET, ...pemBodyLines(keys.pkcs1Pem), ...github.issuedTokens.map((issued) => issued.token)];
  expect(api.logs.length).toBeGreaterThan(0);
  for (const line of api.logs) for (const secret of secrets) expect(line).not.toContain(secret);
});

describe('without the App configured', () => {
  it('answers 503 before looking at the signature', async () => {
    const bare = await createTestApi();
    try {
      const event = await signEvent('installation', installationEvent('created', { installationId: 1 }));
      expectError(await bare.call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers }), 503, 'codehost_not_configured');
      expectError(await bare.call('POST', '/webhooks/github', { rawBody: 'not json' }), 503, 'codehost_not_configured');
    } finally {
      await bare.close();
    }
  });
});
