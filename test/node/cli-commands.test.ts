import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCliHome, runCli, target, type CliHome, type CliResult } from '../support/cli';
import { createTenantWithRival, type Tenant } from '../support/fixtures';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';

/**
 * The CLI's commands against a real server on 127.0.0.1, run as a
 * subprocess: --json prints exactly the API's JSON for the same call,
 * tables for people, every list filter, paging, writes, exit codes 0/1/2
 * with messages that say what to do next, SERVICE_DEBUG and colour.
 */

const ESC = '\x1b[';

describe('cellplane commands', () => {
  let api: TestApi;
  let url: string;
  let home: CliHome;
  let tenant: Tenant;
  let owner: string;
  let viewer: string;
  let proj: string;
  let env: string;
  let relationshipId: string;

  beforeAll(async () => {
    // a clock that stands still: answers that mention the time (drift's "synced 5 s ago") are the same for the CLI and the test
    api = await createTestApi({ clock: manualClock() });
    url = await api.listen();
    home = createCliHome();
    const setup = await createTenantWithRival(api, { environments: ['staging'] });
    tenant = setup.tenant;
    owner = setup.tokens.owner;
    viewer = setup.tokens.viewer;
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const write = async (method: string, path: string, body: unknown) => {
      const response = await api.call(method, path, { token: owner, body });
      expect(response.status, `${method} ${path}: ${JSON.stringify(response.body)}`).toBeLessThan(300);
      return response.body;
    };
    await write('POST', `${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'stopped'],
      initialState: 'provisioning',
      properties: [{ name: 'region', type: 'string' }],
      metrics: [{ name: 'cpu' }],
      syncTracked: true,
    });
    await write('POST', `${proj}/entity-types`, { kind: 'EntityType', name: 'db', states: ['up'], initialState: 'up' });
    await write('POST', `${proj}/entity-types`, { kind: 'EntityType', name: 'unused', states: ['up'], initialState: 'up' });
    await write('POST', `${proj}/relationship-types`, { kind: 'RelationshipType', name: 'uses', from: 'vm', to: 'db', states: ['active'] });
    await write('POST', `${proj}/cells`, { kind: 'Cell', name: 'eu', entityType: 'vm' });
    await write('POST', `${proj}/actions`, {
      kind: 'Action',
      name: 'deploy',
      entityType: 'vm',
      onSuccess: 'running',
      onFailure: 'stopped',
      trigger: { type: 'webhook', url: 'http://127.0.0.1:9/hook' },
    });
    for (const [i, team] of ['a', 'a', 'b', 'b', 'a'].entries()) {
      await write('POST', `${env}/entities`, {
        kind: 'Entity',
        entityType: 'vm',
        name: `web-${i + 1}`,
        labels: { team, tier: i < 3 ? 'web' : 'edge' },
        properties: { region: i % 2 === 0 ? 'eu' : 'us' },
      });
    }
    await write('POST', `${env}/entities`, { kind: 'Entity', entityType: 'db', name: 'db-1' });
    await write('PUT', `${env}/entities/web-2`, { state: 'running' });
    await write('PUT', `${env}/entities/web-1/metrics/cpu`, { value: 0.5 });
    await write('POST', `${env}/entities/web-3/sync-stamp`, { source: 'terraform:abc' });
    await write('POST', `${proj}/cells/eu/members?envName=default`, { entityTypeName: 'vm', entityName: 'web-1' });
    relationshipId = (await write('POST', `${env}/relationships`, { relationshipType: 'uses', from: 'web-1', to: 'db-1' })).id;
  });

  afterAll(async () => {
    await api.close();
    home.remove();
  });

  /** The CLI with the tenant's flags and the owner token (or `token`); a token never shows up in the output. */
  const cli = async (args: string[], options: { token?: string; env?: Record<string, string | undefined> } = {}): Promise<CliResult> => {
    const token = options.token ?? owner;
    const result = await runCli([...target(url, token, tenant), ...args], { home, env: options.env });
    expect(result.stdout + result.stderr).not.toContain(token);
    return result;
  };
  const apiGet = async (path: string) => {
    const response = await api.call('GET', path, { token: owner });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body;
  };
  /** --json prints the API's JSON as JSON.stringify(body, null, 2): byte for byte. */
  const expectSameJson = (result: CliResult, body: unknown, label: string) => {
    expect({ label, code: result.code, stderr: result.stderr }).toEqual({ label, code: 0, stderr: '' });
    expect(result.stdout, label).toBe(`${JSON.stringify(body, null, 2)}\n`);
  };
  /** Runs the pairs a few at a time (each is a process). */
  const compareAll = async (pairs: [string[], string][]) => {
    for (let i = 0; i < pairs.length; i += 4) {
      const chunk = pairs.slice(i, i + 4);
      const results = await Promise.all(chunk.map(([args]) => cli([...args, '--json'])));
      for (const [j, [args, path]] of chunk.entries()) expectSameJson(results[j]!, await apiGet(path), `${args.join(' ')} ~ GET ${path}`);
    }
  };

  it('--json prints exactly the JSON of the API call behind each read command', async () => {
    const tokens = `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`;
    await compareAll([
      [['orgs', 'get'], `/orgs/${tenant.org.slug}`],
      [['projects', 'list'], `/orgs/${tenant.org.slug}/projects`],
      [['envs', 'list'], `${proj}/envs`],
      [['tokens', 'list'], tokens],
      [['entity-types', 'list'], `${proj}/entity-types`],
      [['entity-types', 'get', 'vm'], `${proj}/entity-types/vm`],
      [['relationship-types', 'list'], `${proj}/relationship-types`],
      [['relationship-types', 'get', 'uses'], `${proj}/relationship-types/uses`],
      [['cells', 'list'], `${proj}/cells`],
      [['cells', 'get', 'eu'], `${proj}/cells/eu`],
      [['actions', 'list'], `${proj}/actions`],
      [['actions', 'get', 'deploy'], `${proj}/actions/deploy`],
      [['entities', 'list'], `${env}/entities`],
      [['entities', 'get', 'web-1'], `${env}/entities/web-1`],
      [['entities', 'metrics', 'web-1'], `${env}/entities/web-1/metrics`],
      [['entities', 'drift', 'web-3'], `${env}/entities/web-3/drift`],
      [['relationships', 'list'], `${env}/relationships`],
      [['relationships', 'get', relationshipId], `${env}/relationships/${relationshipId}`],
      [['runs', 'list'], `${env}/action-runs`],
    ]);
  });

  it('entities list passes every filter to the API', async () => {
    const since = (await apiGet(`${env}/entities/web-2`)).updatedAt as string;
    await compareAll([
      [['entities', 'list', '--type', 'vm'], `${env}/entities?entityType=vm`],
      [['entities', 'list', '--state', 'running'], `${env}/entities?state=running`],
      [['entities', 'list', '--label', 'team:a', '--label', 'tier=web'], `${env}/entities?label=team:a&label=tier:web`],
      [['entities', 'list', '--cell', 'eu'], `${env}/entities?cell=eu`],
      [['entities', 'list', '--name-prefix', 'web-'], `${env}/entities?namePrefix=web-`],
      [['entities', 'list', '--sync-source', 'terraform:abc'], `${env}/entities?syncSource=terraform:abc`],
      [['entities', 'list', '--updated-since', since], `${env}/entities?updatedSince=${encodeURIComponent(since)}`],
      [['relationships', 'list', '--type', 'uses', '--from', 'web-1', '--to', 'db-1'], `${env}/relationships?relationshipType=uses&from=web-1&to=db-1`],
    ]);
    // the filters really filter: two entities carry team a and tier web
    const labelled = await cli(['entities', 'list', '--label', 'team:a', '--label', 'tier:web', '--json']);
    expect((JSON.parse(labelled.stdout) as { name: string }[]).map((entity) => entity.name).sort()).toEqual(['web-1', 'web-2']);
  });

  it('lists one page and says how to get more; --cursor goes on; --all follows every page', async () => {
    const first = await api.call('GET', `${env}/entities?limit=2`, { token: owner });
    const cursor = first.headers.get('x-next-cursor')!;
    expect(cursor).toBeTruthy();
    const everything = await apiGet(`${env}/entities?limit=1000`);
    const [page, next, all] = await Promise.all([
      cli(['entities', 'list', '--limit', '2', '--json']),
      cli(['entities', 'list', '--limit', '2', '--cursor', cursor, '--json']),
      cli(['entities', 'list', '--limit', '2', '--all', '--json']),
    ]);
    expect(page.code).toBe(0);
    expect(page.stdout).toBe(`${JSON.stringify(first.body, null, 2)}\n`);
    expect(page.stderr).toBe(`more entities than this page: add --all for every page, or --cursor ${cursor} for the next one\n`);
    expect(next.code).toBe(0);
    expect(next.stdout).toBe(`${JSON.stringify((await api.call('GET', `${env}/entities?limit=2&cursor=${encodeURIComponent(cursor)}`, { token: owner })).body, null, 2)}\n`);
    expectSameJson(all, everything, 'entities list --all');
    expect(everything).toHaveLength(6);
  });

  it('prints aligned tables and records for people', async () => {
    const [entities, record, envs] = await Promise.all([cli(['entities', 'list', '--type', 'vm']), cli(['entities', 'get', 'web-1']), cli(['envs', 'list'])]);
    expect(entities.code, entities.stderr).toBe(0);
    const lines = entities.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^NAME +TYPE +STATE +LABELS +UPDATED$/);
    expect(lines).toHaveLength(6);
    const starts = ['TYPE', 'STATE', 'LABELS', 'UPDATED'].map((header) => lines[0]!.indexOf(header));
    const byName = new Map((await apiGet(`${env}/entities?entityType=vm`)).map((entity: { name: string }) => [entity.name, entity]));
    for (const line of lines.slice(1)) {
      const name = line.slice(0, starts[0]).trim();
      const entity = byName.get(name) as { entityTypeName: string; state: string; labels: Record<string, string>; updatedAt: string };
      expect(entity, line).toBeDefined();
      // every cell begins at its header's column
      expect(line.slice(starts[0], starts[1]).trim()).toBe(entity.entityTypeName);
      expect(line.slice(starts[1], starts[2]).trim()).toBe(entity.state);
      expect(line.slice(starts[2], starts[3]).trim()).toBe(`team=${entity.labels.team},tier=${entity.labels.tier}`);
      expect(line.slice(starts[3])).toBe(entity.updatedAt);
    }

    const web1 = await apiGet(`${env}/entities/web-1`);
    expect(record.stdout).toBe(
      [
        `name:           web-1`,
        `entityTypeName: vm`,
        `state:          provisioning`,
        `labels:         team=a,tier=web`,
        `properties:     region=eu`,
        `syncSource:     -`,
        `lastSyncedAt:   -`,
        `id:             ${web1.id}`,
        `createdAt:      ${web1.createdAt}`,
        `updatedAt:      ${web1.updatedAt}`,
        '',
      ].join('\n'),
    );

    const environments = (await apiGet(`${proj}/envs`)) as { name: string; createdAt: string }[];
    expect(envs.stdout).toBe(['NAME     CREATED', ...environments.map((e) => `${e.name.padEnd(7)}  ${e.createdAt}`), ''].join('\n'));
  });

  it('writes: entities, relationships, environments, projects and catalog deletes answer with the API JSON', async () => {
    const created = await cli(['entities', 'create', 'api-1', '--type', 'vm', '--label', 'team=c', '--property', 'region=eu', '--json']);
    expect(created.code, created.stderr).toBe(0);
    expectSameJson(created, await apiGet(`${env}/entities/api-1`), 'entities create');
    expect(JSON.parse(created.stdout)).toMatchObject({ name: 'api-1', labels: { team: 'c' }, properties: { region: 'eu' }, state: 'provisioning' });

    const moved = await cli(['entities', 'set-state', 'api-1', 'running']);
    expect(moved).toEqual({ code: 0, stdout: 'api-1 is running\n', stderr: '' });
    expect((await apiGet(`${env}/entities/api-1`)).state).toBe('running');

    const related = await cli(['relationships', 'create', 'uses', 'api-1', 'db-1', '--json']);
    expect(related.code, related.stderr).toBe(0);
    const relationship = JSON.parse(related.stdout);
    expectSameJson(related, await apiGet(`${env}/relationships/${relationship.id}`), 'relationships create');
    const unrelated = await cli(['relationships', 'delete', relationship.id]);
    expect(unrelated).toEqual({ code: 0, stdout: `deleted relationship ${relationship.id}\n`, stderr: '' });

    const deleted = await cli(['entities', 'delete', 'api-1', '--json']);
    expect(deleted).toEqual({ code: 0, stdout: `${JSON.stringify({ deleted: true, name: 'api-1' }, null, 2)}\n`, stderr: '' });
    expect((await api.call('GET', `${env}/entities/api-1`, { token: owner })).status).toBe(404);

    const [newEnv, newProject, typeGone] = await Promise.all([
      cli(['envs', 'create', 'qa']),
      cli(['projects', 'create', 'second', '--name', 'Second', '--json']),
      cli(['entity-types', 'delete', 'unused']),
    ]);
    expect(newEnv).toEqual({ code: 0, stdout: 'created environment qa\n', stderr: '' });
    expect(newProject.code, newProject.stderr).toBe(0);
    expect(JSON.parse(newProject.stdout)).toMatchObject({ slug: 'second', name: 'Second' });
    expect(typeGone).toEqual({ code: 0, stdout: 'deleted entity type unused\n', stderr: '' });
    const envGone = await cli(['envs', 'delete', 'qa']);
    expect(envGone).toEqual({ code: 0, stdout: 'deleted environment qa\n', stderr: '' });
    expect(((await apiGet(`${proj}/envs`)) as { name: string }[]).map((e) => e.name)).not.toContain('qa');
  });

  it('tokens create prints the secret once, alone on stdout; revoke ends it at once', async () => {
    const minted = await cli(['tokens', 'create', 'ci', '--role', 'viewer', '--pin-env', 'staging']);
    expect(minted.code, minted.stderr).toBe(0);
    const secret = minted.stdout.trim();
    expect(minted.stdout).toMatch(/^cpl_[0-9A-Za-z]{36}\n$/);
    expect(minted.stderr).toMatch(/^token ci \(viewer, id [0-9a-f-]+\) created: the secret above is shown once; store it now\n$/);
    const id = /id ([0-9a-f-]+)\)/.exec(minted.stderr)![1]!;

    const listed = await cli(['tokens', 'list', '--json']);
    expect(listed.stdout).not.toContain(secret);
    expect(JSON.parse(listed.stdout)).toContainEqual(expect.objectContaining({ id, name: 'ci', role: 'viewer', envName: 'staging' }));
    expect((await api.call('GET', `${proj}/envs/staging/entities`, { token: secret })).status).toBe(200);

    const revoked = await cli(['tokens', 'revoke', id]);
    expect(revoked).toEqual({ code: 0, stdout: `revoked token ${id}\n`, stderr: '' });
    expect((await api.call('GET', `${proj}/envs/staging/entities`, { token: secret })).status).toBe(401);

    const json = await cli(['tokens', 'create', 'ci-json', '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ name: 'ci-json', role: 'member', token: expect.stringMatching(/^cpl_/) });
    expect(json.stderr).toBe('');
  });

  it('API and network errors exit 1 with the reason and what to do next; SERVICE_DEBUG adds the request id, status and body', async () => {
    const [missing, badToken, forbidden, exists, invalid, down, notASession] = await Promise.all([
      cli(['entities', 'get', 'nope']),
      cli(['entities', 'list'], { token: 'cpl_000000000000000000000000000000000000' }),
      cli(['envs', 'create', 'viewers-env'], { token: viewer }),
      cli(['envs', 'create', 'staging']),
      cli(['entities', 'create', 'web-9', '--type', 'vm', '--state', 'flying']),
      runCli(['--base-url', 'http://127.0.0.1:1', '--org', 'o', '--project', 'p', 'entities', 'list'], { home }),
      cli(['orgs', 'list']),
    ]);
    const scope = `org ${tenant.org.slug}, project ${tenant.project.slug}, env default`;
    expect(missing).toEqual({
      code: 1,
      stdout: '',
      stderr: `error: entity "nope" not found (404 not_found)\nhint: check --org, --project, --env and the names given (now ${scope}); \`cellplane <resource> list\` shows what exists\n`,
    });
    expect(badToken.code).toBe(1);
    expect(badToken.stderr).toMatch(/\(401 unauthorized\)\nhint: check the token: pass --token, set SERVICE_TOKEN, or run `cellplane login`\n$/);
    expect(forbidden.code).toBe(1);
    expect(forbidden.stderr).toMatch(/\(403 forbidden\)\nhint: the token's role does not allow this: use a token with a higher role/);
    expect(exists.code).toBe(1);
    expect(exists.stderr).toMatch(/\(409 already_exists\)\nhint: it already exists: `get` it, or pick another name\n$/);
    expect(invalid).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'error: state "flying" is not one of entity type "vm"\'s states: provisioning, running, stopped (400 invalid_state)\n' +
        'hint: use one of the states the message lists (`cellplane entity-types get <type>` shows them all)\n',
    });
    expect(down.code).toBe(1);
    expect(down.stderr).toBe(
      'error: GET /o/p/envs/default/entities got no answer: bad port\n' +
        'hint: check the API address http://127.0.0.1:1 (from flag --base-url): --base-url, SERVICE_BASE_URL or `cellplane config set baseUrl <url>`, and that the server is up\n',
    );

    expect(notASession).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'error: orgs list needs a user session; a service token belongs to one organization\n' +
        "hint: sign in with `cellplane login --email <address>`, or show the token's organization with `cellplane orgs get`\n",
    });

    const debug = await cli(['entities', 'get', 'nope'], { env: { SERVICE_DEBUG: '1' } });
    expect(debug.code).toBe(1);
    const lines = debug.stderr.trimEnd().split('\n');
    expect(lines.slice(0, 2)).toEqual(missing.stderr.trimEnd().split('\n'));
    expect(lines.slice(2)).toEqual([
      `debug: request GET ${env}/entities/nope`,
      'debug: status 404',
      expect.stringMatching(/^debug: request id [0-9a-zA-Z-]{8,}$/),
      `debug: body ${JSON.stringify({ error: 'entity "nope" not found', code: 'not_found' })}`,
    ]);
  });

  it('usage errors exit 2 and say what to do; --help and --version exit 0', async () => {
    const [unknownCommand, unknownOption, badLimit, noOrg, badStatus, badPair, version, help, nothing] = await Promise.all([
      cli(['entitis', 'list']),
      cli(['entities', 'list', '--colour']),
      cli(['entities', 'list', '--limit', '0']),
      runCli(['--base-url', url, 'projects', 'list'], { home }),
      cli(['runs', 'list', '--status', 'done']),
      cli(['entities', 'create', 'x', '--type', 'vm', '--property', 'novalue']),
      runCli(['--version'], { home }),
      runCli(['entities', '--help'], { home }),
      runCli([], { home }),
    ]);
    expect(unknownCommand.code).toBe(2);
    expect(unknownCommand.stderr).toMatch(/^error: unknown command 'entitis'\n(\(Did you mean entities\?\)\n)?\(run the command with --help for its usage\)\n$/);
    expect(unknownOption).toEqual({ code: 2, stdout: '', stderr: "error: unknown option '--colour'\n(run the command with --help for its usage)\n" });
    expect(badLimit).toEqual({
      code: 2,
      stdout: '',
      stderr: "error: option '--limit <n>' argument '0' is invalid. give a whole number from 1 to 1000.\n(run the command with --help for its usage)\n",
    });
    expect(noOrg).toEqual({
      code: 2,
      stdout: '',
      stderr: 'error: no organization given: pass --org <slug>, set SERVICE_ORG_ID, or run `cellplane config set currentOrg <slug>`\n',
    });
    expect(badStatus.code).toBe(2);
    expect(badStatus.stderr).toContain("argument 'done' is invalid. give one of pending, running, succeeded, failed, cancelled.");
    expect(badPair).toEqual({ code: 2, stdout: '', stderr: 'error: --property "novalue" is not key=value (or key:=json): give it as --property size=small\n' });
    expect(version).toEqual({ code: 0, stdout: '0.1.0\n', stderr: '' });
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: cellplane entities \[options\] \[command\]/);
    expect(help.stdout).toContain('set-state');
    expect(nothing.code).toBe(2);
    expect(nothing.stderr).toContain('Usage: cellplane [options] [command]');
  });

  it('colour: never through a pipe or with NO_COLOR; FORCE_COLOR turns it on, NO_COLOR still wins', async () => {
    const [plain, forced, vetoed, forcedError, vetoedError] = await Promise.all([
      cli(['entities', 'list', '--type', 'vm']),
      cli(['entities', 'list', '--type', 'vm'], { env: { FORCE_COLOR: '1' } }),
      cli(['entities', 'list', '--type', 'vm'], { env: { FORCE_COLOR: '1', NO_COLOR: '1' } }),
      cli(['entities', 'get', 'nope'], { env: { FORCE_COLOR: '1' } }),
      cli(['entities', 'get', 'nope'], { env: { FORCE_COLOR: '1', NO_COLOR: '1' } }),
    ]);
    expect(plain.stdout).not.toContain(ESC);
    expect(forced.stdout.startsWith(`${ESC}1mNAME`)).toBe(true);
    expect(forced.stdout).toContain(`${ESC}32mrunning${ESC}0m`);
    // without the colour codes, the same table
    expect(forced.stdout.replace(/\x1b\[[0-9;]*m/g, '')).toBe(plain.stdout);
    expect(vetoed.stdout).toBe(plain.stdout);
    expect(forcedError.stderr.startsWith(`${ESC}31merror: entity "nope" not found`)).toBe(true);
    expect(vetoedError.stderr).not.toContain(ESC);
  });
});
