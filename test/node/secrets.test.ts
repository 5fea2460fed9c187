import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SealedSecretError } from '../../src/auth/crypto';
import { environments, environmentSecrets } from '../../src/db/schema';
import { resolveSecrets } from '../../src/modules/secrets/service';
import { Secret } from '../../src/secret';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';

/** Every plaintext this suite sends: none may appear in a response, a log line or a column. */
const usedValues: string[] = [];
const value = (label: string) => {
  const v = `plaintext-${label}-${Math.random().toString(36).slice(2)}-Zq9`;
  usedValues.push(v);
  return v;
};

describe('environment secrets', () => {
  const clock = manualClock();
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  let owner: string;
  let otherOwner: string;
  let base: string;
  const responses: unknown[] = [];

  const call = async (method: string, path: string, options: { token?: string; body?: unknown; rawBody?: string } = {}) => {
    const response = await api.call(method, path, { token: owner, ...options });
    responses.push(response.body);
    return response;
  };
  const envId = async (t: Tenant, name: string) => {
    const [row] = await api.db
      .select({ id: environments.id })
      .from(environments)
      .where(and(eq(environments.projectId, t.project.id), eq(environments.name, name)));
    return row!.id;
  };

  beforeAll(async () => {
    api = await createTestApi({ clock });
    tenant = await createTenant(api);
    other = await createTenant(api, { project: tenant.project.slug });
    await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: 'staging' } });
    // the first mint closes bootstrap mode: this tenant's owner is seeded
    otherOwner = await mintToken(api, other, { role: 'owner' });
    owner = await seedToken(api, tenant, 'owner');
    base = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
  });
  afterAll(() => api.close());

  it('creates with 201, replaces with 200, and lists names only, by name', async () => {
    const first = value('create');
    const created = await call('PUT', `${base}/default/secrets/zeta`, { body: { value: first } });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ name: 'zeta', createdAt: clock.now().toISOString(), updatedAt: clock.now().toISOString() });
    const createdAt = created.body.createdAt;

    clock.advance(60_000);
    const replaced = await call('PUT', `${base}/default/secrets/zeta`, { body: { value: value('replace') } });
    expect(replaced.status).toBe(200);
    expect(replaced.body).toEqual({ name: 'zeta', createdAt, updatedAt: clock.now().toISOString() });

    expect((await call('PUT', `${base}/default/secrets/alpha`, { body: { value: value('alpha') } })).status).toBe(201);
    const listed = await call('GET', `${base}/default/secrets`);
    expect(listed.status).toBe(200);
    expect(listed.body.map((s: { name: string }) => s.name)).toEqual(['alpha', 'zeta']);
    for (const row of listed.body) expect(Object.keys(row).sort()).toEqual(['createdAt', 'name', 'updatedAt']);
  });

  it('deletes, then answers 404 for the absent secret', async () => {
    await call('PUT', `${base}/default/secrets/doomed`, { body: { value: value('doomed') } });
    const deleted = await call('DELETE', `${base}/default/secrets/doomed`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ deleted: true, name: 'doomed' });
    expectError(await call('DELETE', `${base}/default/secrets/doomed`), 404, 'not_found');
    const listed = await call('GET', `${base}/default/secrets`);
    expect(listed.body.map((s: { name: string }) => s.name)).not.toContain('doomed');
  });

  it('answers 404 for an unknown environment, project or organization', async () => {
    expectError(await call('GET', `${base}/nope/secrets`), 404, 'not_found');
    expectError(await call('PUT', `${base}/nope/secrets/x`, { body: { value: value('noenv') } }), 404, 'not_found');
    expectError(await call('GET', `/${tenant.org.slug}/nope/envs/default/secrets`), 404, 'not_found');
    // another organization's owner addressing this tenant
    expectError(await call('GET', `${base}/default/secrets`, { token: otherOwner }), 404, 'not_found');
  });

  it('keeps each environment (and each tenant) to its own secrets', async () => {
    await call('PUT', `${base}/staging/secrets/only-staging`, { body: { value: value('staging') } });
    const defaults = await call('GET', `${base}/default/secrets`);
    expect(defaults.body.map((s: { name: string }) => s.name)).not.toContain('only-staging');
    expectError(await call('DELETE', `${base}/default/secrets/only-staging`), 404, 'not_found');
    const staging = await call('GET', `${base}/staging/secrets`);
    expect(staging.body.map((s: { name: string }) => s.name)).toEqual(['only-staging']);

    const otherBase = `/${other.org.slug}/${other.project.slug}/envs`;
    const otherList = await call('GET', `${otherBase}/default/secrets`, { token: otherOwner });
    expect(otherList.status).toBe(200);
    expect(otherList.body).toEqual([]);
  });

  it('needs tokens:manage: viewer and member get 403, admin may', async () => {
    for (const role of ['viewer', 'member'] as const) {
      const token = await mintToken(api, tenant, { role, as: owner });
      expectError(await call('GET', `${base}/default/secrets`, { token }), 403, 'forbidden');
      expectError(await call('PUT', `${base}/default/secrets/x`, { token, body: { value: value(role) } }), 403, 'forbidden');
      expectError(await call('DELETE', `${base}/default/secrets/zeta`, { token }), 403, 'forbidden');
    }
    const admin = await mintToken(api, tenant, { role: 'admin', as: owner });
    expect((await call('PUT', `${base}/default/secrets/by-admin`, { token: admin, body: { value: value('admin') } })).status).toBe(201);
  });

  it('refuses a token pinned to another environment with 403, and serves its own', async () => {
    const pinned = await mintToken(api, tenant, { role: 'admin', envName: 'staging', as: owner });
    expectError(await call('GET', `${base}/default/secrets`, { token: pinned }), 403, 'forbidden');
    expectError(await call('PUT', `${base}/default/secrets/x`, { token: pinned, body: { value: value('pinned') } }), 403, 'forbidden');
    expectError(await call('DELETE', `${base}/default/secrets/zeta`, { token: pinned }), 403, 'forbidden');
    expect((await call('GET', `${base}/staging/secrets`, { token: pinned })).status).toBe(200);
  });

  it('answers 400 for a bad body or name, without echoing the value', async () => {
    const tooLong = `${value('long')}${'x'.repeat(65536)}`;
    const cases: { path?: string; body?: unknown; rawBody?: string }[] = [
      { body: {} },
      { body: { value: '' } },
      { body: { value: tooLong } },
      { body: { value: 12345 } },
      { body: { value: value('extra'), extra: value('extra-field') } },
      { body: value('bare-string') },
      { rawBody: `{"value": "${value('broken-json')}` },
      { path: `${base}/default/secrets/-bad`, body: { value: value('bad-name') } },
      { path: `${base}/default/secrets/${'n'.repeat(129)}`, body: { value: value('long-name') } },
    ];
    for (const c of cases) {
      const response = await call('PUT', c.path ?? `${base}/default/secrets/ok`, { body: c.body, rawBody: c.rawBody });
      expect(response.status, JSON.stringify(response.body).slice(0, 200)).toBe(400);
      expect(['validation_failed', 'invalid_json']).toContain(response.body.code);
    }
    // exactly at the limit is fine
    const atLimit = `${value('at-limit')}`.padEnd(65536, 'y');
    usedValues.push(atLimit);
    expect((await call('PUT', `${base}/default/secrets/at-limit`, { body: { value: atLimit } })).status).toBe(201);
    expectError(await call('DELETE', `${base}/default/secrets/-bad`), 400, 'validation_failed');
  });

  it('stores only the sealed form', async () => {
    const plain = value('at-rest');
    await call('PUT', `${base}/default/secrets/at-rest`, { body: { value: plain } });
    const rows = await api.db.execute(sql`select row_to_json(t)::text as j from environment_secrets t`);
    const dump = JSON.stringify(rows);
    expect(dump).toContain('at-rest');
    for (const v of usedValues) expect(dump).not.toContain(v);
  });

  describe('resolveSecrets (the run engine)', () => {
    const key = () => api.platform.config.encryptionKey;

    it('returns the plaintexts of the names that exist, and omits the rest', async () => {
      const plain = value('resolve');
      await call('PUT', `${base}/staging/secrets/api-key`, { body: { value: plain } });
      const env = { orgId: tenant.org.id, projectId: tenant.project.id, envId: await envId(tenant, 'staging') };
      const resolved = await resolveSecrets(api.db, key(), env, ['api-key', 'missing', 'api-key']);
      expect([...resolved]).toEqual([['api-key', plain]]);
      expect((await resolveSecrets(api.db, key(), env, [])).size).toBe(0);
    });

    it('resolves per environment: one name, two values', async () => {
      const inDefault = value('per-env-default');
      const inStaging = value('per-env-staging');
      await call('PUT', `${base}/default/secrets/webhook`, { body: { value: inDefault } });
      await call('PUT', `${base}/staging/secrets/webhook`, { body: { value: inStaging } });
      const at = async (name: string) =>
        (await resolveSecrets(api.db, key(), { orgId: tenant.org.id, projectId: tenant.project.id, envId: await envId(tenant, name) }, ['webhook'])).get('webhook');
      expect(await at('default')).toBe(inDefault);
      expect(await at('staging')).toBe(inStaging);
    });

    it('does not resolve another tenant environment through a mismatched org/project', async () => {
      const env = { orgId: other.org.id, projectId: other.project.id, envId: await envId(tenant, 'staging') };
      expect((await resolveSecrets(api.db, key(), env, ['api-key'])).size).toBe(0);
    });

    it('fails loudly, without the value, when a sealed value was copied from another environment', async () => {
      const plain = value('copied');
      await call('PUT', `${base}/default/secrets/copied`, { body: { value: plain } });
      await call('PUT', `${base}/staging/secrets/copied`, { body: { value: value('copied-target') } });
      const defaultId = await envId(tenant, 'default');
      const stagingId = await envId(tenant, 'staging');
      const [source] = await api.db
        .select({ sealed: environmentSecrets.sealed })
        .from(environmentSecrets)
        .where(and(eq(environmentSecrets.envId, defaultId), eq(environmentSecrets.name, 'copied')));
      await api.db
        .update(environmentSecrets)
        .set({ sealed: source!.sealed })
        .where(and(eq(environmentSecrets.envId, stagingId), eq(environmentSecrets.name, 'copied')));

      const env = { orgId: tenant.org.id, projectId: tenant.project.id, envId: stagingId };
      const error = await resolveSecrets(api.db, key(), env, ['copied']).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SealedSecretError);
      expect((error as Error).message).toMatch(/secret "copied" of environment .* could not be decrypted/);
      for (const v of usedValues) expect(String(error)).not.toContain(v);
      // the source row still opens where it was sealed
      const original = await resolveSecrets(api.db, key(), { ...env, envId: defaultId }, ['copied']);
      expect(original.get('copied')).toBe(plain);
    });

    it('fails to open under another key', async () => {
      const env = { orgId: tenant.org.id, projectId: tenant.project.id, envId: await envId(tenant, 'staging') };
      const wrong = new Secret('0'.repeat(64));
      await expect(resolveSecrets(api.db, wrong, env, ['api-key'])).rejects.toBeInstanceOf(SealedSecretError);
    });
  });

  it('never shows a value in a response or a log line', () => {
    expect(usedValues.length).toBeGreaterThan(10);
    const everyResponse = JSON.stringify(responses);
    const everyLog = api.logs.join('\n');
    expect(api.logs.length).toBeGreaterThan(0);
    for (const v of usedValues) {
      expect(everyResponse).not.toContain(v);
      expect(everyLog).not.toContain(v);
      // a distinctive fragment too, in case a message truncates
      expect(everyResponse).not.toContain(v.slice(10, 30));
      expect(everyLog).not.toContain(v.slice(10, 30));
    }
  });
});
