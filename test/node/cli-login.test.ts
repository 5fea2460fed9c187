import { existsSync, readFileSync, statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createCliHome, runCli, type CliHome } from '../support/cli';
import { mintToken } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { createUserTenant, signUp, TEST_PASSWORD, type TestUser } from '../support/people';

/**
 * `cellplane login` and `logout` against a real server: a service token is
 * checked against its organization before it is stored; email and password
 * sign in through /api/auth and store the session's Bearer value; logout
 * removes the token (and ends a session on the server). Nothing is stored
 * when the check fails.
 */

describe('cellplane login', () => {
  let api: TestApi;
  let url: string;
  let alice: TestUser;
  let tenant: { org: { slug: string }; project: { slug: string } };
  let serviceToken: string;

  beforeAll(async () => {
    api = await createTestApi();
    url = await api.listen();
    alice = await signUp(api, { name: 'Alice' });
    tenant = await createUserTenant(api, alice);
    serviceToken = await mintToken(api, tenant as never, { role: 'member', as: alice.token });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    const type = await api.call('POST', `${proj}/entity-types`, { token: alice.token, body: { kind: 'EntityType', name: 'vm', states: ['up'], initialState: 'up' } });
    expect(type.status).toBe(201);
    const entity = await api.call('POST', `${proj}/envs/default/entities`, { token: alice.token, body: { kind: 'Entity', entityType: 'vm', name: 'web-1' } });
    expect(entity.status).toBe(201);
  });

  afterAll(async () => {
    await api.close();
  });

  const stored = (home: CliHome) => parse(readFileSync(home.configPath, 'utf8')) as Record<string, string>;

  it('--token: checked against the organization, stored with --base-url, --org and --project; logout removes it', async () => {
    const home = createCliHome();
    try {
      const login = await runCli(['login', '--base-url', `${url}/`, '--org', tenant.org.slug, '--project', tenant.project.slug, '--token', serviceToken], { home });
      expect(login).toEqual({
        code: 0,
        stdout: '',
        stderr: `logged in as a token of ${tenant.org.slug}; stored token, baseUrl, currentOrg, currentProject in ${home.configPath}\n`,
      });
      expect(stored(home)).toEqual({ token: serviceToken, baseUrl: url, currentOrg: tenant.org.slug, currentProject: tenant.project.slug });
      expect(statSync(home.configPath).mode & 0o777).toBe(0o600);

      // from now on no flags are needed
      const listed = await runCli(['entities', 'list', '--json'], { home });
      expect(listed.code, listed.stderr).toBe(0);
      expect((JSON.parse(listed.stdout) as { name: string }[]).map((entity) => entity.name)).toEqual(['web-1']);

      const logout = await runCli(['logout'], { home });
      expect(logout).toEqual({ code: 0, stdout: '', stderr: `token removed from ${home.configPath}\n` });
      expect(stored(home)).toEqual({ baseUrl: url, currentOrg: tenant.org.slug, currentProject: tenant.project.slug });
      // a service token stays valid on the server: logout only forgets it
      expect((await api.call('GET', `/orgs/${tenant.org.slug}`, { token: serviceToken })).status).toBe(200);

      const refused = await runCli(['entities', 'list'], { home });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/\(401 unauthorized\)\nhint: check the token: pass --token, set SERVICE_TOKEN, or run `cellplane login`\n$/);

      // SERVICE_TOKEN is taken as well
      const fromEnv = await runCli(['login'], { home, env: { SERVICE_TOKEN: serviceToken } });
      expect(fromEnv.code, fromEnv.stderr).toBe(0);
      expect(stored(home).token).toBe(serviceToken);
    } finally {
      home.remove();
    }
  });

  it('a token the server refuses, or that cannot be checked, is not stored', async () => {
    const home = createCliHome();
    try {
      const [bad, noOrg, noToken, noServer] = await Promise.all([
        runCli(['login', '--base-url', url, '--org', tenant.org.slug, '--token', 'cpl_000000000000000000000000000000000000'], { home }),
        runCli(['login', '--base-url', url, '--token', serviceToken], { home }),
        runCli(['login', '--base-url', url, '--org', tenant.org.slug], { home }),
        runCli(['login', '--org', tenant.org.slug, '--token', serviceToken], { home }),
      ]);
      expect(bad).toEqual({
        code: 1,
        stdout: '',
        stderr:
          `error: the server refused the token for organization ${tenant.org.slug} (401 unauthorized); nothing was stored\n` +
          'hint: check the token and --org (a service token belongs to one organization), or mint a new one with `cellplane tokens create`\n',
      });
      expect(noOrg).toEqual({
        code: 2,
        stdout: '',
        stderr: 'error: a service token is checked against its organization: pass --org <slug> (stored with the token), or set currentOrg first\n',
      });
      expect(noToken).toEqual({
        code: 2,
        stdout: '',
        stderr: 'error: no token given: pass --token <token> or set SERVICE_TOKEN (or run login on a terminal to be asked), or sign in with --email\n',
      });
      expect(noServer.code).toBe(2);
      expect(noServer.stderr).toMatch(/^error: no API address given: pass --base-url <url>/);
      expect(existsSync(home.configPath)).toBe(false);
      for (const result of [bad, noOrg, noToken, noServer]) expect(result.stderr).not.toContain(serviceToken);
    } finally {
      home.remove();
    }
  });

  it('--email signs in (password from SERVICE_PASSWORD or --password) and stores the session; logout ends the session', async () => {
    const home = createCliHome();
    try {
      const login = await runCli(['login', '--base-url', url, '--email', alice.email], { home, env: { SERVICE_PASSWORD: TEST_PASSWORD } });
      expect(login.code, login.stderr).toBe(0);
      expect(login.stderr).toBe(
        `organizations: ${tenant.org.slug} (owner); choose one with \`cellplane config set currentOrg <slug>\`\n` +
          `logged in as ${alice.email} (session); stored token, baseUrl in ${home.configPath}\n`,
      );
      expect(login.stderr).not.toContain(TEST_PASSWORD);
      const session = stored(home).token!;
      expect(session).toBeTruthy();
      expect(session).not.toBe(alice.token);

      const orgs = await runCli(['orgs', 'list', '--json'], { home });
      expect(orgs.code, orgs.stderr).toBe(0);
      expect(orgs.stdout).toBe(`${JSON.stringify((await api.call('GET', '/orgs', { token: session })).body, null, 2)}\n`);

      const created = await runCli(['orgs', 'create', 'alices-second', '--name', 'Second'], { home });
      expect(created).toEqual({
        code: 0,
        stdout: 'created organization alices-second\n',
        stderr: 'make it the current one: cellplane config set currentOrg alices-second\n',
      });
      const table = await runCli(['orgs', 'list'], { home });
      expect(table.stdout).toMatch(/^SLUG +NAME +ROLE +CREATED\n/);
      expect(table.stdout).toMatch(/^alices-second +Second +owner +\S+$/m);

      const logout = await runCli(['logout'], { home });
      expect(logout).toEqual({ code: 0, stdout: '', stderr: `token removed from ${home.configPath}\n` });
      expect((await api.call('GET', '/orgs', { token: session })).status).toBe(401);
      expect((await api.call('GET', '/orgs', { token: alice.token })).status).toBe(200);

      const byFlag = await runCli(['login', '--base-url', url, '--email', alice.email, '--password', TEST_PASSWORD, '--json'], { home });
      expect(byFlag.code, byFlag.stderr).toBe(0);
      expect(JSON.parse(byFlag.stdout)).toEqual({ loggedIn: true, as: `${alice.email} (session)`, stored: ['token', 'baseUrl'], configPath: home.configPath });
    } finally {
      home.remove();
    }
  });

  it('a wrong password is exit 1, a missing one (no terminal to ask on) exit 2; nothing is stored', async () => {
    const home = createCliHome();
    try {
      const [wrong, missing] = await Promise.all([
        runCli(['login', '--base-url', url, '--email', alice.email], { home, env: { SERVICE_PASSWORD: 'not the password' } }),
        runCli(['login', '--base-url', url, '--email', alice.email], { home }),
      ]);
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toMatch(new RegExp(`^error: sign-in refused for ${alice.email.replace(/[.]/g, '\\.')}: .+\\nhint: check the address and the password`));
      expect(wrong.stderr).not.toContain('not the password');
      expect(missing).toEqual({ code: 2, stdout: '', stderr: 'error: no password given: set SERVICE_PASSWORD (or run login on a terminal to be asked)\n' });
      expect(existsSync(home.configPath)).toBe(false);
    } finally {
      home.remove();
    }
  });
});
