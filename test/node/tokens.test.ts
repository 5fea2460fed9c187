import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashServiceToken } from '../../src/auth/service-token';
import { serviceTokens } from '../../src/db/schema';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, type Tenant } from '../support/fixtures';

describe('service tokens', () => {
  const clock = manualClock(new Date());
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  let owner: string;
  let tokensPath: string;

  beforeAll(async () => {
    api = await createTestApi({ clock });
    // both organizations exist before the first mint closes bootstrap mode
    tenant = await createTenant(api, { project: 'platform' });
    other = await createTenant(api, { project: 'platform' });
    await api.call('POST', `/${tenant.org.slug}/platform/envs`, { body: { name: 'staging' } });
    owner = await mintToken(api, tenant, { role: 'owner', name: 'root' });
    tokensPath = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
  });
  afterAll(() => api.close());

  it('mints a token shown once, with the fields of DECISIONS §5', async () => {
    const response = await api.call('POST', tokensPath, { token: owner, body: { name: 'ci' } });
    expect(response.status).toBe(201);
    expect(Object.keys(response.body).sort()).toEqual(
      ['cellScopes', 'createdAt', 'envName', 'expiresAt', 'id', 'name', 'personal', 'prefix', 'role', 'token'].sort(),
    );
    expect(response.body).toMatchObject({ name: 'ci', role: 'member', envName: null, cellScopes: [], expiresAt: null });
    expect(response.body.token).toMatch(/^cpl_[0-9A-Za-z]{36}$/);
    expect(response.body.token.startsWith(response.body.prefix)).toBe(true);

    const listed = await api.call('GET', tokensPath, { token: owner });
    const row = listed.body.find((t: { id: string }) => t.id === response.body.id);
    expect(row).toBeDefined();
    expect(row).not.toHaveProperty('token');
    expect(JSON.stringify(listed.body)).not.toContain(response.body.token);
  });

  it('stores only the SHA-256 of the token', async () => {
    const { token } = (await api.call('POST', tokensPath, { token: owner, body: { name: 'hashed' } })).body;
    const [row] = await api.db.select().from(serviceTokens).where(eq(serviceTokens.tokenHash, await hashServiceToken(token)));
    expect(row).toBeDefined();
    const everyColumn = await api.db.execute(sql`select row_to_json(t)::text as j from service_tokens t`);
    const dump = JSON.stringify(everyColumn);
    expect(dump).not.toContain(token);
    expect(dump).not.toContain(token.slice(12));
  });

  it('authenticates with the token and its role', async () => {
    const viewer = await mintToken(api, tenant, { role: 'viewer', as: owner });
    expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: viewer })).status).toBe(200);
    expectError(await api.call('GET', tokensPath, { token: viewer }), 403, 'forbidden');
  });

  it('refuses malformed and wrong-checksum tokens without touching the database', async () => {
    const good = await mintToken(api, tenant, { as: owner });
    const flipped = good.slice(0, 10) + (good[10] === 'A' ? 'B' : 'A') + good.slice(11);
    const before = api.databaseLeases();
    for (const token of ['nope', 'cpl_short', `xyz_${good.slice(4)}`, flipped, `${good}x`]) {
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token }), 401, 'unauthorized');
    }
    expectError(
      await api.call('GET', `/orgs/${tenant.org.slug}`, { headers: { authorization: `Basic ${btoa('a:b')}` } }),
      401,
      'unauthorized',
    );
    expect(api.databaseLeases()).toBe(before);
    // a well-formed token that was never minted is looked up, and refused
    const { generateServiceToken } = await import('../../src/auth/service-token');
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: generateServiceToken().token }), 401, 'unauthorized');
    expect(api.databaseLeases()).toBe(before + 1);
  });

  it('never authenticates a token of one organization against a same-slug project of another', async () => {
    const otherOwner = await mintToken(api, other, { role: 'owner', as: undefined }).catch(() => undefined);
    // bootstrap is closed: the other organization's first token cannot be minted anonymously
    expect(otherOwner).toBeUndefined();
    expectError(await api.call('GET', `/orgs/${other.org.slug}`, { token: owner }), 404, 'not_found');
    expectError(await api.call('GET', `/orgs/${other.org.slug}/projects/platform/tokens`, { token: owner }), 404, 'not_found');
    expectError(await api.call('GET', `/${other.org.slug}/platform/envs`, { token: owner }), 404, 'not_found');
    expectError(
      await api.call('POST', `/orgs/${other.org.slug}/projects/platform/tokens`, { token: owner, body: { name: 'x' } }),
      404,
      'not_found',
    );
    // and by id: the same answer as for a project that does not exist
    expectError(await api.call('GET', `/orgs/${other.org.id}/projects/${other.project.id}/tokens`, { token: owner }), 404, 'not_found');
  });

  it('accepts ids or slugs in the token routes', async () => {
    const byId = await api.call('GET', `/orgs/${tenant.org.id}/projects/${tenant.project.id}/tokens`, { token: owner });
    expect(byId.status).toBe(200);
    expect(byId.body.length).toBeGreaterThan(0);
  });

  it('revokes at once; a revoked token is gone from the list and refused', async () => {
    const minted = (await api.call('POST', tokensPath, { token: owner, body: { name: 'temp', role: 'viewer' } })).body;
    expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: minted.token })).status).toBe(200);
    const revoked = await api.call('DELETE', `${tokensPath}/${minted.id}`, { token: owner });
    expect(revoked.status).toBe(200);
    expect(revoked.body).toEqual({ revoked: true, id: minted.id });
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: minted.token }), 401, 'unauthorized');
    const listed = await api.call('GET', tokensPath, { token: owner });
    expect(listed.body.map((t: { id: string }) => t.id)).not.toContain(minted.id);
    expectError(await api.call('DELETE', `${tokensPath}/${minted.id}`, { token: owner }), 404, 'not_found');
    expectError(await api.call('DELETE', `${tokensPath}/not-a-uuid`, { token: owner }), 400, 'validation_failed');
  });

  it('expires tokens at expiresAt', async () => {
    const expiresAt = new Date(clock.now().getTime() + 60 * 60 * 1000).toISOString();
    const response = await api.call('POST', tokensPath, { token: owner, body: { name: 'short', role: 'viewer', expiresAt } });
    expect(response.body.expiresAt).toBe(expiresAt);
    expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: response.body.token })).status).toBe(200);
    clock.advance(2 * 60 * 60 * 1000);
    const expired = await api.call('GET', `/orgs/${tenant.org.slug}`, { token: response.body.token });
    expectError(expired, 401, 'unauthorized');
    expect(expired.body.error).toContain('expired');
  });

  it('refuses an expiry in the past and a malformed one', async () => {
    const past = new Date(clock.now().getTime() - 1000).toISOString();
    expectError(await api.call('POST', tokensPath, { token: owner, body: { name: 'x', expiresAt: past } }), 400, 'validation_failed');
    expectError(await api.call('POST', tokensPath, { token: owner, body: { name: 'x', expiresAt: 'tomorrow' } }), 400, 'validation_failed');
  });

  it('validates the request', async () => {
    expectError(await api.call('POST', tokensPath, { token: owner, body: {} }), 400, 'validation_failed');
    expectError(await api.call('POST', tokensPath, { token: owner, body: { name: 'x', role: 'root' } }), 400, 'validation_failed');
    expectError(await api.call('POST', tokensPath, { token: owner, body: { name: 'x', cellScopes: 'edge' } }), 400, 'validation_failed');
    expectError(await api.call('POST', tokensPath, { token: owner, body: { name: 'x', scopes: [] } }), 400, 'validation_failed');
  });

  it('pins a token to an environment that exists', async () => {
    expectError(
      await api.call('POST', tokensPath, { token: owner, body: { name: 'x', envName: 'nowhere' } }),
      400,
      'environment_not_found',
    );
    const pinned = await api.call('POST', tokensPath, { token: owner, body: { name: 'pinned', role: 'admin', envName: 'staging' } });
    expect(pinned.body.envName).toBe('staging');
    const envs = await api.call('GET', `/${tenant.org.slug}/platform/envs`, { token: pinned.body.token });
    expect(envs.body.map((e: { name: string }) => e.name)).toEqual(['staging']);
    expectError(
      await api.call('POST', `/${tenant.org.slug}/platform/envs`, { token: pinned.body.token, body: { name: 'qa' } }),
      403,
      'forbidden',
    );
    // what a pinned token mints stays pinned
    const child = await api.call('POST', tokensPath, { token: pinned.body.token, body: { name: 'child' } });
    expect(child.status).toBe(201);
    expect(child.body.envName).toBe('staging');
    expectError(
      await api.call('POST', tokensPath, { token: pinned.body.token, body: { name: 'escape', envName: 'default' } }),
      403,
      'forbidden',
    );
  });

  it('deleting an environment deletes the tokens pinned to it', async () => {
    await api.call('POST', `/${tenant.org.slug}/platform/envs`, { token: owner, body: { name: 'doomed' } });
    const pinned = await mintToken(api, tenant, { role: 'viewer', envName: 'doomed', as: owner });
    expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: pinned })).status).toBe(200);
    expect((await api.call('DELETE', `/${tenant.org.slug}/platform/envs/doomed`, { token: owner })).status).toBe(200);
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: pinned }), 401, 'unauthorized');
  });

  it('stores cell scopes, and a scoped minter can only narrow them', async () => {
    const scoped = await api.call('POST', tokensPath, {
      token: owner,
      body: { name: 'edge', role: 'admin', cellScopes: ['eu-1', 'eu-2', 'eu-1'] },
    });
    expect(scoped.body.cellScopes).toEqual(['eu-1', 'eu-2']);
    const listed = (await api.call('GET', tokensPath, { token: owner })).body.find((t: { id: string }) => t.id === scoped.body.id);
    expect(listed.cellScopes).toEqual(['eu-1', 'eu-2']);
    const narrower = await api.call('POST', tokensPath, { token: scoped.body.token, body: { name: 'n', cellScopes: ['eu-2'] } });
    expect(narrower.body.cellScopes).toEqual(['eu-2']);
    const inherited = await api.call('POST', tokensPath, { token: scoped.body.token, body: { name: 'i' } });
    expect(inherited.body.cellScopes).toEqual(['eu-1', 'eu-2']);
    expectError(
      await api.call('POST', tokensPath, { token: scoped.body.token, body: { name: 'w', cellScopes: ['us-1'] } }),
      403,
      'forbidden',
    );
  });

  it('never mints above the minter’s role', async () => {
    const admin = await mintToken(api, tenant, { role: 'admin', as: owner });
    expectError(await api.call('POST', tokensPath, { token: admin, body: { name: 'up', role: 'owner' } }), 403, 'forbidden');
    expect((await api.call('POST', tokensPath, { token: admin, body: { name: 'same', role: 'admin' } })).status).toBe(201);
    const member = await mintToken(api, tenant, { role: 'member', as: owner });
    expectError(await api.call('POST', tokensPath, { token: member, body: { name: 'down', role: 'viewer' } }), 403, 'forbidden');
  });

  it('keeps a token of one project out of a sibling project', async () => {
    const sibling = await api.call('POST', `/orgs/${tenant.org.slug}/projects`, { token: owner, body: { name: 'S', slug: 'sibling' } });
    expect(sibling.status).toBe(201);
    const projectToken = await mintToken(api, tenant, { role: 'admin', as: owner });
    expectError(await api.call('GET', `/orgs/${tenant.org.slug}/projects/sibling/tokens`, { token: projectToken }), 404, 'not_found');
    expectError(await api.call('GET', `/${tenant.org.slug}/sibling/envs`, { token: projectToken }), 404, 'not_found');
  });

  describe('revocation follows the minting rules', () => {
    type Minted = { id: string; token: string };
    const mint = async (as: string, body: Record<string, unknown>): Promise<Minted> => {
      const response = await api.call('POST', tokensPath, { token: as, body: { name: 'revocable', role: 'viewer', ...body } });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      return response.body;
    };
    const revoke = (as: string, id: string) => api.call('DELETE', `${tokensPath}/${id}`, { token: as });
    /** Refused with 403, and the target still authenticates. */
    const expectRefused = async (as: string, target: Minted) => {
      expectError(await revoke(as, target.id), 403, 'forbidden');
      expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: target.token })).status).toBe(200);
    };
    const expectRevoked = async (as: string, target: Minted) => {
      expect((await revoke(as, target.id)).body).toEqual({ revoked: true, id: target.id });
      expectError(await api.call('GET', `/orgs/${tenant.org.slug}`, { token: target.token }), 401, 'unauthorized');
    };

    it('a token never revokes a higher role', async () => {
      const admin = (await mint(owner, { role: 'admin' })).token;
      await expectRefused(admin, await mint(owner, { role: 'owner' }));
      for (const role of ['admin', 'member', 'viewer']) await expectRevoked(admin, await mint(owner, { role }));
      // an owner revokes an owner
      await expectRevoked(owner, await mint(owner, { role: 'owner' }));
    });

    it('a pinned token revokes only tokens pinned to its environment', async () => {
      const pinned = (await mint(owner, { role: 'admin', envName: 'staging' })).token;
      await expectRefused(pinned, await mint(owner, { role: 'viewer' }));
      await expectRefused(pinned, await mint(owner, { role: 'viewer', envName: 'default' }));
      await expectRevoked(pinned, await mint(owner, { role: 'viewer', envName: 'staging' }));
      // an unpinned token revokes pinned ones
      const unpinned = (await mint(owner, { role: 'admin' })).token;
      await expectRevoked(unpinned, await mint(owner, { role: 'viewer', envName: 'staging' }));
      await expectRevoked(unpinned, await mint(owner, { role: 'viewer', envName: 'default' }));
    });

    it('a cell-scoped token revokes only tokens within its cells', async () => {
      const scoped = (await mint(owner, { role: 'admin', cellScopes: ['eu-1', 'eu-2'] })).token;
      await expectRefused(scoped, await mint(owner, { role: 'viewer' }));
      await expectRefused(scoped, await mint(owner, { role: 'viewer', cellScopes: ['eu-1', 'us-1'] }));
      await expectRefused(scoped, await mint(owner, { role: 'viewer', cellScopes: ['us-1'] }));
      await expectRevoked(scoped, await mint(owner, { role: 'viewer', cellScopes: ['eu-1'] }));
      await expectRevoked(scoped, await mint(owner, { role: 'viewer', cellScopes: ['eu-2', 'eu-1'] }));
      // an unscoped token revokes scoped ones
      const unscoped = (await mint(owner, { role: 'admin' })).token;
      await expectRevoked(unscoped, await mint(owner, { role: 'viewer', cellScopes: ['us-1'] }));
    });

    it('every rule holds at once: pinned and scoped, the role decides last', async () => {
      const narrow = (await mint(owner, { role: 'admin', envName: 'staging', cellScopes: ['eu-1'] })).token;
      await expectRefused(narrow, await mint(owner, { role: 'viewer', envName: 'staging' }));
      await expectRefused(narrow, await mint(owner, { role: 'viewer', cellScopes: ['eu-1'] }));
      await expectRefused(narrow, await mint(owner, { role: 'owner', envName: 'staging', cellScopes: ['eu-1'] }));
      // what it mints itself, it may revoke
      await expectRevoked(narrow, await mint(narrow, { role: 'admin' }));
      await expectRevoked(narrow, await mint(owner, { role: 'member', envName: 'staging', cellScopes: ['eu-1'] }));
    });

    it('a token may revoke itself', async () => {
      const self = await mint(owner, { role: 'admin', envName: 'staging', cellScopes: ['eu-1'] });
      await expectRevoked(self.token, self);
    });

    it('an unknown or revoked token is 404 before any rule, for every caller', async () => {
      const pinned = (await mint(owner, { role: 'admin', envName: 'staging' })).token;
      expectError(await revoke(pinned, crypto.randomUUID()), 404, 'not_found');
      const gone = await mint(owner, { role: 'owner' });
      await expectRevoked(owner, gone);
      expectError(await revoke(pinned, gone.id), 404, 'not_found');
    });

    it('the list shows only the tokens the caller could have minted', async () => {
      const made = {
        owner: await mint(owner, { role: 'owner', name: 'list-owner' }),
        viewer: await mint(owner, { role: 'viewer', name: 'list-viewer' }),
        staging: await mint(owner, { role: 'viewer', envName: 'staging', name: 'list-staging' }),
        stagingAdmin: await mint(owner, { role: 'admin', envName: 'staging', name: 'list-staging-admin' }),
        defaultPin: await mint(owner, { role: 'viewer', envName: 'default', name: 'list-default' }),
        eu1: await mint(owner, { role: 'viewer', cellScopes: ['eu-1'], name: 'list-eu-1' }),
        eu1Staging: await mint(owner, { role: 'viewer', envName: 'staging', cellScopes: ['eu-1'], name: 'list-eu-1-staging' }),
        us1: await mint(owner, { role: 'viewer', cellScopes: ['us-1'], name: 'list-us-1' }),
      };
      const listed = async (as: string) => {
        const response = await api.call('GET', tokensPath, { token: as });
        expect(response.status).toBe(200);
        const ids = new Set(response.body.map((t: { id: string }) => t.id));
        return Object.entries(made)
          .filter(([, token]) => ids.has(token.id))
          .map(([key]) => key)
          .sort();
      };
      expect(await listed(owner)).toEqual(Object.keys(made).sort());
      expect(await listed((await mint(owner, { role: 'admin' })).token)).toEqual(
        ['defaultPin', 'eu1', 'eu1Staging', 'staging', 'stagingAdmin', 'us1', 'viewer'].sort(),
      );
      // the pinned admin sees its own environment's tokens only, itself among them
      expect(await listed(made.stagingAdmin.token)).toEqual(['eu1Staging', 'staging', 'stagingAdmin']);
      expect(await listed((await mint(owner, { role: 'admin', cellScopes: ['eu-1', 'eu-2'] })).token)).toEqual(['eu1', 'eu1Staging']);
    });
  });

  it('in bootstrap mode, before any token exists, revoking finds nothing; after the first mint it needs a token', async () => {
    const fresh = await createTestApi();
    try {
      const t = await createTenant(fresh);
      const path = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      expectError(await fresh.call('DELETE', `${path}/${crypto.randomUUID()}`), 404, 'not_found');
      const first = await fresh.call('POST', path, { body: { name: 'root', role: 'owner' } });
      expect(first.status).toBe(201);
      expectError(await fresh.call('DELETE', `${path}/${first.body.id}`), 401, 'unauthorized');
      expect((await fresh.call('GET', `/orgs/${t.org.slug}`, { token: first.body.token })).status).toBe(200);
    } finally {
      await fresh.close();
    }
  });

  it('never logs a raw token', async () => {
    const { token } = (await api.call('POST', tokensPath, { token: owner, body: { name: 'quiet' } })).body;
    await api.call('GET', `/orgs/${tenant.org.slug}`, { token });
    expect(api.logs.join('\n')).not.toContain(token);
    expect(api.logs.join('\n')).not.toContain(owner);
  });
});
