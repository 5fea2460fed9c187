import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entities, environments, orgs } from '../../src/db/schema';
import { createTestApi, manualClock, type ApiResponse, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';
import { countStatements } from '../support/statement-counter';

/**
 * GET ENV/entities by a token is answered without authorizeEnvironment when
 * the answer is a plain success (src/modules/entities/list.ts, listPlainly):
 * a page that is one index range (no filter, one of entityType, state or
 * syncSource, with or without namePrefix) in one statement, any other page
 * in two (the check, then the page planned with its values), or in one once
 * the token's answer is remembered (the access epoch's row beside the page:
 * src/auth/plain-callers.ts). Every other
 * answer comes from the usual path. These tests check that the plain lists
 * take those paths, answer what the entity reads answer, and that each
 * change of the token or the tenancy is seen by the very next request, with
 * the usual path's answer.
 */
describe('entity lists by a token in one statement', () => {
  const start = new Date('2026-11-21T10:00:00.000Z');
  const clock = manualClock(start);
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  let owner: string;
  let otherOwner: string;
  let n = 0;
  const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

  const projectPath = (t = tenant) => `/${t.org.slug}/${t.project.slug}`;
  const listPath = (query: string, env = 'default', t = tenant) => `${projectPath(t)}/envs/${env}/entities?${query}`;
  const tokensPath = () => `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
  const list = (query: string, token: string, env = 'default', t = tenant) => api.call('GET', listPath(query, env, t), { token });

  /** The statements a call sends, outside and inside transactions. */
  async function measured<T>(call: () => Promise<T>): Promise<{ result: T; statements: number; transactions: number }> {
    let result!: T;
    const counts = await countStatements(api.testDatabase.database, async () => {
      result = await call();
    });
    return { result, ...counts };
  }

  /** A list answering 200 in `statements` statements, without a transaction. */
  async function listed(query: string, token: string, statements: number, env = 'default', t = tenant): Promise<ApiResponse> {
    const response = await measured(() => list(query, token, env, t));
    expect(response.result.status, JSON.stringify(response.result.body)).toBe(200);
    expect({ statements: response.statements, transactions: response.transactions }).toEqual({ statements, transactions: 0 });
    return response.result;
  }

  /**
   * The plain lists: an index range in one statement; a label filter checks
   * the token unless its answer is remembered (two statements, three after an
   * access change moved the epoch it was remembered at), and is then one.
   */
  async function takesFastPaths(token: string, env = 'default', t = tenant): Promise<void> {
    await listed('limit=2', token, 1, env, t);
    const first = await measured(() => list('label=team:in&limit=2', token, env, t));
    expect(first.result.status).toBe(200);
    expect([1, 2, 3]).toContain(first.statements);
    await listed('label=team:in&limit=2', token, 1, env, t);
  }

  /** Both lists answer `status` and `code`. */
  async function refused(token: string, status: number, code: string, env = 'default', t = tenant): Promise<void> {
    for (const query of ['limit=2', 'label=team:in&limit=2']) expectError(await list(query, token, env, t), status, code);
  }

  const names = (response: ApiResponse) => (response.body as { name: string }[]).map((entity) => entity.name);

  beforeAll(async () => {
    api = await createTestApi({ clock });
    // in bootstrap mode, up to the first token
    tenant = await createTenant(api);
    other = await createTenant(api, { project: tenant.project.slug });
    for (const name of ['staging', 'empty']) {
      expect((await api.call('POST', `${projectPath()}/envs`, { body: { name } })).status).toBe(201);
    }
    const type = await api.call('POST', `${projectPath()}/entity-types`, {
      body: { kind: 'EntityType', name: 'host', states: ['up', 'down'], initialState: 'up' },
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    const cell = await api.call('POST', `${projectPath()}/cells`, {
      body: { kind: 'Cell', name: 'inner', entityType: 'host', membership: { mode: 'derived', derivedFrom: { selector: { labels: { team: 'in' } } } } },
    });
    expect(cell.status, JSON.stringify(cell.body)).toBe(201);
    for (const [env, name, team, state] of [
      ['default', 'h-1', 'in', 'up'],
      ['default', 'h-2', 'out', 'down'],
      ['default', 'h-3', 'in', 'down'],
      ['default', 'h-4', 'out', 'up'],
      ['default', 'h-5', 'in', 'up'],
      ['staging', 's-1', 'in', 'up'],
    ] as const) {
      const created = await api.call('POST', `${projectPath()}/envs/${env}/entities`, {
        body: { kind: 'Entity', entityType: 'host', name, state, labels: { team }, syncSource: team === 'in' ? 'cmdb' : undefined },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
    }
    // a stored time finer than the API's milliseconds, which every read truncates alike
    await api.db
      .update(entities)
      .set({ updatedAt: sql`'2026-11-21 09:59:58.123987+00'::timestamptz`, lastSyncedAt: sql`'2026-11-20 23:00:00.5+00'::timestamptz` })
      .where(eq(entities.name, 'h-3'));
    owner = await mintToken(api, tenant, { role: 'owner' });
    otherOwner = await seedToken(api, other, 'owner');
  });
  afterAll(() => api?.close());

  it('answers a plain list in one statement, each entity as its read answers it, pages joined by the cursor', async () => {
    const seen: string[] = [];
    let query = 'limit=2';
    for (;;) {
      const page = await listed(query, owner, 1);
      for (const entity of page.body as { name: string }[]) {
        seen.push(entity.name);
        expect(entity).toEqual((await api.call('GET', `${projectPath()}/envs/default/entities/${entity.name}`, { token: owner })).body);
      }
      const next = page.headers.get('x-next-cursor');
      if (!next) break;
      expect(page.headers.get('link')).toContain(`cursor=${next}`);
      query = `limit=2&cursor=${next}`;
    }
    expect(seen).toEqual(['h-1', 'h-2', 'h-3', 'h-4', 'h-5']);
    const h3 = (await list('namePrefix=h-3', owner)).body[0];
    expect({ updatedAt: h3.updatedAt, lastSyncedAt: h3.lastSyncedAt }).toEqual({ updatedAt: '2026-11-21T09:59:58.123Z', lastSyncedAt: '2026-11-20T23:00:00.500Z' });
  });

  it('reads each index range in one statement, and any other filter in one once the token is remembered', async () => {
    await takesFastPaths(owner);
    expect(names(await listed('state=down', owner, 1))).toEqual(['h-2', 'h-3']);
    expect(names(await listed('entityType=host&namePrefix=h-4', owner, 1))).toEqual(['h-4']);
    expect(names(await listed('syncSource=cmdb&limit=2', owner, 1))).toEqual(['h-1', 'h-3']);
    expect(names(await listed('label=team:in', owner, 1))).toEqual(['h-1', 'h-3', 'h-5']);
    expect(names(await listed('state=up&syncSource=cmdb', owner, 1))).toEqual(['h-1', 'h-5']);
    expect(names(await listed(`updatedSince=${start.toISOString()}&label=team:in`, owner, 1))).toEqual(['h-1', 'h-5']);
    // a cell is read before the page: the usual path
    const cell = await measured(() => list('cell=inner', owner));
    expect(names(cell.result)).toEqual(['h-1', 'h-3', 'h-5']);
    expect(cell.statements).toBeGreaterThan(2);
  });

  it('answers an empty page 200 [] in one statement, a label filter too once the token is remembered', async () => {
    await takesFastPaths(owner);
    await takesFastPaths(owner, 'empty');
    for (const [query, env, statements] of [
      ['namePrefix=nobody', 'default', 1],
      ['limit=10', 'empty', 1],
      ['state=gone', 'default', 1],
      ['label=team:nobody', 'default', 1],
      ['label=team:in&label=team:out', 'default', 1],
    ] as const) {
      const page = await listed(query, owner, statements, env);
      expect(page.body).toEqual([]);
      expect(page.headers.get('x-next-cursor')).toBeNull();
    }
  });

  it('answers a bad cursor or label filter 400 for a caller who may list, and 401 for one who may not', async () => {
    const minted = await api.call('POST', tokensPath(), { token: owner, body: { name: fresh('doomed'), role: 'member' } });
    const revoked = minted.body.token as string;
    expect((await api.call('DELETE', `${tokensPath()}/${minted.body.id}`, { token: owner })).status).toBe(200);
    for (const query of ['cursor=nonsense', 'label=team:in&cursor=nonsense', 'label=nocolon', 'state=up&label=nocolon']) {
      expectError(await list(query, owner), 400, 'validation_failed');
      expectError(await list(query, revoked), 401, 'unauthorized');
    }
  });

  describe('every other answer is the usual path’s, on the very next request', () => {
    it('a revoked token: 401', async () => {
      const minted = await api.call('POST', tokensPath(), { token: owner, body: { name: fresh('doomed'), role: 'member' } });
      const token = minted.body.token as string;
      await takesFastPaths(token);
      expect((await api.call('DELETE', `${tokensPath()}/${minted.body.id}`, { token: owner })).status).toBe(200);
      await refused(token, 401, 'unauthorized');
    });

    it('an expired token: 401 from the instant it expires, 200 until then', async () => {
      const expiresAt = new Date(clock.now().getTime() + 60_000);
      const token = await mintToken(api, tenant, { role: 'viewer', expiresAt: expiresAt.toISOString(), as: owner });
      try {
        clock.set(new Date(expiresAt.getTime() - 1));
        await takesFastPaths(token);
        clock.set(expiresAt);
        await refused(token, 401, 'unauthorized');
      } finally {
        clock.set(start);
      }
    });

    it('a token pinned to another environment: 403, and one statement in its own', async () => {
      const pinned = await mintToken(api, tenant, { role: 'member', envName: 'staging', as: owner });
      await takesFastPaths(pinned, 'staging');
      expect(names(await listed('limit=5', pinned, 1, 'staging'))).toEqual(['s-1']);
      await refused(pinned, 403, 'forbidden');
    });

    it("another organization's token: 404, both ways", async () => {
      await takesFastPaths(owner);
      await refused(otherOwner, 404, 'not_found');
      // the rival's project has the same slug; our token does not reach it either
      await refused(owner, 404, 'not_found', 'default', other);
      await takesFastPaths(otherOwner, 'default', other);
    });

    it('a cell-scoped token: its cells only, by the usual path', async () => {
      const scoped = await mintToken(api, tenant, { role: 'viewer', cellScopes: ['inner'], as: owner });
      for (const [query, expected] of [
        ['limit=10', ['h-1', 'h-3', 'h-5']],
        ['label=team:out', []],
        ['state=down', ['h-3']],
      ] as const) {
        const page = await measured(() => list(query, scoped));
        expect(page.result.status).toBe(200);
        expect(names(page.result)).toEqual(expected);
        expect(page.statements).toBeGreaterThan(2);
      }
    });

    it('a suspended organization: 403 org_suspended, and one statement again once it is lifted', async () => {
      await takesFastPaths(owner);
      await api.db.update(orgs).set({ suspendedAt: clock.now() }).where(eq(orgs.id, tenant.org.id));
      try {
        await refused(owner, 403, 'org_suspended');
      } finally {
        await api.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id));
      }
      await takesFastPaths(owner);
    });

    it('an environment that does not exist, or no longer does: 404', async () => {
      await refused(owner, 404, 'not_found', 'nowhere');
      expect((await api.call('POST', `${projectPath()}/envs`, { token: owner, body: { name: 'brief' } })).status).toBe(201);
      await takesFastPaths(owner, 'brief');
      const [env] = await api.db
        .select({ id: environments.id })
        .from(environments)
        .where(and(eq(environments.projectId, tenant.project.id), eq(environments.name, 'brief')));
      await api.db.delete(environments).where(eq(environments.id, env!.id));
      await refused(owner, 404, 'not_found', 'brief');
    });

    it('a viewer: reads in one statement (data:read)', async () => {
      const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
      await takesFastPaths(viewer);
    });
  });
});
