import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import type { LookupAddress } from 'node:dns';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config';
import { guardedFetch } from '../../src/node/outbound-fetch';
import { createNodePlatform, listeningUrl } from '../../src/node/platform';
import { createTenant, expectError, mintToken, uniqueSlug } from '../support/fixtures';
import { createTestApi, TEST_SECRETS, type ApiResponse, type TestApi } from '../support/node-app';
import { runFailingStart } from '../support/node-process';
import { startReceiver, type Receiver } from '../support/receiver';
import { webhookAction } from '../support/run-fixtures';

/**
 * Outbound URLs and the callback base (docs/decisions.md): addresses judged by
 * the IANA special-purpose registries at trigger and at delivery, and
 * `{{ run.callbackUrl }}` built from API_BASE_URL only, never from the Host
 * header of the trigger request.
 */

interface Setup {
  api: TestApi;
  env: string;
  owner: string;
  action(url: string): Promise<string>;
  trigger(action: string, headers?: Record<string, string>): Promise<ApiResponse>;
}

async function setUp(api: TestApi): Promise<Setup> {
  const tenant = await createTenant(api);
  const owner = await mintToken(api, tenant, { role: 'owner' });
  const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
  const type = await api.call('POST', `${proj}/entity-types`, {
    token: owner,
    body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' },
  });
  expect(type.status, JSON.stringify(type.body)).toBe(201);
  const env = `${proj}/envs/default`;
  return {
    api,
    env,
    owner,
    async action(url) {
      const name = uniqueSlug('act');
      const response = await api.call('POST', `${proj}/actions`, { token: owner, body: webhookAction(name, url, { retry: { maxAttempts: 2, initialDelayMs: 0 } }) });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      return name;
    },
    async trigger(action, headers = {}) {
      const entity = uniqueSlug('vm');
      const created = await api.call('POST', `${env}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name: entity } });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      return api.call('POST', `${env}/entities/${entity}/actions/${action}`, { token: owner, headers });
    },
  };
}

describe('non-public addresses, judged by the special-purpose registries', () => {
  let s: Setup;
  let receiver: Receiver;
  const port = () => new URL(receiver.url).port;
  /** What each name answers the guard; every request a passing guard lets out goes to the receiver on 127.0.0.1. */
  const ANSWERS: Record<string, string[]> = {
    'compat.example.test': ['::7f00:1'],
    'compat-dotted.example.test': ['::127.0.0.1'],
    'mapped.example.test': ['::ffff:127.0.0.1'],
    'nat64.example.test': ['64:ff9b::a9fe:a9fe'],
    'srv6.example.test': ['5f00::1'],
    'dummy.example.test': ['100:0:0:1::1'],
    'documentation.example.test': ['3fff::1'],
    'sixtofour.example.test': ['2002:7f00:1::1'],
    'cgnat.example.test': ['100.64.0.1'],
    'benchmarking.example.test': ['198.18.0.1'],
    'public.example.test': ['8.8.8.8'],
  };

  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
    const api = await createTestApi({
      engine: {
        resolveHost: async (host) => ANSWERS[host] ?? [],
        fetch: (input, init) => fetch(String(input).replace(/\/\/[a-z0-9-]+\.example\.test/, '//127.0.0.1'), init),
      },
    });
    s = await setUp(api);
  });
  afterAll(async () => {
    await s.api.close();
    await receiver.close();
  });

  it.each([
    ['the IPv4-compatible [::127.0.0.1]', () => `http://[::127.0.0.1]:${port()}/hook`, 'IPv4-compatible Address (deprecated) carrying 127.0.0.1: Loopback'],
    ['the IPv4-compatible [::7f00:1]', () => `http://[::7f00:1]:${port()}/hook`, 'carrying 127.0.0.1: Loopback'],
    ['NAT64 carrying the metadata address', () => 'http://[64:ff9b::a9fe:a9fe]/latest', 'carrying 169.254.169.254: Link Local'],
    ['an SRv6 SID', () => 'http://[5f00::1]/hook', 'Segment Routing (SRv6) SIDs, 5f00::/16, RFC 9602'],
    ['shared address space', () => 'http://100.64.0.1/hook', 'Shared Address Space, 100.64.0.0/10, RFC 6598'],
    ['the IPv6 documentation prefix', () => 'http://[3fff::1]/hook', 'Documentation, 3fff::/20, RFC 9637'],
  ])('a literal host in %s is refused at trigger: 400 outbound_url_refused, naming the block; no run', async (_name, url, why) => {
    const response = await s.trigger(await s.action(url()));
    expectError(response, 400, 'outbound_url_refused');
    expect(response.body.error).toContain(why);
    await s.api.jobs.drain();
    expect(receiver.requests).toHaveLength(0);
  });

  it.each(Object.keys(ANSWERS).filter((name) => name !== 'public.example.test'))(
    'a name resolving into a non-global block (%s) is refused at delivery; the receiver gets nothing',
    async (name) => {
      const response = await s.trigger(await s.action(`http://${name}:${port()}/hook`));
      expect(response.status, JSON.stringify(response.body)).toBe(202);
      await s.api.jobs.drain();
      const run = (await s.api.call('GET', `${s.env}/action-runs/${response.body.id}`, { token: s.owner })).body;
      expect(run.status).toBe('failed');
      expect(run.error).toBe(`[delivery] refused to call the webhook URL: ${name} resolves to ${ANSWERS[name]![0]}, which is not a public address`);
      expect(receiver.requests).toHaveLength(0);
    },
  );

  it('a name resolving to a public address is delivered (the same path reaches the receiver)', async () => {
    const response = await s.trigger(await s.action(`http://public.example.test:${port()}/hook`));
    expect(response.status, JSON.stringify(response.body)).toBe(202);
    await s.api.jobs.drain();
    expect((await s.api.call('GET', `${s.env}/action-runs/${response.body.id}`, { token: s.owner })).body.status).toBe('running');
    expect(receiver.requests).toHaveLength(1);
    receiver.requests.length = 0;
  });
});

