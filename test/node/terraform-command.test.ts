import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CommanderError } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext, type CliContext } from '../../src/cli/context';
import { EXIT_OK, EXIT_USAGE, reportError } from '../../src/cli/errors';
import { buildProgram } from '../../src/cli/main';
import { createOutput } from '../../src/cli/output';
import { resolveSettings, type GlobalFlags } from '../../src/cli/settings';
import { createTenant, seedToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

const STATE_PATH = new URL('../fixtures/terraform/platform.tfstate', import.meta.url).pathname;
const SENSITIVE_VALUES = ['s3cr3t-Db-Pa55w0rd-7f3a', 'nested-T0ken-91ab', 'list-S3cret-element-42', 'map-K3y-S3cret-55', 'rnd-Result-Zq8x-Secret'];

/**
 * `cellplane import terraform` as main() runs a command (settings, output,
 * the error report and exit code), in process against a real HTTP server.
 * The command is registered here unless main's own list already has it.
 */
describe('cellplane import terraform', () => {
  let api: TestApi;
  let baseUrl: string;
  let dir: string;
  let tenant: Tenant;
  let token: string;

  beforeAll(async () => {
    api = await createTestApi();
    baseUrl = await api.listen();
    dir = mkdtempSync(join(tmpdir(), 'cellplane-tf-cli-'));
    tenant = await createTenant(api, { project: 'platform' });
    token = await seedToken(api, tenant, 'owner');
  });

  afterAll(async () => {
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
    const stdout: string[] = [];
    const stderr: string[] = [];
    const env = { XDG_CONFIG_HOME: join(dir, 'config'), HOME: dir, SERVICE_BASE_URL: baseUrl, SERVICE_TOKEN: token, SERVICE_ORG_ID: tenant.org.slug, ...extraEnv };
    const io = { env, stdout: { write: (text: string) => stdout.push(text) }, stderr: { write: (text: string) => stderr.push(text) } };
    let context: CliContext | undefined;
    const getContext = (): CliContext => {
      if (context) return context;
      const settings = resolveSettings(program.opts<GlobalFlags>(), env, dir);
      context = createContext({ settings, out: createOutput({ json: settings.json, env, stdout: io.stdout, stderr: io.stderr }), variables: env, version: 'test' });
      return context;
    };
    const program = buildProgram(getContext, io, 'test');
    let code = EXIT_OK;
    try {
      await program.parseAsync(args, { from: 'user' });
    } catch (error) {
      if (error instanceof CommanderError) code = error.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
      else {
        const report = reportError(error, { debug: false });
        stderr.push(...report.lines.map((line) => `${line}\n`));
        code = report.code;
      }
    } finally {
      await context?.close();
    }
    return { code, stdout: stdout.join(''), stderr: stderr.join('') };
  }

  it('in local mode: a dry run creates nothing, the real run creates project "terrantula", a re-import changes nothing; --json prints the report', async () => {
    const local = ['--local', '--data-dir', join(dir, 'local-data')];
    // no server settings: local mode starts with organization "local"
    const none = { SERVICE_BASE_URL: '', SERVICE_TOKEN: '', SERVICE_ORG_ID: '' };
    const dry = await cli([...local, 'import', 'terraform', '--state', STATE_PATH, '--dry-run'], none);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain('Dry run: nothing was changed.');
    expect(dry.stdout).toMatch(/would create\s+16\s+27/);
    // progress on stderr: plain lines, stderr not being a terminal
    expect(dry.stderr).toContain('import: entities 16/16\n');
    expect(dry.stderr).not.toContain('terrantula');

    const real = await cli([...local, 'import', 'terraform', '--state', STATE_PATH, '--json'], none);
    expect(real.code, real.stderr).toBe(0);
    expect(real.stderr).toContain('created project "terrantula" in organization "local"');
    const report = JSON.parse(real.stdout);
    expect(report.entities.created).toHaveLength(16);
    expect(report.relationships.created).toBe(27);

    const again = await cli([...local, 'import', 'terraform', '--state', STATE_PATH], none);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/unchanged\s+16\s+27/);
    expect(again.stderr).not.toContain('created project');
    for (const value of SENSITIVE_VALUES) {
      for (const text of [dry.stdout, dry.stderr, real.stdout, real.stderr, again.stdout, again.stderr]) expect(text).not.toContain(value);
    }
  });

  it('against a server, --project chooses the project (a service token reaches its own project only)', async () => {
    const result = await cli(['--project', 'platform', 'import', 'terraform', '--state', STATE_PATH, '--json']);
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout).entities.created).toHaveLength(16);
    expect((await api.call('GET', `/${tenant.org.slug}/platform/envs/default/entities/aws_vpc.main`, { token })).status).toBe(200);
  });

  it('says what to do when a service token cannot reach the default project', async () => {
    const result = await cli(['import', 'terraform', '--state', STATE_PATH]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^error: cannot reach project "terrantula".*with this token/m);
    expect(result.stderr).toMatch(/^hint: a service token works in its own project only: pass --project/m);
  });

  it('exits 1 with the refusal and what to do, 2 for flags that cannot work together', async () => {
    expect((await api.call('POST', `/${tenant.org.slug}/platform/envs`, { token, body: { name: 'refusal' } })).status).toBe(201);
    const scope = ['--project', 'platform', '--env', 'refusal'];
    expect((await cli([...scope, 'import', 'terraform', '--state', STATE_PATH, '--json'])).code).toBe(0);
    const state = JSON.parse(readFileSync(STATE_PATH, 'utf8'));
    state.resources = state.resources.filter((resource: any) => resource.type !== 'aws_eip');
    const shrunk = join(dir, 'shrunk.tfstate');
    writeFileSync(shrunk, JSON.stringify(state));
    const refused = await cli([...scope, 'import', 'terraform', '--state', shrunk]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^error: refusing to import: it would delete 2 entities.*--max-delete 2 or --force$/m);
    expect(refused.stderr).not.toContain('unexpected');

    expect((await cli(['import', 'terraform'])).code).toBe(EXIT_USAGE);
    const both = await cli(['import', 'terraform', '--state', shrunk, '--workspace', 'a/b']);
    expect(both.code).toBe(EXIT_USAGE);
    expect(both.stderr).toContain('not both');
    expect((await cli(['import', 'terraform', '--state', shrunk, '--max-delete', 'many'])).code).toBe(EXIT_USAGE);

    const missing = await cli(['import', 'terraform', '--state', join(dir, 'nope.tfstate')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/does not exist/);

    const custom = await cli(['import', 'terraform', '--workspace', 'acme/platform', '--hostname', 'tfe.example.com']);
    expect(custom.code).toBe(1);
    expect(custom.stderr).toContain('SERVICE_TFC_ALLOW_CUSTOM_HOST=1');
  });
});
