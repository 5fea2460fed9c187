import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actionRuns, deliveryJobs, environments, orgs } from '../../src/db/schema';
import { createTestApi, manualClock, type ApiResponse, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';
import { webhookAction } from '../support/run-fixtures';
import { startReceiver, type Receiver } from '../support/receiver';
import { countStatements } from '../support/statement-counter';

/**
 * POST ENV/entities/{name}/actions/{action} reads the token, the tenancy,
 * the entity and the action in one statement and writes the run with its
 * delivery job in another (src/modules/action-runs/fast-path.ts) when the
 * answer is a plain success; every other answer comes from the usual path
 * (readTrigger in src/modules/action-runs/service.ts). These tests check
 * that the plain trigger takes the fast path, and that each change of the
 * token or the tenancy is seen by the very next request, with the answer the
 * usual path gives (test/node/runs-api.test.ts), and no run written.
 */
describe('action trigger in two statements', () => {
  const start = new Date('2026-11-21T10:00:00.000Z');
  const clock = manualClock(start);
  let api: TestApi;
  let receiver: Receiver;
  let tenant: Tenant;
  let other: Tenant;
  let owner: string;
  let otherOwner: string;
  /** A trigger sent in bootstrap mode, before any token existed. */
  let bootstrapTrigger: ApiResponse;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

  const projectPath = (t = tenant) => `/${t.org.slug}/${t.project.slug}`;
  const envPath = (env = 'default', t = tenant) => `${projectPath(t)}/envs/${env}`;
  const tokensPath = () => `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;

  const createEntity = async (fields: Record<string, unknown> = {}, env = 'default', token: string | undefined = owner) => {
    const name = fresh('vm');
    const response = await api.call('POST', `${envPath(env)}/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name, ...fields } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return { name, id: response.body.id as string };
  };

  /** A body the action takes: its required parameter. */
  const plainBody = { parameters: { version: '1' } };
  type TriggerOptions = { action?: string; env?: string; body?: unknown; headers?: Record<string, string>; t?: Tenant };
  const trigger = (entity: string, token: string | undefined, { action = 'deploy', env = 'default', body = plainBody, headers, t }: TriggerOptions = {}) =>
    api.call('POST', `${envPath(env, t)}/entities/${entity}/actions/${action}`, { token, body, headers });

  /** The statements a call sends: two and no transaction is the fast path. */
  async function measured<T>(call: () => Promise<T>): Promise<{ result: T; statements: number; transactions: number }> {
    let result!: T;
    const counts = await countStatements(api.testDatabase.database, async () => {
      result = await call();
    });
    return { result, ...counts };
  }

  /**
   * A plain trigger by `token` on a fresh entity: 202 in two statements, without a transaction.
   * One trigger first, so that a token remembered before the last access change (whose next
   * read finds the epoch moved and checks in full: three statements) is remembered afresh.
   */
  async function takesFastPath(token: string, env = 'default'): Promise<void> {
    expect((await trigger((await createEntity({}, env)).name, token, { env })).status).toBe(202);
    const entity = await createEntity({}, env);
    const triggered = await measured(() => trigger(entity.name, token, { env }));
    expect(triggered.result.status, JSON.stringify(triggered.result.body)).toBe(202);
    expect({ statements: triggered.statements, transactions: triggered.transactions }).toEqual({ statements: 2, transactions: 0 });
  }

  const runCount = async () => (await api.db.select({ id: actionRuns.id }).from(actionRuns)).length;

  /** The call's answer is `status` and `code`, and it wrote no run. */
  async function refused(call: () => Promise<ApiResponse>, status: number, code: string): Promise<ApiResponse> {
    const before = await runCount();
    const response = await call();
    expectError(response, status, code);
    expect(await runCount()).toBe(before);
    return response;
  }

  async function envId(name: string): Promise<string> {
    const [env] = await api.db
      .select({ id: environments.id })
      .from(environments)
      .where(and(eq(environments.projectId, tenant.project.id), eq(environments.name, name)));
    return env!.id;
  }

  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
    api = await createTestApi({ clock, env: { OUTBOUND_ALLOWED_HOSTS: receiver.host } });
    // everything below up to the first token is done in bootstrap mode, without a token
    tenant = await createTenant(api);
    other = await createTenant(api, { project: tenant.project.slug });
    expect((await api.call('POST', `${projectPath()}/envs`, { body: { name: 'staging' } })).status).toBe(201);
    for (const name of ['vm', 'db']) {
      const type = await api.call('POST', `${projectPath()}/entity-types`, {
        body: { kind: 'EntityType', name, states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' },
      });
      expect(type.status, JSON.stringify(type.body)).toBe(201);
    }
    const parameters = [
      { name: 'version', type: 'string', required: true },
      { name: 'size', type: 'string', default: 'small' },
    ];
    for (const [name, entityType] of [['deploy', 'vm'], ['backup', 'db']]) {
      const action = await api.call('POST', `${projectPath()}/actions`, {
        body: webhookAction(name!, `${receiver.url}/hooks/{{ entity.name }}`, { retry: { maxAttempts: 1 } }, { entityType, parameters }),
      });
      expect(action.status, JSON.stringify(action.body)).toBe(201);
    }
    const early = await createEntity({}, 'default', undefined);
    bootstrapTrigger = await trigger(early.name, undefined, { body: { parameters: { version: '0.1' } } });
    owner = await mintToken(api, tenant, { role: 'owner' });
    otherOwner = await seedToken(api, other, 'owner');
  });
  afterAll(async () => {
    await api?.close();
    await receiver?.close();
  });

  it('answers a plain trigger by an owner token 202 in two statements, writing the pending run and its delivery job', async () => {
    const entity = await createEntity();
    const triggered = await measured(() => trigger(entity.name, owner, { body: { parameters: { version: '1.2' } } }));
    expect({ statements: triggered.statements, transactions: triggered.transactions }).toEqual({ statements: 2, transactions: 0 });
    const { status, body, headers } = triggered.result;
    expect(status, JSON.stringify(body)).toBe(202);
    expect(body).toMatchObject({
      actionName: 'deploy',
      entityId: entity.id,
      status: 'pending',
      parameters: { version: '1.2', size: 'small' },
      recommendations: {},
      triggeredBy: expect.stringMatching(/^token:/),
      createdAt: clock.now().toISOString(),
      attempts: [],
    });
    expect(headers.get('location')).toBe(`${envPath()}/action-runs/${body.id}`);
    const [run] = await api.db.select().from(actionRuns).where(eq(actionRuns.id, body.id));
    expect(run).toMatchObject({ status: 'pending', envId: await envId('default'), entityId: entity.id, idempotencyKey: null });
    const jobs = await api.db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, body.id));
    expect(jobs).toEqual([expect.objectContaining({ runId: body.id, envId: await envId('default'), attempt: 1, runAt: clock.now(), leaseUntil: null })]);
  });

  describe('every other answer is the usual path’s, on the very next request', () => {
    it('a revoked token: 401', async () => {
      const minted = await api.call('POST', tokensPath(), { token: owner, body: { name: fresh('doomed'), role: 'member' } });
      expect(minted.status).toBe(201);
      const token = minted.body.token as string;
      await takesFastPath(token);
      expect((await api.call('DELETE', `${tokensPath()}/${minted.body.id}`, { token: owner })).status).toBe(200);
      const entity = await createEntity();
      await refused(() => trigger(entity.name, token), 401, 'unauthorized');
    });

    it('an expired token: 401 from the instant it expires, 202 until then', async () => {
      const expiresAt = new Date(clock.now().getTime() + 60_000);
      const token = await mintToken(api, tenant, { role: 'member', expiresAt: expiresAt.toISOString(), as: owner });
      await takesFastPath(token);
      const entity = await createEntity();
      try {
        clock.set(new Date(expiresAt.getTime() - 1));
        expect((await trigger(entity.name, token)).status).toBe(202);
        clock.set(expiresAt);
        await refused(() => trigger(entity.name, token), 401, 'unauthorized');
      } finally {
        clock.set(start);
      }
    });

    it('a token pinned to another environment: 403, and 202 in its own', async () => {
      const pinned = await mintToken(api, tenant, { role: 'member', envName: 'staging', as: owner });
      await takesFastPath(pinned, 'staging');
      const entity = await createEntity();
      await refused(() => trigger(entity.name, pinned), 403, 'forbidden');
    });

    it('a role without data:write (viewer): 403 forbidden', async () => {
      const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
      await takesFastPath(owner);
      const entity = await createEntity();
      await refused(() => trigger(entity.name, viewer), 403, 'forbidden');
    });

    it('an unknown entity: 404', async () => {
      await takesFastPath(owner);
      await refused(() => trigger(fresh('nobody'), owner), 404, 'not_found');
    });

    it('an unknown action: 404', async () => {
      await takesFastPath(owner);
      const entity = await createEntity();
      await refused(() => trigger(entity.name, owner, { action: 'no-such-action' }), 404, 'not_found');
    });

    it('an action defined for another entity type: 404', async () => {
      await takesFastPath(owner);
      const entity = await createEntity();
      const response = await refused(() => trigger(entity.name, owner, { action: 'backup' }), 404, 'not_found');
      expect(response.body.error).toContain('"vm"');
    });

    it('a suspended organization: 403 org_suspended, and 202 again once it is lifted', async () => {
      await takesFastPath(owner);
      const entity = await createEntity();
      await api.db.update(orgs).set({ suspendedAt: clock.now() }).where(eq(orgs.id, tenant.org.id));
      try {
        await refused(() => trigger(entity.name, owner), 403, 'org_suspended');
      } finally {
        await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id));
      }
      await takesFastPath(owner);
    });

    it("another organization's token: 404, both ways", async () => {
      await takesFastPath(owner);
      const entity = await createEntity();
      await refused(() => trigger(entity.name, otherOwner), 404, 'not_found');
      // the rival's project has the same slug; our token does not reach it either
      await refused(() => trigger(entity.name, owner, { t: other }), 404, 'not_found');
    });

    it('an environment that does not exist: 404', async () => {
      await takesFastPath(owner);
      const entity = await createEntity();
      await refused(() => trigger(entity.name, owner, { env: 'nowhere' }), 404, 'not_found');
    });
  });

  it('leaves a cell-scoped token to the usual path: 403 cell_scope_violation outside its cells, 202 inside', async () => {
    const cell = await api.call('POST', `${projectPath()}/cells`, {
      token: owner,
      body: { kind: 'Cell', name: fresh('team'), entityType: 'vm', membership: { mode: 'derived', derivedFrom: { selector: { labels: { team: 'in' } } } } },
    });
    expect(cell.status, JSON.stringify(cell.body)).toBe(201);
    const scoped = await mintToken(api, tenant, { role: 'member', cellScopes: [cell.body.name], as: owner });
    const inside = await createEntity({ labels: { team: 'in' } });
    const outside = await createEntity({ labels: { team: 'out' } });
    const accepted = await measured(() => trigger(inside.name, scoped));
    expect(accepted.result.status, JSON.stringify(accepted.result.body)).toBe(202);
    expect(accepted.result.body).toMatchObject({ entityId: inside.id, status: 'pending' });
    expect(accepted.statements).toBeGreaterThan(2);
    await refused(() => trigger(outside.name, scoped), 403, 'cell_scope_violation');
  });

  it('replays an Idempotency-Key: the same body answers the same run, another body 422 idempotency_key_reused', async () => {
    await takesFastPath(owner);
    const entity = await createEntity();
    const headers = { 'idempotency-key': fresh('key') };
    const first = await trigger(entity.name, owner, { headers });
    expect(first.status, JSON.stringify(first.body)).toBe(202);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const replay = await trigger(entity.name, owner, { headers });
    expect(replay.status, JSON.stringify(replay.body)).toBe(202);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.id).toBe(first.body.id);
    await refused(() => trigger(entity.name, owner, { headers, body: { parameters: { version: '2' } } }), 422, 'idempotency_key_reused');
    const rows = await api.db.select().from(actionRuns).where(eq(actionRuns.idempotencyKey, headers['idempotency-key']));
    expect(rows.map((row) => row.id)).toEqual([first.body.id]);
  });

  it('answers a request without a token 401 once bootstrap mode is over, and took one in bootstrap mode', async () => {
    expect(bootstrapTrigger.status, JSON.stringify(bootstrapTrigger.body)).toBe(202);
    expect(bootstrapTrigger.body).toMatchObject({ status: 'pending', triggeredBy: 'bootstrap', parameters: { version: '0.1', size: 'small' } });
    const entity = await createEntity();
    await refused(() => trigger(entity.name, undefined), 401, 'unauthorized');
    await refused(() => trigger(entity.name, 'not-a-token'), 401, 'unauthorized');
  });
});
