import { desc, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PlainCallers, plainCallerKey } from '../../src/auth/plain-callers';
import { hashServiceToken } from '../../src/auth/service-token';
import { plainCaller, type PlainAccessRow } from '../../src/auth/access';
import { accessEpoch, actionRuns, environments, orgs, projects, serviceTokens } from '../../src/db/schema';
import type { NodeDatabase } from '../../src/node/database';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';

/**
 * The entity GET, the label list and the action trigger remember a token's
 * plain answer with the access epoch it was read at, and then read only the
 * epoch's row beside the entity (src/auth/plain-callers.ts,
 * src/modules/entities/fast-paths.ts, src/modules/action-runs/fast-path.ts). These
 * tests hold it to the rule it rests on: every change that could alter the
 * answer moves the epoch in its own transaction — made by the app, by another
 * instance of it, or by hand in SQL, since the triggers do it, not the app's
 * code — and the very next read gives the answer the full check gives.
 */

type Sent = { text: string };

/** The SQL texts the driver is sent while `run` executes. */
async function statementsSent(database: NodeDatabase, run: () => Promise<unknown>): Promise<Sent[]> {
  const sent: Sent[] = [];
  const textOf = (first: unknown) => (typeof first === 'string' ? first : String((first as { text?: unknown }).text));
  const target = (database.kind === 'pglite' ? database.pglite : database.pool) as unknown as Record<'query', (...args: unknown[]) => unknown>;
  const original = target.query;
  target.query = function (this: unknown, ...args: unknown[]) {
    sent.push({ text: textOf(args[0]) });
    return original.apply(this, args);
  };
  try {
    await run();
  } finally {
    target.query = original;
  }
  return sent;
}

