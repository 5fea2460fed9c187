import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, createTenantWithRival, expectError, mintToken, seedToken, type Tenant } from '../support/fixtures';
import { createTestApi, TEST_SECRETS, type TestApi } from '../support/node-app';
import { assertNoSecretsIn } from '../support/secret-scan';

/**
 * Issue 10, fault 2: a statement that fails with a literal credential among
 * its parameters must log its shape, never its parameters. The edge refuses
 * the inputs that used to make statements fail (NUL, lone surrogates), so the
 * failures here are made real another way: probe constraints and a raising
 * trigger added to this test's own database make the real routes' real
 * statements fail, with the credentials in their parameters.
 */

const REFUSED = 'refused-by-probe';
const RAISED = 'raised-by-probe';

const LITERALS = {
  bearer: { type: 'bearer', token: 'bearer-literal-5b0f9e' },
  basic: { type: 'basic', username: 'deployer', password: 'hunter2-literal-3a7c' },
  header: { type: 'header', name: 'X-Api-Key', value: 'header-literal-81d2c4' },
  jwt: { type: 'jwt', secret: 'jwt-signing-literal-0e6a77' },
} as const;
const literalOf = (auth: Record<string, string>) => auth.token ?? auth.password ?? auth.value ?? auth.secret!;

describe('secret leaks: failed statements with literal credentials in their parameters', () => {
  let api: TestApi;
  let tenant: Tenant;
  let admin: string;
  let proj: string;

  beforeAll(async () => {
    api = await createTestApi();
    ({ tenant, tokens: { admin } } = await createTenantWithRival(api));
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    const type = await api.call('POST', `${proj}/entity-types`, {
      token: admin,
      body: { kind: 'EntityType', name: 'vm', states: ['running', 'failed'], initialState: 'running', properties: [] },
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    const entity = await api.call('POST', `${proj}/envs/default/entities`, { token: admin, body: { kind: 'Entity', entityType: 'vm', name: 'vm-1' } });
    expect(entity.status, JSON.stringify(entity.body)).toBe(201);
    // the probes: real statements of real routes fail on them, as an unexpected database error would
    await api.db.execute(sql.raw(`alter table actions add constraint secret_scan_probe check (display_name is distinct from '${REFUSED}') not valid`));
    await api.db.execute(sql.raw(`alter table action_runs add constraint secret_scan_run_probe check (parameters->>'size' is distinct from '${REFUSED}') not valid`));
    await api.db.execute(
      sql.raw(`create function secret_scan_raise() returns trigger language plpgsql as $$
        begin
          if new.display_name = '${RAISED}' then raise exception 'refused trigger %', new.trigger; end if;
          return new;
        end $$`),
    );
    await api.db.execute(sql.raw('create trigger secret_scan_raise before insert on actions for each row execute function secret_scan_raise()'));
  });

  afterAll(async () => {
    // the secret scan runs here too: every literal below was registered from the requests that sent it
    await api?.close();
  });

  /** The one error line of the request behind `response`, which must be an opaque 500. */
  const errorLineOf = (response: { status: number; body: any; headers: Headers }) => {
    expectError(response, 500, 'internal');
    const requestId = response.headers.get('x-request-id');
    expect(requestId).toBeTruthy();
    const lines = api.logs.filter((line) => line.includes(requestId!) && line.includes('"level":"error"'));
    expect(lines).toHaveLength(1);
    return { line: lines[0]!, record: JSON.parse(lines[0]!) };
  };

  const createAction = (name: string, auth: Record<string, string>, displayName = REFUSED, type = 'webhook') =>
    api.call('POST', `${proj}/actions`, {
      token: admin,
      body: {
        kind: 'Action',
        name,
        displayName,
        entityType: 'vm',
        parameters: [{ name: 'size', type: 'string', default: 'small' }],
        trigger:
          type === 'webhook'
            ? { type: 'webhook', url: 'https://hooks.example.com/deploy', auth }
            : { type: 'pull-request', repo: 'acme/infra', title: 't', files: [{ path: 'a.tf', content: 'x' }], auth },
      },
    });

  it.each(Object.entries(LITERALS))('a failed insert of an action with a literal %s credential logs the statement, not the credential', async (kind, auth) => {
    const { line, record } = errorLineOf(await createAction(`probe-${kind}`, auth));
    expect(line).not.toContain(literalOf(auth));
    expect(line).not.toMatch(/params|Failing row|"detail"/);
    expect(record.error).toMatchObject({
      name: 'DrizzleQueryError',
      statement: expect.stringMatching(/^insert into "actions" .*values \(default, \$1, \$2/),
      cause: { code: '23514', constraint: 'secret_scan_probe', table: 'actions' },
    });
    expect(api.secretScan.findings()).toEqual([]);
  });

  it('a pull request token: the same', async () => {
    const { line } = errorLineOf(await createAction('probe-pr', { token: 'pr-token-literal-77e1a0' }, REFUSED, 'pull-request'));
    expect(line).not.toContain('pr-token-literal-77e1a0');
    expect(api.secretScan.findings()).toEqual([]);
  });

  it('a database function that quotes the credential in its message: the message is masked', async () => {
    const { line, record } = errorLineOf(await createAction('probe-raise', LITERALS.basic, RAISED));
    expect(line).not.toContain(LITERALS.basic.password);
    expect(record.error.cause).toMatchObject({ code: 'P0001', message: 'refused trigger {"[value]"}' });
  });

  it('a failed insert of a run (its trigger snapshot holds the literal) logs the statement, not the credential', async () => {
    const created = await createAction('probe-run', LITERALS.basic, 'runs fine');
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const { line, record } = errorLineOf(
      await api.call('POST', `${proj}/envs/default/entities/vm-1/actions/probe-run`, { token: admin, body: { parameters: { size: REFUSED } } }),
    );
    expect(line).not.toContain(LITERALS.basic.password);
    expect(record.error.cause).toMatchObject({ code: '23514', constraint: 'secret_scan_run_probe' });
  });

  it('the reproduction of the issue (a NUL in a display name, then in a trigger parameter) leaks nothing, whatever the status', async () => {
    await createAction('probe-nul', LITERALS.basic, 'a\u0000b');
    await api.call('POST', `${proj}/envs/default/entities/vm-1/actions/probe-run`, { token: admin, body: { parameters: { size: 'a\u0000b' } } });
    const everything = api.logs.join('\n');
    for (const auth of Object.values(LITERALS)) expect(everything).not.toContain(literalOf(auth));
    expect(api.secretScan.findings()).toEqual([]);
    // the scan saw this suite's traffic: its tokens, its literals, the server's keys
    expect(api.secretScan.stats().secrets).toBeGreaterThanOrEqual(Object.keys(LITERALS).length + 4);
  });
});

/** The scan itself: each kind of leak it exists for makes `close()` fail, naming the secret but not printing it. */
describe('the secret scan bites', () => {
  const leak = async (arrange: (api: TestApi) => Promise<void>) => {
    const api = await createTestApi();
    await arrange(api);
    const failure = await api.close().then(
      () => undefined,
      (error: Error) => error,
    );
    expect(failure, 'close() should have failed').toBeInstanceOf(Error);
    return failure!.message;
  };

  it('every kind of leak fails close(): a token, a literal credential, its Basic header, a secret value, a token or JWT by shape, a server key', async () => {
    let token = '';
    let seeded = '';
    const value = 'secret-value-in-a-name-4f2b';
    const message = await leak(async (api) => {
      const tenant = await createTenant(api);
      token = await mintToken(api, tenant, { role: 'owner' });
      const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
      await api.call('POST', `${proj}/entity-types`, { token, body: { kind: 'EntityType', name: 'vm', states: ['a'], initialState: 'a' } });
      const created = await api.call('POST', `${proj}/actions`, {
        token,
        body: { kind: 'Action', name: 'a', entityType: 'vm', trigger: { type: 'webhook', url: 'https://hooks.example.com/x', auth: LITERALS.basic } },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const put = await api.call('PUT', `${proj}/envs/default/secrets/deploy-key`, { token, body: { value } });
      expect(put.status, JSON.stringify(put.body)).toBeLessThan(300);
      // a token that never went through a mint response: known from the request that sent it
      seeded = await seedToken(api, tenant, 'viewer');
      expect((await api.call('GET', `${proj}/envs`, { token: seeded })).status).toBe(200);
      // the leaks: lines a careless log call would write, and a response that echoes a secret's value
      api.platform.logger.info('careless', { note: `minted ${token}` });
      api.platform.logger.info('careless', { note: `seeded ${seeded}` });
      api.platform.logger.warn('careless', { sent: `credentials ${LITERALS.basic.password}` });
      api.platform.logger.warn('careless', { sent: `Basic ${Buffer.from(`deployer:${LITERALS.basic.password}`).toString('base64')}` });
      await api.call('POST', `${proj}/envs`, { token, body: { name: value } });
      api.platform.logger.info('careless', { note: `cpl_${'a'.repeat(36)}` });
      api.platform.logger.info('careless', { note: 'eyJhbGciOiJIUzI1NiJ9.eyJydW5JZCI6InIxIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ' });
      // the logger scrubs its own configured secrets, so this one is written past it, as a stray console line would be
      api.logs.push(`boot ${TEST_SECRETS.AUTH_SECRET}`);
    });
    expect(message).toContain('8 secret(s) leaked');
    expect(message).toMatch(/- a bearer token a test sent in log line \d+: .*seeded \[SECRET\]/);
    expect(message).toMatch(/- a token minted by POST \/orgs\/.*\/tokens in log line \d+: .*minted \[SECRET\]/);
    expect(message).toMatch(/- the basic password of an action's trigger.auth .* in log line/);
    expect(message).toMatch(/- the Basic credentials of an action's trigger.auth .* in log line/);
    expect(message).toMatch(/- the value PUT to .*\/secrets\/deploy-key in the response to POST \/.*\/envs/);
    expect(message).toMatch(/- a full service token in log line/);
    expect(message).toMatch(/- a JWT in log line/);
    expect(message).toMatch(/- AUTH_SECRET in log line/);
    for (const secret of [token, seeded, LITERALS.basic.password, value, TEST_SECRETS.AUTH_SECRET]) expect(message).not.toContain(secret);
  });

  it('traffic over listen(): a token minted over HTTP, then logged', async () => {
    const message = await leak(async (api) => {
      const tenant = await createTenant(api);
      const url = await api.listen();
      const response = await fetch(`${url}/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'over-http', role: 'owner' }),
      });
      expect(response.status).toBe(201);
      const { token } = (await response.json()) as { token: string };
      api.platform.logger.info('careless', { note: `minted ${token}` });
    });
    // named by where it was minted, not only by its shape: the response over HTTP was seen
    expect(message).toMatch(/1 secret\(s\) leaked\n- a token minted by POST .*\/tokens in log line/);
  });

  it('a server process printing a configured secret or its database password', () => {
    const env = { ...TEST_SECRETS, DATABASE_URL: 'postgres://cellplane:db-pa55word-x9@127.0.0.1:5432/cellplane' };
    expect(() => assertNoSecretsIn('{"msg":"cellplane listening"}\n', env, 'server output')).not.toThrow();
    expect(() => assertNoSecretsIn(`key ${TEST_SECRETS.ENCRYPTION_KEY}`, env, 'server output')).toThrow(/ENCRYPTION_KEY in server output/);
    expect(() => assertNoSecretsIn('connecting as db-pa55word-x9', env, 'server output')).toThrow(/the password of DATABASE_URL in server output/);
  });
});
