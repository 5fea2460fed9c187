import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fetchRemoteState, findToken, normalizeHost, RemoteStateError, resolveHost, tokenVariableFor } from '../../src/cli/terraform/remote';
import { importTerraform } from '../../src/cli/terraform/run';
import { sdkTarget } from '../../src/cli/terraform/target';
import { createClient } from '../../src/sdk';
import { createTenant, seedToken } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { startTerraformCloud, type DownloadMode, type TerraformCloudStub } from '../support/terraform-cloud';

const STATE = readFileSync(new URL('../fixtures/terraform/platform.tfstate', import.meta.url), 'utf8');
const TFC_TOKEN = 'tfc-test-token.atlasv1.Zm9vYmFyYmF6cXV4MTIzNDU2';
const ALLOW = { SERVICE_TFC_ALLOW_CUSTOM_HOST: '1', SERVICE_TFC_SUPPRESS_HOST_WARNING: '1' };

describe('remote state from Terraform Cloud / Enterprise', () => {
  let home: string;
  const stubs: TerraformCloudStub[] = [];

  async function stub(download: DownloadMode = 'other-origin') {
    const server = await startTerraformCloud({ token: TFC_TOKEN, download });
    server.addWorkspace('acme', 'platform', STATE);
    server.addWorkspace('acme', 'empty', undefined);
    stubs.push(server);
    return server;
  }

  /** `TF_TOKEN_127_0_0_1:<port>`: Terraform's encoding of the stub's host. */
  const tokenEnv = (server: TerraformCloudStub, token = TFC_TOKEN) => ({ [tokenVariableFor(server.host)]: token });

  beforeAll(() => {
    home = mkdtempSync(join(tmpdir(), 'cellplane-tfc-home-'));
  });

  afterEach(async () => {
    await Promise.all(stubs.splice(0).map((server) => server.close()));
  });

  afterAll(() => {
    rmSync(home, { recursive: true, force: true });
  });

  it('reads the current state of a workspace with a TF_TOKEN_ variable', async () => {
    const server = await stub();
    const state = await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: { ...ALLOW, ...tokenEnv(server) }, warn: () => {}, homeDir: home });
    expect(state).toMatchObject({ serial: 7, lineage: '3f9c2a4e-8b1d-4e7a-9c55-0d2e1f6a7b81', workspace: 'acme/platform', host: server.host });
    expect(JSON.stringify(state)).not.toContain('s3cr3t-Db-Pa55w0rd-7f3a');
    expect(server.requests.map((request) => `${request.origin === server.origin ? 'api' : 'download'} ${request.path.replace(/ws-\d+/, 'ws-ID').replace(/object\/.*/, 'object/…')}`)).toEqual([
      'api /api/v2/organizations/acme/workspaces/platform',
      'api /api/v2/workspaces/ws-ID/current-state-version',
      'download /_archivist/v1/object/…',
    ]);
  });

  it('reads the token from credentials.tfrc.json (TF_CLI_CONFIG_DIR, else ~/.terraform.d)', async () => {
    const server = await stub();
    const configDir = join(home, 'custom-config');
    mkdirSync(configDir, { recursive: true });
    writeFileSync(join(configDir, 'credentials.tfrc.json'), JSON.stringify({ credentials: { [server.host]: { token: TFC_TOKEN } } }));
    const state = await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: { ...ALLOW, TF_CLI_CONFIG_DIR: configDir }, warn: () => {}, homeDir: home });
    expect(state.serial).toBe(7);

    const userHome = join(home, 'user');
    mkdirSync(join(userHome, '.terraform.d'), { recursive: true });
    writeFileSync(join(userHome, '.terraform.d', 'credentials.tfrc.json'), JSON.stringify({ credentials: { [server.host.toUpperCase()]: { token: TFC_TOKEN } } }));
    expect((await findToken(server.host, {}, userHome)).from).toBe(join(userHome, '.terraform.d', 'credentials.tfrc.json'));
    // a TF_TOKEN_ variable wins over the file, as in Terraform
    expect(await findToken(server.host, { [tokenVariableFor(server.host)]: 'from-env' }, userHome)).toEqual({ token: 'from-env', from: tokenVariableFor(server.host) });
  });

  it("decodes TF_TOKEN_ names as Terraform does: '_' for '.', '__' for '-', case-insensitive", async () => {
    expect(tokenVariableFor('tfe.example-corp.com')).toBe('TF_TOKEN_tfe_example__corp_com');
    expect(await findToken('tfe.example-corp.com', { TF_TOKEN_TFE_EXAMPLE__CORP_COM: 'upper' }, home)).toEqual({ token: 'upper', from: 'TF_TOKEN_TFE_EXAMPLE__CORP_COM' });
    expect(await findToken('app.terraform.io', { 'TF_TOKEN_app.terraform.io': 'dotted' }, home)).toMatchObject({ token: 'dotted' });
    expect(normalizeHost('TFE.Example.com:443')).toBe('tfe.example.com');
    expect(normalizeHost('café.fr')).toBe('xn--caf-dma.fr');
    expect(() => normalizeHost('https://tfe.example.com')).toThrow(/not a host name/);
    expect(() => normalizeHost('tfe.example.com/path')).toThrow(/not a host name/);
  });

  it('says which variable or file to set when there is no token, and never prints a token', async () => {
    const server = await stub();
    const missing = await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: ALLOW, warn: () => {}, homeDir: home }).catch((error) => error);
    expect(missing).toBeInstanceOf(RemoteStateError);
    expect(missing.message).toContain(`set ${tokenVariableFor(server.host)}`);
    expect(missing.message).toContain(join(home, '.terraform.d', 'credentials.tfrc.json'));
    expect(missing.message).toContain('terraform login');
    expect(server.requests).toEqual([]);

    const refused = await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: { ...ALLOW, ...tokenEnv(server, 'wrong-token-value-123') }, warn: () => {}, homeDir: home }).catch((error) => error);
    expect(refused.message).toMatch(/refused the token from TF_TOKEN_.*\(401\).*expired, revoked/);
    expect(refused.message).not.toContain('wrong-token-value-123');

    const notFound = await fetchRemoteState({ workspace: 'acme/nope', hostname: server.host, env: { ...ALLOW, ...tokenEnv(server) }, warn: () => {}, homeDir: home }).catch((error) => error);
    expect(notFound.message).toMatch(/workspace acme\/nope was not found.*\(404\).*check the organization and workspace names.*token/);
    expect(notFound.message).not.toContain(TFC_TOKEN);

    const empty = await fetchRemoteState({ workspace: 'acme/empty', hostname: server.host, env: { ...ALLOW, ...tokenEnv(server) }, warn: () => {}, homeDir: home }).catch((error) => error);
    expect(empty.message).toMatch(/has no state yet/);

    await expect(fetchRemoteState({ workspace: 'no-slash', env: {}, warn: () => {} })).rejects.toThrow(/<organization>\/<workspace>/);
  });

  it('refuses a custom host unless SERVICE_TFC_ALLOW_CUSTOM_HOST=1, then warns unless SERVICE_TFC_SUPPRESS_HOST_WARNING=1', async () => {
    const server = await stub();
    const warnings: string[] = [];
    const warn = (message: string) => warnings.push(message);
    const refused = await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: tokenEnv(server), warn, homeDir: home }).catch((error) => error);
    expect(refused).toBeInstanceOf(RemoteStateError);
    expect(refused.message).toMatch(/refused: only app\.terraform\.io.*SERVICE_TFC_ALLOW_CUSTOM_HOST=1/);
    expect(server.requests).toEqual([]);
    expect(warnings).toEqual([]);
    // TF_CLOUD_HOSTNAME names the host too, and is refused alike
    expect(() => resolveHost({ env: { TF_CLOUD_HOSTNAME: 'tfe.example.com' }, warn })).toThrow(/refused/);

    await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: { SERVICE_TFC_ALLOW_CUSTOM_HOST: '1', ...tokenEnv(server) }, warn, homeDir: home });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`reading Terraform state from ${server.host}`);
    expect(warnings[0]).toContain('SERVICE_TFC_SUPPRESS_HOST_WARNING=1');

    await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: { ...ALLOW, ...tokenEnv(server) }, warn, homeDir: home });
    expect(warnings).toHaveLength(1);

    // the default host needs neither, and is always https
    expect(resolveHost({ env: {}, warn })).toEqual({ host: 'app.terraform.io', origin: 'https://app.terraform.io', custom: false });
    expect(resolveHost({ env: { ...ALLOW, TF_CLOUD_HOSTNAME: 'tfe.example.com:8443' }, warn }).origin).toBe('https://tfe.example.com:8443');
    expect(warnings).toHaveLength(1);
  });

  it('sends the token only to the API origin: never to a download URL or a redirect on another origin', async () => {
    for (const mode of ['other-origin', 'redirect-to-other-origin'] as const) {
      const server = await stub(mode);
      const state = await fetchRemoteState({ workspace: 'acme/platform', hostname: server.host, env: { ...ALLOW, ...tokenEnv(server) }, warn: () => {}, homeDir: home });
      expect(state.serial).toBe(7);
      const downloads = server.requests.filter((request) => request.origin === server.downloadOrigin);
      expect(downloads).toHaveLength(1);
      expect(downloads[0]!.authorization).toBeUndefined();
      for (const request of server.requests.filter((r) => r.origin === server.origin && r.path.startsWith('/api/'))) {
        expect(request.authorization).toBe(`Bearer ${TFC_TOKEN}`);
      }
    }
    // a download on the API's own origin (Terraform Enterprise's archivist) carries it
    const same = await stub('same-origin');
    await fetchRemoteState({ workspace: 'acme/platform', hostname: same.host, env: { ...ALLOW, ...tokenEnv(same) }, warn: () => {}, homeDir: home });
    expect(same.requests.every((request) => request.authorization === `Bearer ${TFC_TOKEN}`)).toBe(true);
  });

  describe('imports a workspace into the API', () => {
    let api: TestApi;

    beforeAll(async () => {
      api = await createTestApi();
    });

    afterAll(async () => {
      await api?.close();
    });

    it('with --workspace and --hostname, the same as from a file', async () => {
      const server = await stub();
      const baseUrl = await api.listen();
      const tenant = await createTenant(api, { project: 'terrantula' });
      const token = await seedToken(api, tenant, 'admin');
      const target = sdkTarget(createClient({ baseUrl, token }), { org: tenant.org.slug, project: 'terrantula', env: 'default' });
      const warnings: string[] = [];
      const report = await importTerraform(
        { workspace: 'acme/platform', hostname: server.host },
        { target, env: { SERVICE_TFC_ALLOW_CUSTOM_HOST: '1', ...tokenEnv(server) }, warn: (message) => warnings.push(message), homeDir: home },
      );
      expect(report.from).toEqual({ workspace: 'acme/platform', host: server.host });
      expect(report.entities.created).toHaveLength(16);
      expect(warnings).toHaveLength(1);
      expect(JSON.stringify(report)).not.toContain(TFC_TOKEN);
      expect(api.logs.join('\n')).not.toContain(TFC_TOKEN);
    });
  });
});