describe('remembered plain callers on the entity GET and list', () => {
  const clock = manualClock(new Date('2026-11-27T10:00:00.000Z'));
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;
  const envPath = (env = 'default', project = tenant.project.slug) => `/${tenant.org.slug}/${project}/envs/${env}`;
  const get = (name: string, token: string, env = 'default', project?: string) =>
    api.call('GET', `${envPath(env, project)}/entities/${name}`, { token });
  const epoch = async () => String((await api.db.select({ value: accessEpoch.value }).from(accessEpoch))[0]!.value);

  async function entity(token = owner, env = 'default'): Promise<string> {
    const name = fresh('e');
    const created = await api.call('POST', `${envPath(env)}/entities`, { token, body: { kind: 'Entity', entityType: 'host', name } });
    expect(created.status).toBe(201);
    return name;
  }

  /** Reads `name` until the token's answer is remembered, and checks that the read after is the remembered one: one statement, no token table. */
  async function remembered(name: string, token: string, env = 'default'): Promise<void> {
    expect((await get(name, token, env)).status).toBe(200);
    const sent = await statementsSent(api.testDatabase.database, async () => expect((await get(name, token, env)).status).toBe(200));
    expect(sent).toHaveLength(1);
    expect(sent[0]!.text).toContain('"access_epoch"');
    expect(sent[0]!.text).not.toContain('service_tokens');
  }

  beforeAll(async () => {
    api = await createTestApi({ clock });
    tenant = await createTenant(api);
    expect((await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'staging' } })).status).toBe(201);
    owner = await mintToken(api, tenant, { role: 'owner' });
    const hostType = { kind: 'EntityType', name: 'host', states: ['up', 'down'], initialState: 'up' };
    expect((await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/entity-types`, { token: owner, body: hostType })).status).toBe(201);
  });
  afterAll(() => api.close());

  it('answers a remembered caller in one statement that reads the epoch and the entity, with the same body as the full check', async () => {
    const name = await entity();
    const first = await get(name, owner);
    expect(first.status).toBe(200);
    await remembered(name, owner);
    expect((await get(name, owner)).body).toEqual(first.body);
  });

  it('does not move the epoch on entity writes, which move their environment change_seq', async () => {
    const name = await entity();
    await remembered(name, owner);
    const before = await epoch();
    const other = await entity();
    expect((await api.call('PUT', `${envPath()}/entities/${other}`, { token: owner, body: { state: 'down' } })).status).toBe(200);
    expect((await api.call('DELETE', `${envPath()}/entities/${other}`, { token: owner })).status).toBe(200);
    expect(await epoch()).toBe(before);
    const sent = await statementsSent(api.testDatabase.database, async () => expect((await get(name, owner)).status).toBe(200));
    expect(sent).toHaveLength(1);
  });

  it('answers 404 for a missing entity with a remembered caller, as the full check does', async () => {
    const name = await entity();
    await remembered(name, owner);
    expectError(await get('no-such-entity', owner), 404, 'not_found');
    expect((await api.call('DELETE', `${envPath()}/entities/${name}`, { token: owner })).status).toBe(200);
    expectError(await get(name, owner), 404, 'not_found');
  });

  it('sees a token revoked through the API on the very next read (401), then checks in full once for the others', async () => {
    const doomed = await mintToken(api, tenant, { role: 'member', as: owner });
    const name = await entity();
    await remembered(name, doomed);
    await remembered(name, owner);
    const tokens = await api.call('GET', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, { token: owner });
    const id = (tokens.body.items ?? tokens.body).find((token: { prefix: string }) => doomed.startsWith(token.prefix)).id;
    expect((await api.call('DELETE', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens/${id}`, { token: owner })).status).toBe(200);
    expectError(await get(name, doomed), 401, 'unauthorized');
    // the epoch moved for every remembered caller: the owner's next read checks in full (two statements), the one after is remembered again
    const sent = await statementsSent(api.testDatabase.database, async () => expect((await get(name, owner)).status).toBe(200));
    expect(sent).toHaveLength(2);
    expect(sent[1]!.text).toContain('service_tokens');
    await remembered(name, owner);
  });

  // changes made by hand, outside the app's code: the triggers move the epoch
  const byHand: [string, () => Promise<unknown>, () => Promise<unknown>, number, string][] = [
    [
      'a token revoked',
      () => api.db.update(serviceTokens).set({ revokedAt: clock.now() }).where(eq(serviceTokens.projectId, tenant.project.id)),
      () => api.db.update(serviceTokens).set({ revokedAt: null }).where(eq(serviceTokens.projectId, tenant.project.id)),
      401,
      'unauthorized',
    ],
    [
      'an organization suspended',
      () => api.db.update(orgs).set({ suspendedAt: clock.now() }).where(eq(orgs.id, tenant.org.id)),
      () => api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id)),
      403,
      'org_suspended',
    ],
    [
      'a token pinned to another environment',
      async () => {
        const [staging] = await api.db.select({ id: environments.id }).from(environments).where(eq(environments.name, 'staging'));
        await api.db.update(serviceTokens).set({ envId: staging!.id }).where(eq(serviceTokens.projectId, tenant.project.id));
      },
      () => api.db.update(serviceTokens).set({ envId: null }).where(eq(serviceTokens.projectId, tenant.project.id)),
      403,
      'forbidden',
    ],
    [
      'a role lowered to one without data:read',
      () => api.db.execute(sql`update service_tokens set role = 'viewer' where project_id = ${tenant.project.id}`),
      () => api.db.execute(sql`update service_tokens set role = 'owner' where project_id = ${tenant.project.id}`),
      // viewers read: still 200, through the full check
      200,
      '',
    ],
  ];
  for (const [change, make, undo, status, code] of byHand) {
    it(`sees ${change} in SQL by hand on the very next read`, async () => {
      const name = await entity();
      await remembered(name, owner);
      const before = await epoch();
      await make();
      try {
        expect(await epoch()).not.toBe(before);
        const answer = await get(name, owner);
        if (status === 200) expect(answer.status).toBe(200);
        else expectError(answer, status, code);
      } finally {
        await undo();
      }
      expect((await get(name, owner)).status).toBe(200);
    });
  }

  it('sees a project renamed and an environment deleted by hand: 404 on the very next read', async () => {
    const name = await entity(owner, 'staging');
    await remembered(name, owner, 'staging');
    await api.db.delete(environments).where(eq(environments.name, 'staging'));
    expectError(await get(name, owner, 'staging'), 404, 'not_found');

    const other = await entity();
    await remembered(other, owner);
    await api.db.update(projects).set({ slug: 'renamed' }).where(eq(projects.id, tenant.project.id));
    try {
      expectError(await get(other, owner), 404, 'not_found');
      expect((await get(other, owner, 'default', 'renamed')).status).toBe(200);
    } finally {
      await api.db.update(projects).set({ slug: tenant.project.slug }).where(eq(projects.id, tenant.project.id));
    }
  });

  it('refuses a remembered token once it expires (401), with no access change to move the epoch', async () => {
    const expiresAt = new Date(clock.now().getTime() + 60_000);
    const token = await mintToken(api, tenant, { role: 'member', expiresAt: expiresAt.toISOString(), as: owner });
    const name = await entity();
    await remembered(name, token);
    const before = await epoch();
    clock.set(expiresAt);
    try {
      expectError(await get(name, token), 401, 'unauthorized');
      expect(await epoch()).toBe(before);
    } finally {
      clock.set(new Date('2026-11-27T10:00:00.000Z'));
    }
  });

  it('lists a label filter for a remembered caller in one statement, and sees a revocation by hand on the very next page', async () => {
    const name = await entity();
    const labelled = await api.call('PUT', `${envPath()}/entities/${name}`, { token: owner, body: { labels: { team: 'red' } } });
    expect(labelled.status).toBe(200);
    const page = () => api.call('GET', `${envPath()}/entities?label=team:red`, { token: owner });
    expect((await page()).status).toBe(200);
    const sent = await statementsSent(api.testDatabase.database, async () => {
      const listed = await page();
      expect(listed.status).toBe(200);
      expect((listed.body as { name: string }[]).map((e) => e.name)).toEqual([name]);
    });
    expect(sent).toHaveLength(1);
    expect(sent[0]!.text).toContain('"access_epoch"');
    expect(sent[0]!.text).not.toContain('service_tokens');
    await api.db.update(serviceTokens).set({ revokedAt: clock.now() }).where(eq(serviceTokens.projectId, tenant.project.id));
    try {
      expectError(await page(), 401, 'unauthorized');
    } finally {
      await api.db.update(serviceTokens).set({ revokedAt: null }).where(eq(serviceTokens.projectId, tenant.project.id));
    }
    expect((await page()).status).toBe(200);
  });

  it('sees a token revoked by another instance of the app on the same database', async () => {
    const other = await createTestApi({ clock, database: api.testDatabase });
    try {
      const token = await mintToken(api, tenant, { role: 'member', as: owner });
      const name = await entity();
      await remembered(name, token);
      const tokens = await other.call('GET', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, { token: owner });
      const id = (tokens.body.items ?? tokens.body).find((listed: { prefix: string }) => token.startsWith(listed.prefix)).id;
      expect((await other.call('DELETE', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens/${id}`, { token: owner })).status).toBe(200);
      expectError(await get(name, token), 401, 'unauthorized');
    } finally {
      await other.close();
    }
  });
});

describe('remembered plain callers on the action trigger', () => {
  const clock = manualClock(new Date('2026-11-27T10:00:00.000Z'));
  let api: TestApi;
  let receiver: Receiver;
  let tenant: Tenant;
  let owner: string;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;
  const env = () => `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;
  const trigger = (entity: string, token: string, action = 'deploy') =>
    api.call('POST', `${env()}/entities/${entity}/actions/${action}`, { token, body: {} });
  const runCount = async () => (await api.db.select({ id: actionRuns.id }).from(actionRuns)).length;

  const ids = new Map<string, string>();
  async function vm(): Promise<string> {
    const name = fresh('vm');
    const created = await api.call('POST', `${env()}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name } });
    expect(created.status).toBe(201);
    ids.set(name, created.body.id);
    return name;
  }

  /** Triggers until the token's answer is remembered, and checks that the trigger after reads the epoch, not the token's tables: the read, then the run. */
  async function remembered(token: string): Promise<void> {
    expect((await trigger(await vm(), token)).status).toBe(202);
    const entity = await vm();
    const sent = await statementsSent(api.testDatabase.database, async () => {
      const triggered = await trigger(entity, token);
      expect(triggered.status, JSON.stringify(triggered.body)).toBe(202);
      expect(triggered.body).toMatchObject({ actionName: 'deploy', entityId: ids.get(entity), status: 'pending' });
    });
    expect(sent).toHaveLength(2);
    expect(sent[0]!.text).toContain('"access_epoch"');
    expect(sent[0]!.text).not.toContain('service_tokens');
  }

  /** The trigger is refused with `status` and `code`, and writes no run. */
  async function refused(entity: string, token: string, status: number, code: string, action?: string): Promise<void> {
    const before = await runCount();
    expectError(await trigger(entity, token, action), status, code);
    expect(await runCount()).toBe(before);
  }

  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
    api = await createTestApi({ clock, env: { OUTBOUND_ALLOWED_HOSTS: receiver.host } });
    tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    const project = `/${tenant.org.slug}/${tenant.project.slug}`;
    const vmType = { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' };
    expect((await api.call('POST', `${project}/entity-types`, { token: owner, body: vmType })).status).toBe(201);
    const action = await api.call('POST', `${project}/actions`, { token: owner, body: webhookAction('deploy', `${receiver.url}/hooks`) });
    expect(action.status, JSON.stringify(action.body)).toBe(201);
  });
  afterAll(async () => {
    await api?.close();
    await receiver?.close();
  });

  it('triggers for a remembered caller with the epoch read beside the entity and the action, and the same run as the full check writes', async () => {
    const token = await mintToken(api, tenant, { role: 'member', as: owner });
    await remembered(token);
    const [run] = await api.db.select().from(actionRuns).orderBy(desc(actionRuns.createdAt), desc(actionRuns.id)).limit(1);
    expect(run).toMatchObject({ status: 'pending', orgId: tenant.org.id, projectId: tenant.project.id, triggeredBy: expect.stringMatching(/^token:/) });
  });

  it('answers 404 for a missing entity or action with a remembered caller, writing no run', async () => {
    await remembered(owner);
    await refused('no-such-vm', owner, 404, 'not_found');
    await refused(await vm(), owner, 404, 'not_found', 'no-such-action');
  });

  it("keeps the trigger's answer apart from the GET's: a viewer's remembered reads are no write, and a role lowered by hand is 403 on the very next trigger", async () => {
    const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
    const entity = await vm();
    for (let i = 0; i < 2; i++) expect((await api.call('GET', `${env()}/entities/${entity}`, { token: viewer })).status).toBe(200);
    await refused(entity, viewer, 403, 'forbidden');

    const token = await mintToken(api, tenant, { role: 'member', as: owner });
    await remembered(token);
    await api.db.update(serviceTokens).set({ role: 'viewer' }).where(eq(serviceTokens.tokenHash, hashServiceToken(token)));
    await refused(await vm(), token, 403, 'forbidden');
  });

  it('sees a token revoked by hand on the very next trigger (401), and the others check in full once, then are remembered again', async () => {
    const doomed = await mintToken(api, tenant, { role: 'member', as: owner });
    await remembered(doomed);
    await remembered(owner);
    await api.db.update(serviceTokens).set({ revokedAt: clock.now() }).where(eq(serviceTokens.tokenHash, hashServiceToken(doomed)));
    await refused(await vm(), doomed, 401, 'unauthorized');
    const entity = await vm();
    const sent = await statementsSent(api.testDatabase.database, async () => expect((await trigger(entity, owner)).status).toBe(202));
    // the remembered read finds the epoch moved, the full check, the run
    expect(sent).toHaveLength(3);
    expect(sent[1]!.text).toContain('service_tokens');
    await remembered(owner);
  });

  it('refuses a remembered token once it expires (401), with no access change to move the epoch', async () => {
    const expiresAt = new Date(clock.now().getTime() + 60_000);
    const token = await mintToken(api, tenant, { role: 'member', expiresAt: expiresAt.toISOString(), as: owner });
    await remembered(token);
    const entity = await vm();
    clock.set(expiresAt);
    try {
      await refused(entity, token, 401, 'unauthorized');
    } finally {
      clock.set(new Date('2026-11-27T10:00:00.000Z'));
    }
  });
});

describe('PlainCallers', () => {
  const row = (expiresAt: Date | null): PlainAccessRow => ({
    tokenId: 't',
    grantOrgId: 'o',
    grantProjectId: 'p',
    grantRole: 'owner',
    grantEnvId: null,
    tokenExpiresAt: expiresAt,
    orgId: 'o',
    projectId: 'p',
    envId: 'e',
  });
  const now = new Date('2026-11-27T10:00:00.000Z');
  const caller = plainCaller(row(null), { org: 'o', project: 'p', env: 'default' }, now);

  it('keeps at most its capacity, dropping the oldest', () => {
    const callers = new PlainCallers(2);
    for (const key of ['a', 'b', 'c']) callers.remember(key, { row: row(null), caller, epoch: '1' });
    expect(callers.size).toBe(2);
    expect(callers.recall('a', now)).toBeUndefined();
    expect(callers.recall('c', now)?.epoch).toBe('1');
  });

  it('forgets an answer whose token has expired', () => {
    const callers = new PlainCallers();
    callers.remember('k', { row: row(new Date(now.getTime() + 1)), caller, epoch: '1' });
    expect(callers.recall('k', now)).toBeDefined();
    expect(callers.recall('k', new Date(now.getTime() + 1))).toBeUndefined();
    expect(callers.size).toBe(0);
  });

  it('keys each token, path and permission apart, whatever the path segments hold', () => {
    const key = (org: string, project: string) => plainCallerKey('hash', { org, project, env: 'default' }, 'data:read');
    expect(key('a/b', 'c')).not.toBe(key('a', 'b/c'));
    expect(key('a', 'b')).not.toBe(plainCallerKey('hash', { org: 'a', project: 'b', env: 'default' }, 'data:write'));
  });

  it('gives every different path its own key, even parts made of digits and spaces as the key writes its lengths', () => {
    const parts = ['', 'a', '1', ' ', '1 ', ' 1', '11', '1 a', 'a1 '];
    const paths = parts.flatMap((org) => parts.flatMap((project) => parts.map((env) => ({ org, project, env }))));
    const keys = new Set(paths.map((ref) => plainCallerKey('hash', ref, 'data:read')));
    expect(keys.size).toBe(paths.length);
  });
});
