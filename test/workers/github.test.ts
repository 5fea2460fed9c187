import { exports } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, inject, it } from 'vitest';
import { githubInstallations } from '../../src/db/schema';
import { installationEvent, installationRepositoriesEvent, signEvent } from '../support/github-events';
import { withDb } from './worker-database';

/**
 * The GitHub App in workerd, through the real Worker entry (src/worker.ts):
 * its key is a PKCS#1 PEM (global-setup.ts), converted and used by WebCrypto
 * inside workerd, and it talks to the local GitHub server in Node, which
 * verifies the App's JWT against the public key. The install URL and
 * callback, then signed App webhooks. The steps build on each other.
 */

const BASE = 'http://cellplane.test';
const github = inject('github');
const suffix = Math.random().toString(36).slice(2, 8);
const installationId = 600_000 + Math.floor(Math.random() * 100_000);

function call(method: string, path: string, options: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...(options.headers ?? {}) };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  let body = options.rawBody;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  return exports.default.fetch(`${BASE}${path}`, { method, headers, body, redirect: 'manual' });
}

async function control(method: string, path: string, body?: unknown) {
  const response = await fetch(`${github.url}/__control${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  expect(response.status, `${method} /__control${path}`).toBeLessThan(300);
  return response.json() as Promise<any>;
}

async function expectError(response: Response, status: number, code: string) {
  const body = (await response.json()) as { error: unknown; code: unknown };
  expect({ status: response.status, code: body.code }).toEqual({ status, code });
  expect(typeof body.error).toBe('string');
}

const rowOf = () => withDb(async (db) => (await db.select().from(githubInstallations).where(eq(githubInstallations.installationId, installationId)))[0]);

describe.sequential('the GitHub App on the Worker host', () => {
  let token = '';
  let orgId = '';
  const slug = `gh-${suffix}`;
  let state = '';

  it('gives an owner the install URL of the App', async () => {
    const signUp = await call('POST', '/api/auth/sign-up/email', { body: { email: `gh-${suffix}@example.com`, password: 'correct horse battery staple', name: 'GH' } });
    expect(signUp.status).toBe(200);
    token = signUp.headers.get('set-auth-token') ?? '';
    const created = await call('POST', '/orgs', { token, body: { name: 'GitHub Org', slug } });
    expect(created.status).toBe(201);
    orgId = ((await created.json()) as { id: string }).id;

    const response = await call('POST', '/github/install-url', { token, body: { orgId: slug } });
    expect(response.status).toBe(200);
    const url = new URL(((await response.json()) as { url: string }).url);
    expect(`${url.origin}${url.pathname}`).toBe(`https://github.com/apps/${github.appSlug}/installations/new`);
    state = url.searchParams.get('state') ?? '';
    expect(state.split('.')).toHaveLength(3);
  });

  it('records the installation on the callback, reading it from the local GitHub as the App (a PKCS#1 key, in workerd)', async () => {
    await control('POST', '/installations', { id: installationId, account: `acme-${suffix}`, repositories: [`acme-${suffix}/infra`] });
    await control('DELETE', '/requests');
    const response = await call('GET', `/github/install-callback?installation_id=${installationId}&setup_action=install&state=${encodeURIComponent(state)}`);
    const body = (await response.json()) as { installation: Record<string, unknown> };
    expect(response.status, JSON.stringify(body)).toBe(200);
    expect(body.installation).toMatchObject({ installationId, orgId, status: 'active', accountLogin: `acme-${suffix}`, grantedRepos: [`acme-${suffix}/infra`] });
    const requests = (await control('GET', '/requests')) as { route: string; auth: string; status: number }[];
    expect(requests.map((request) => [request.route, request.auth, request.status])).toEqual([
      ['get_installation', 'app', 200],
      ['create_installation_token', 'app', 201],
      ['list_installation_repositories', 'installation', 200],
    ]);
  });

  it('refuses a forged state and an expired-looking one with 401', async () => {
    await expectError(await call('GET', `/github/install-callback?installation_id=${installationId}&state=${state.slice(0, -4)}AAAA`), 401, 'unauthorized');
    await expectError(await call('GET', `/github/install-callback?installation_id=${installationId}`), 401, 'unauthorized');
  });

  it('applies a signed installation_repositories event, and refuses a badly signed one', async () => {
    const event = await signEvent('installation_repositories', installationRepositoriesEvent('added', { installationId, added: [`acme-${suffix}/site`] }));
    const response = await call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true, outcome: { kind: 'repositories-updated', installationId, added: 1, removed: 0, granted: 2 } });
    expect((await rowOf())!.grantedRepos).toEqual([`acme-${suffix}/infra`, `acme-${suffix}/site`]);

    const forged = await signEvent('installation', installationEvent('deleted', { installationId }), 'not-the-secret');
    await expectError(await call('POST', '/webhooks/github', { rawBody: forged.body, headers: forged.headers }), 401, 'invalid_signature');
    expect((await rowOf())!.status).toBe('active');
  });

  it('suspends the installation on a signed installation.suspend', async () => {
    const event = await signEvent('installation', installationEvent('suspend', { installationId }));
    const response = await call('POST', '/webhooks/github', { rawBody: event.body, headers: event.headers });
    expect(await response.json()).toEqual({ ok: true, outcome: { kind: 'installation-suspended', installationId, status: 'suspended' } });
    expect((await rowOf())!.status).toBe('suspended');
  });
});
