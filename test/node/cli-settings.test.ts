import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { createCliHome, runCli, type CliHome } from '../support/cli';
import { createTenant, seedToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * The CLI's settings (SPEC "Client configuration"): for each of baseUrl,
 * token, currentOrg, currentProject and currentEnv, a flag beats the
 * environment variable, which beats the config file, which beats the
 * default — as reported by `config get|list` and as actually used by a
 * request. The config file is 0600 in a 0700 directory.
 *
 * Three tenants, one per level, each with an entity named after its level
 * in an environment named after its level: which entity a listing returns
 * says which org, project, env and token were used. The baseUrl of every
 * losing level points at a closed port, so a wrong winner fails the request.
 */

const DEAD_URL = 'http://127.0.0.1:1';
const mode = (path: string) => statSync(path).mode & 0o777;

describe('cellplane settings', () => {
  let api: TestApi;
  let url: string;
  let home: CliHome;
  const levels = {} as Record<'flag' | 'env' | 'file', { tenant: Tenant; token: string; envName: string }>;

  beforeAll(async () => {
    api = await createTestApi();
    url = await api.listen();
    const tenants = { flag: await createTenant(api), env: await createTenant(api), file: await createTenant(api) };
    for (const level of ['flag', 'env', 'file'] as const) {
      const tenant = tenants[level];
      const envName = `${level}-env`;
      expect((await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name: envName } })).status).toBe(201);
      levels[level] = { tenant, token: '', envName };
    }
    for (const level of ['flag', 'env', 'file'] as const) {
      const { tenant, envName } = levels[level];
      const token = await seedToken(api, tenant, 'owner');
      levels[level].token = token;
      const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
      const type = await api.call('POST', `${proj}/entity-types`, { token, body: { kind: 'EntityType', name: 'vm', states: ['up'], initialState: 'up' } });
      expect(type.status, JSON.stringify(type.body)).toBe(201);
      for (const [env, name] of [[envName, `${level}-vm`], ['default', `${level}-default-vm`]]) {
        const entity = await api.call('POST', `${proj}/envs/${env}/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name } });
        expect(entity.status, JSON.stringify(entity.body)).toBe(201);
      }
    }
  });

  afterAll(async () => {
    await api.close();
  });

  const fresh = () => {
    home?.remove();
    home = createCliHome();
    return home;
  };
  afterAll(() => home?.remove());

  const fileValues = (level: 'file', baseUrl: string, withEnv = true) => ({
    baseUrl,
    token: levels[level].token,
    currentOrg: levels[level].tenant.org.slug,
    currentProject: levels[level].tenant.project.slug,
    ...(withEnv ? { currentEnv: levels[level].envName } : {}),
  });
  const envValues = (baseUrl: string) => ({
    SERVICE_BASE_URL: baseUrl,
    SERVICE_TOKEN: levels.env.token,
    SERVICE_ORG_ID: levels.env.tenant.org.slug,
    SERVICE_PROJECT_ID: levels.env.tenant.project.slug,
    SERVICE_ENV_NAME: levels.env.envName,
  });
  const flagValues = (baseUrl: string) => [
    '--base-url',
    baseUrl,
    '--token',
    levels.flag.token,
    '--org',
    levels.flag.tenant.org.slug,
    '--project',
    levels.flag.tenant.project.slug,
    '--env',
    levels.flag.envName,
  ];
  const writeConfig = (values: Record<string, string>) => {
    mkdirSync(join(home.configHome, 'cellplane'), { recursive: true, mode: 0o700 });
    writeFileSync(home.configPath, stringify(values), { mode: 0o600 });
  };
  const names = (stdout: string) => (JSON.parse(stdout) as { name: string }[]).map((entity) => entity.name);

  it('each of the five settings: a flag beats the variable beats the file beats the default, in what a request uses', async () => {
    fresh();
    writeConfig(fileValues('file', DEAD_URL));
    const byFlag = await runCli([...flagValues(url), 'entities', 'list', '--json'], { home, env: envValues(DEAD_URL) });
    expect(byFlag.stderr).toBe('');
    expect({ code: byFlag.code, names: names(byFlag.stdout) }).toEqual({ code: 0, names: ['flag-vm'] });

    const byEnv = await runCli(['entities', 'list', '--json'], { home, env: envValues(url) });
    expect({ code: byEnv.code, names: names(byEnv.stdout), stderr: byEnv.stderr }).toEqual({ code: 0, names: ['env-vm'], stderr: '' });

    writeConfig(fileValues('file', url));
    const byFile = await runCli(['entities', 'list', '--json'], { home });
    expect({ code: byFile.code, names: names(byFile.stdout), stderr: byFile.stderr }).toEqual({ code: 0, names: ['file-vm'], stderr: '' });

    // no currentEnv anywhere: the default environment, `default`
    writeConfig(fileValues('file', url, false));
    const byDefault = await runCli(['entities', 'list', '--json'], { home });
    expect({ code: byDefault.code, names: names(byDefault.stdout) }).toEqual({ code: 0, names: ['file-default-vm'] });
  });

  it('config list reports the value in effect and its source at each level, the token masked', async () => {
    fresh();
    writeConfig(fileValues('file', DEAD_URL));
    const list = async (args: string[], env: Record<string, string> = {}) => {
      const result = await runCli([...args, 'config', 'list', '--json'], { home, env });
      expect(result.code, result.stderr).toBe(0);
      return Object.fromEntries((JSON.parse(result.stdout) as { key: string; value: string | null; source: string | null }[]).map((row) => [row.key, row]));
    };
    const mask = (token: string) => `****${token.slice(-4)}`;

    const all = await list(flagValues(url), envValues(DEAD_URL));
    expect(all).toEqual({
      baseUrl: { key: 'baseUrl', value: url, source: 'flag --base-url' },
      token: { key: 'token', value: mask(levels.flag.token), source: 'flag --token' },
      currentOrg: { key: 'currentOrg', value: levels.flag.tenant.org.slug, source: 'flag --org' },
      currentProject: { key: 'currentProject', value: levels.flag.tenant.project.slug, source: 'flag --project' },
      currentEnv: { key: 'currentEnv', value: 'flag-env', source: 'flag --env' },
    });

    const fromEnv = await list([], envValues(url));
    expect(fromEnv).toEqual({
      baseUrl: { key: 'baseUrl', value: url, source: 'env SERVICE_BASE_URL' },
      token: { key: 'token', value: mask(levels.env.token), source: 'env SERVICE_TOKEN' },
      currentOrg: { key: 'currentOrg', value: levels.env.tenant.org.slug, source: 'env SERVICE_ORG_ID' },
      currentProject: { key: 'currentProject', value: levels.env.tenant.project.slug, source: 'env SERVICE_PROJECT_ID' },
      currentEnv: { key: 'currentEnv', value: 'env-env', source: 'env SERVICE_ENV_NAME' },
    });

    // an empty variable counts as unset: the file's value shows through
    const fromFile = await list([], { SERVICE_ORG_ID: '' });
    const file = `file ${home.configPath}`;
    expect(fromFile).toEqual({
      baseUrl: { key: 'baseUrl', value: DEAD_URL, source: file },
      token: { key: 'token', value: mask(levels.file.token), source: file },
      currentOrg: { key: 'currentOrg', value: levels.file.tenant.org.slug, source: file },
      currentProject: { key: 'currentProject', value: levels.file.tenant.project.slug, source: file },
      currentEnv: { key: 'currentEnv', value: 'file-env', source: file },
    });

    writeConfig({});
    expect(await list([])).toEqual({
      baseUrl: { key: 'baseUrl', value: null, source: null },
      token: { key: 'token', value: null, source: null },
      currentOrg: { key: 'currentOrg', value: null, source: null },
      currentProject: { key: 'currentProject', value: null, source: null },
      currentEnv: { key: 'currentEnv', value: 'default', source: 'default' },
    });
  });

  it('config get prints the value on stdout and its source on stderr; the token only with --show-secret; unset is exit 1 with a hint', async () => {
    fresh();
    writeConfig({ currentOrg: 'from-file', token: levels.file.token });
    const [org, orgByEnv, token, shown, env, base] = await Promise.all([
      runCli(['config', 'get', 'currentOrg'], { home }),
      runCli(['config', 'get', 'currentOrg'], { home, env: { SERVICE_ORG_ID: 'from-env' } }),
      runCli(['config', 'get', 'token'], { home }),
      runCli(['config', 'get', 'token', '--show-secret'], { home }),
      runCli(['--env', 'staging', 'config', 'get', 'currentEnv'], { home }),
      runCli(['config', 'get', 'baseUrl'], { home }),
    ]);
    expect(org).toEqual({ code: 0, stdout: 'from-file\n', stderr: `from file ${home.configPath}\n` });
    expect(orgByEnv).toEqual({ code: 0, stdout: 'from-env\n', stderr: 'from env SERVICE_ORG_ID\n' });
    expect(token).toEqual({ code: 0, stdout: `****${levels.file.token.slice(-4)}\n`, stderr: `from file ${home.configPath}\n` });
    expect(token.stdout).not.toContain(levels.file.token);
    expect(shown.stdout).toBe(`${levels.file.token}\n`);
    expect(env).toEqual({ code: 0, stdout: 'staging\n', stderr: 'from flag --env\n' });
    expect(base.code).toBe(1);
    expect(base.stdout).toBe('');
    expect(base.stderr).toBe('error: baseUrl is not set\nhint: set it with --base-url, SERVICE_BASE_URL or `cellplane config set baseUrl <value>`\n');

    const defaulted = await runCli(['config', 'get', 'currentEnv'], { home });
    expect(defaulted).toEqual({ code: 0, stdout: 'default\n', stderr: 'from default\n' });
  });

  it('config set creates the file 0600 in a 0700 directory, keeps comments, and makes both owner-only again on every write', async () => {
    fresh();
    expect(existsSync(home.configPath)).toBe(false);
    const set = await runCli(['config', 'set', 'baseUrl', `${url}/`], { home });
    expect(set).toEqual({ code: 0, stdout: '', stderr: `baseUrl set in ${home.configPath}\n` });
    expect(mode(home.configPath)).toBe(0o600);
    expect(mode(join(home.configHome, 'cellplane'))).toBe(0o700);
    expect(readFileSync(home.configPath, 'utf8')).toBe(`baseUrl: ${url}\n`);

    writeFileSync(home.configPath, `# my settings\nbaseUrl: ${url} # the local server\n`);
    chmodSync(home.configPath, 0o644);
    chmodSync(join(home.configHome, 'cellplane'), 0o755);
    const warned = await runCli(['config', 'list'], { home });
    expect(warned.code).toBe(0);
    expect(warned.stderr).toBe(`warning: ${home.configPath} is readable by others (mode 0644) and holds your token: run \`chmod 600 ${home.configPath}\`\n`);

    const again = await runCli(['config', 'set', 'currentOrg', 'acme'], { home });
    expect(again.code, again.stderr).toBe(0);
    expect(mode(home.configPath)).toBe(0o600);
    expect(mode(join(home.configHome, 'cellplane'))).toBe(0o700);
    expect(readFileSync(home.configPath, 'utf8')).toBe(`# my settings\nbaseUrl: ${url} # the local server\ncurrentOrg: acme\n`);

    const unset = await runCli(['config', 'unset', 'baseUrl'], { home });
    expect(unset).toEqual({ code: 0, stdout: '', stderr: `baseUrl removed from ${home.configPath}\n` });
    expect(readFileSync(home.configPath, 'utf8')).toBe('# my settings\ncurrentOrg: acme\n');
    expect(mode(home.configPath)).toBe(0o600);
  });

  it('without XDG_CONFIG_HOME the file is ~/.config/cellplane/config.yaml', async () => {
    fresh();
    const expected = join(home.home, '.config', 'cellplane', 'config.yaml');
    const path = await runCli(['config', 'path'], { home, env: { XDG_CONFIG_HOME: undefined } });
    expect(path).toEqual({ code: 0, stdout: `${expected}\n`, stderr: '' });
    const set = await runCli(['config', 'set', 'currentProject', 'platform'], { home, env: { XDG_CONFIG_HOME: undefined } });
    expect(set.code, set.stderr).toBe(0);
    expect(readFileSync(expected, 'utf8')).toBe('currentProject: platform\n');
    expect(mode(expected)).toBe(0o600);
    expect(mode(join(home.home, '.config', 'cellplane'))).toBe(0o700);
    expect(existsSync(home.configPath)).toBe(false);
  });

  it('bad keys, values and files are usage errors (exit 2) that say what to do', async () => {
    fresh();
    const [unknownKey, badUrl, emptyValue, missingArgument] = await Promise.all([
      runCli(['config', 'set', 'org', 'acme'], { home }),
      runCli(['config', 'set', 'baseUrl', 'localhost:3000'], { home }),
      runCli(['config', 'set', 'currentEnv', ''], { home }),
      runCli(['config', 'set', 'currentEnv'], { home }),
    ]);
    expect(unknownKey).toEqual({
      code: 2,
      stdout: '',
      stderr: 'error: unknown setting "org"; did you mean currentOrg? The keys are baseUrl, token, currentOrg, currentProject, currentEnv\n',
    });
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toMatch(/^error: the API address "localhost:3000" .* must be http:\/\/ or https:\/\/, such as http:\/\/127\.0\.0\.1:3000\n$/);
    expect(emptyValue).toEqual({ code: 2, stdout: '', stderr: 'error: an empty currentEnv is not a value: to remove it, run `cellplane config unset currentEnv`\n' });
    expect(missingArgument.code).toBe(2);
    expect(missingArgument.stderr).toBe("error: missing required argument 'value'\n(run the command with --help for its usage)\n");
    expect(existsSync(home.configPath)).toBe(false);

    writeConfig({});
    writeFileSync(home.configPath, 'baseUrl: [unclosed\n');
    const broken = await runCli(['config', 'list'], { home });
    expect(broken.code).toBe(2);
    expect(broken.stderr).toMatch(new RegExp(`^error: ${home.configPath.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not valid YAML \\(.*\\): fix it, or delete it and run \`cellplane config set\` again\n$`));

    writeFileSync(home.configPath, 'baseUrl: http://x.test\nbogus: 1\n');
    const unknownInFile = await runCli(['config', 'get', 'baseUrl'], { home });
    expect(unknownInFile.code).toBe(0);
    expect(unknownInFile.stderr).toContain(`warning: ${home.configPath}: unknown key "bogus" is ignored`);

    writeConfig({});
    const badBase = await runCli(['--base-url', 'ftp://x', '--org', 'o', '--project', 'p', 'entities', 'list'], { home });
    expect(badBase.code).toBe(2);
    expect(badBase.stderr).toBe('error: the API address "ftp://x" (flag --base-url) must be http:// or https://, such as http://127.0.0.1:3000\n');
  });
});