describe('the connection-time guard (Node host) judges by the registries too', () => {
  let s: Setup;
  let receiver: Receiver;
  const port = () => new URL(receiver.url).port;

  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
    // the guard's own lookup sees a public address; the connection's sees an IPv4-compatible or -mapped loopback
    const atConnection: Record<string, string> = { 'compat.example.test': '::7f00:1', 'mapped.example.test': '::ffff:127.0.0.1' };
    const api = await createTestApi({
      engine: {
        resolveHost: async () => ['8.8.8.8'],
        fetch: guardedFetch([], (hostname, _options, callback) => {
          const address = atConnection[hostname];
          callback(null, address ? [{ address, family: 6 } as LookupAddress] : []);
        }),
      },
    });
    s = await setUp(api);
  });
  afterAll(async () => {
    await s.api.close();
    await receiver.close();
  });

  it.each(['compat.example.test', 'mapped.example.test'])('%s: refused when connecting, nothing sent', async (name) => {
    const response = await s.trigger(await s.action(`http://${name}:${port()}/hook`));
    expect(response.status, JSON.stringify(response.body)).toBe(202);
    await s.api.jobs.drain();
    const run = (await s.api.call('GET', `${s.env}/action-runs/${response.body.id}`, { token: s.owner })).body;
    expect(run.status).toBe('failed');
    expect(run.error).toMatch(new RegExp(`^\\[delivery\\] refused to call the webhook URL: ${name} resolves to .*, which is not a public address$`));
    expect(receiver.requests).toHaveLength(0);
  });
});

describe('the callback base is API_BASE_URL, never the trigger request\'s Host header', () => {
  let receiver: Receiver;
  beforeAll(async () => {
    receiver = await startReceiver({ status: 200 });
  });
  afterAll(() => receiver.close());

  /** POSTs over a real socket with the given Host header (fetch would not send one of our choosing). */
  const postWithHost = (base: string, path: string, host: string, token: string) =>
    new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = request(`${base}${path}`, { method: 'POST', headers: { host, authorization: `Bearer ${token}` } }, (res) => {
        let text = '';
        res.on('data', (chunk) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
      });
      req.on('error', reject);
      req.end();
    });

  it('a trigger sent with Host: attacker.example hands the receiver a callback URL on API_BASE_URL', async () => {
    const api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: receiver.host, API_BASE_URL: 'https://api.cellplane.example' } });
    try {
      const s = await setUp(api);
      const action = await s.action(`${receiver.url}/hook`);
      const entity = uniqueSlug('vm');
      expect((await api.call('POST', `${s.env}/entities`, { token: s.owner, body: { kind: 'Entity', entityType: 'vm', name: entity } })).status).toBe(201);
      const base = await api.listen();
      const response = await postWithHost(base, `${s.env}/entities/${entity}/actions/${action}`, 'attacker.example', s.owner);
      expect(response.status, JSON.stringify(response.body)).toBe(202);
      await api.jobs.drain();
      const [delivered] = await receiver.waitForRequests(1);
      const { callbackUrl } = JSON.parse(delivered!.body) as { callbackUrl: string };
      expect(callbackUrl).toMatch(new RegExp(`^https://api\\.cellplane\\.example/[0-9a-f-]{36}/[0-9a-f-]{36}/envs/[0-9a-f-]{36}/action-runs/${response.body.id}/callback$`));
      expect(callbackUrl).not.toContain('attacker');
    } finally {
      await api.close();
    }
  });

  it('a platform wired without API_BASE_URL refuses the trigger (500) rather than fall back to the Host header; nothing is written', async () => {
    const api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: receiver.host, API_BASE_URL: '' } });
    try {
      expect(api.platform.config.apiBaseUrl).toBeUndefined();
      const s = await setUp(api);
      const response = await s.trigger(await s.action(`${receiver.url}/hook`), { host: 'attacker.example' });
      expectError(response, 500, 'internal');
      expect((await api.call('GET', `${s.env}/action-runs`, { token: s.owner })).body).toEqual([]);
    } finally {
      await api.close();
    }
  });
});

describe('API_BASE_URL at start', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));
  const DATABASE_URL = 'postgres://cellplane:db-password-never-shown@127.0.0.1:9/cellplane';
  const { API_BASE_URL: _base, ...secretsOnly } = TEST_SECRETS;

  it('loadConfig names API_BASE_URL, never a value, when a host requires it', () => {
    let thrown: unknown;
    try {
      loadConfig({ ...secretsOnly, DATABASE_URL }, { apiBaseUrlRequired: 'when DATABASE_URL is set (self-hosting)' });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).problems).toEqual([
      { variable: 'API_BASE_URL', expects: expect.stringContaining('is required when DATABASE_URL is set (self-hosting)') },
    ]);
    expect((thrown as ConfigError).message).not.toContain('db-password-never-shown');
    expect((thrown as ConfigError).message).not.toContain(TEST_SECRETS.AUTH_SECRET);
    // with it, or without the requirement, the config loads
    expect(loadConfig({ ...secretsOnly, DATABASE_URL, API_BASE_URL: 'https://api.example.com/' }, { apiBaseUrlRequired: 'x' }).apiBaseUrl).toBe(
      'https://api.example.com',
    );
    expect(loadConfig({ ...secretsOnly, DATABASE_URL }).apiBaseUrl).toBeUndefined();
  });

  it('with it and another bad variable, both are reported at once', () => {
    expect(() => loadConfig({ ...secretsOnly, PORT: 'x' }, { apiBaseUrlRequired: 'here' })).toThrow(/PORT: [^\n]+\n {2}API_BASE_URL: is required here/);
  });

  it('the Node host with DATABASE_URL refuses to start without it (before connecting)', async () => {
    await expect(createNodePlatform({ ...secretsOnly, DATABASE_URL }, { logSink: () => {} })).rejects.toThrow(
      /API_BASE_URL: is required when DATABASE_URL is set/,
    );
  });

  it('npm start with DATABASE_URL and no API_BASE_URL exits 1, naming it, not printing the connection string', async () => {
    const { code, output } = await runFailingStart({ ...secretsOnly, DATABASE_URL, API_BASE_URL: '' });
    expect(code).toBe(1);
    expect(output).toContain('API_BASE_URL: is required when DATABASE_URL is set (self-hosting)');
    expect(output).not.toContain('db-password-never-shown');
  });

  it('the embedded Node host (no DATABASE_URL) defaults it to its own listening address', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellplane-base-'));
    dirs.push(dir);
    const node = await createNodePlatform({ ...secretsOnly, CELLPLANE_DATA_DIR: dir, PORT: '4567' }, { logSink: () => {} });
    try {
      expect(node.platform.config.apiBaseUrl).toBe('http://127.0.0.1:4567');
    } finally {
      await node.close();
    }
  });

  it('the listening address: HOST as given, a wildcard as the loopback address of its family', () => {
    expect(listeningUrl(undefined, 3000)).toBe('http://127.0.0.1:3000');
    expect(listeningUrl('0.0.0.0', 3000)).toBe('http://127.0.0.1:3000');
    expect(listeningUrl('::', 8080)).toBe('http://[::1]:8080');
    expect(listeningUrl('::1', 8080)).toBe('http://[::1]:8080');
    expect(listeningUrl('192.168.1.20', 80)).toBe('http://192.168.1.20:80');
  });
});
