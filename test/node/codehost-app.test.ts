import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CodehostApiError, codehostApp, CodehostApp, forgetInstallationTokens } from '../../src/codehost/app';
import { signInstallState, verifyInstallState } from '../../src/codehost/install-state';
import { PrivateKeyError, toPkcs8Pem } from '../../src/codehost/private-key';
import { loadConfig, type Config } from '../../src/config';
import { ApiError } from '../../src/http/errors';
import { createLogger } from '../../src/logger';
import { systemClock } from '../../src/platform';
import { Secret } from '../../src/secret';
import { codehostEnv, faults, generateAppKeys, pemBodyLines, startGitHubServer, type AppKeys, type GitHubServer } from '../support/github-server';
import { manualClock, TEST_SECRETS } from '../support/node-app';

/**
 * The GitHub App client (src/codehost/) against the local GitHub server:
 * both key formats really mint installation tokens (the server checks the
 * App's JWT against its public key), the token cache, the errors GitHub
 * answers with, and the install-state token.
 */

const APP_ID = '4242';

describe('the GitHub App client', () => {
  let keys: AppKeys;
  let github: GitHubServer;
  const logs: string[] = [];
  const logger = createLogger({ level: 'debug', sink: (line) => logs.push(line) });

  const configWith = (env: Record<string, string> = {}): Config =>
    loadConfig({ ...TEST_SECRETS, ...codehostEnv(github, keys), ...env });
  const appFor = (config: Config, clock = systemClock) => codehostApp({ config, clock, logger });

  beforeAll(async () => {
    keys = generateAppKeys();
    github = await startGitHubServer({ appId: APP_ID, publicKeyPem: keys.publicKeyPem });
    github.addInstallation({ id: 101, account: 'acme', repositories: ['acme/infra', 'acme/Website'] });
    github.addInstallation({ id: 102, account: 'beta', repositories: ['beta/infra'] });
  });
  afterAll(async () => {
    await github.close();
    // neither the key nor any token reached a log line
    const secrets = [...pemBodyLines(keys.pkcs1Pem), ...pemBodyLines(keys.pkcs8Pem), ...github.issuedTokens.map((issued) => issued.token)];
    for (const line of logs) for (const secret of secrets) expect(line).not.toContain(secret);
  });

  describe('the private key', () => {
    it('converts PKCS#1 to the same PKCS#8 Node exports, and leaves PKCS#8 as it is', () => {
      const fromPkcs1 = toPkcs8Pem(keys.pkcs1Pem);
      const fromPkcs8 = toPkcs8Pem(keys.pkcs8Pem);
      expect(fromPkcs1.format).toBe('pkcs1');
      expect(fromPkcs8.format).toBe('pkcs8');
      expect(fromPkcs1.pem.replace(/\s/g, '')).toBe(keys.pkcs8Pem.replace(/\s/g, ''));
      expect(fromPkcs8.pem).toBe(fromPkcs1.pem);
    });

    it('takes a key pasted on one line with \\n for its line breaks', () => {
      expect(toPkcs8Pem(keys.pkcs1Pem.replace(/\n/g, '\\n')).pem).toBe(toPkcs8Pem(keys.pkcs8Pem).pem);
    });

    it.each([
      ['not PEM at all', '-----BEGIN RSA PRIVATE KEY-----\nnot base64 at all!\n-----END RSA PRIVATE KEY-----', /not valid PEM|PKCS#1/],
      ['a PKCS#1 label around something else', '-----BEGIN RSA PRIVATE KEY-----\nMAMCAQA=\n-----END RSA PRIVATE KEY-----', /does not hold a PKCS#1/],
      ['an OpenSSH key', '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----', /OpenSSH/],
      ['an encrypted key', '-----BEGIN ENCRYPTED PRIVATE KEY-----\nMAMCAQA=\n-----END ENCRYPTED PRIVATE KEY-----', /encrypted/],
      ['a certificate', '-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----', /no private key block/],
    ])('refuses %s, naming the variable and never the key', (_name, pem, message) => {
      let error: unknown;
      try {
        toPkcs8Pem(pem);
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(PrivateKeyError);
      expect(String((error as Error).message)).toMatch(/^CODEHOST_APP_PRIVATE_KEY /);
      expect(String((error as Error).message)).toMatch(message);
      expect(String((error as Error).message)).not.toContain('MAMCAQA');
    });
  });

  describe.each(['pkcs1', 'pkcs8'] as const)('with a %s key', (keyFormat) => {
    it('mints an installation token through the local GitHub, which verified the JWT against the public key', async () => {
      const app = await appFor(configWith({ CODEHOST_APP_PRIVATE_KEY: keyFormat === 'pkcs1' ? keys.pkcs1Pem : keys.pkcs8Pem }));
      const before = github.requestsTo('create_installation_token').length;
      const token = await app.installationToken(101);
      expect(token.token).toMatch(/^ghs_[A-Za-z0-9]{36}$/);
      expect(token.expiresAt.getTime()).toBeGreaterThan(Date.now() + 55 * 60 * 1000);
      const minted = github.requestsTo('create_installation_token').slice(before);
      expect(minted).toHaveLength(1);
      expect(minted[0]).toMatchObject({ auth: 'app', status: 201, installationId: 101 });
      // and the token works as the installation
      expect(await app.grantedRepositories(101)).toEqual({ repositorySelection: 'selected', fullNames: ['acme/infra', 'acme/website'] });
      expect(github.requestsTo('list_installation_repositories').at(-1)).toMatchObject({ auth: 'installation', installationId: 101, status: 200 });
    });
  });

  it('is refused by GitHub when signed with another key (the server checks the signature)', async () => {
    const other = generateAppKeys();
    const app = await appFor(configWith({ CODEHOST_APP_PRIVATE_KEY: other.pkcs1Pem }));
    const error = await app.installationToken(101).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CodehostApiError);
    expect(error).toMatchObject({ status: 401, retryable: false, githubMessage: 'A JSON web token could not be decoded' });
    expect(github.requestsTo('create_installation_token').at(-1)).toMatchObject({ auth: 'refused', status: 401 });
  });

  describe('the token cache', () => {
    it('serves a token again until five minutes before it expires, one mint per installation', async () => {
      const app = await appFor(configWith());
      const count = () => github.requestsTo('create_installation_token').length;
      const before = count();
      const [first, concurrent] = await Promise.all([app.installationToken(101), app.installationToken(101)]);
      expect(concurrent.token).toBe(first.token);
      expect((await app.installationToken(101)).token).toBe(first.token);
      expect(count() - before).toBe(1);
      // another installation has a token of its own
      const other = await app.installationToken(102);
      expect(other.token).not.toBe(first.token);
      expect(count() - before).toBe(2);
    });

    it('mints again once the cached token is within five minutes of expiring', async () => {
      const clock = manualClock(new Date());
      const app = await appFor(configWith(), clock);
      const count = () => github.requestsTo('create_installation_token').length;
      const first = await app.installationToken(101);
      const before = count();
      clock.advance(54 * 60 * 1000);
      expect((await app.installationToken(101)).token).toBe(first.token);
      expect(count()).toBe(before);
      clock.advance(2 * 60 * 1000);
      expect((await app.installationToken(101)).token).not.toBe(first.token);
      expect(count()).toBe(before + 1);
    });

    it('never caches a token that lives less than the margin', async () => {
      const shortLived = await startGitHubServer({ appId: APP_ID, publicKeyPem: keys.publicKeyPem, tokenLifetimeSeconds: 240 });
      try {
        shortLived.addInstallation({ id: 101, account: 'acme', repositories: ['acme/infra'] });
        const app = await appFor(loadConfig({ ...TEST_SECRETS, ...codehostEnv(shortLived, keys) }));
        const a = await app.installationToken(101);
        const b = await app.installationToken(101);
        expect(b.token).not.toBe(a.token);
        expect(shortLived.requestsTo('create_installation_token')).toHaveLength(2);
      } finally {
        await shortLived.close();
      }
    });

    it('forgets an installation\'s token when told to, and keeps no mint that was under way then', async () => {
      const config = configWith();
      const app = await appFor(config);
      const count = () => github.requestsTo('create_installation_token').length;
      const first = await app.installationToken(101);
      await forgetInstallationTokens(config, 101);
      const before = count();
      const second = await app.installationToken(101);
      expect(second.token).not.toBe(first.token);
      expect(count()).toBe(before + 1);

      // a clear while a mint is in flight: that mint answers its callers but is not cached
      app.forgetInstallationTokens(101);
      github.fail('create_installation_token', faults.delay(150));
      const inFlight = app.installationToken(101);
      await new Promise((resolve) => setTimeout(resolve, 30));
      app.forgetInstallationTokens(101);
      const third = await inFlight;
      const fourth = await app.installationToken(101);
      expect(fourth.token).not.toBe(third.token);
    });

    it('is per configuration: another server instance keeps its own tokens', async () => {
      const a = await appFor(configWith());
      const b = await appFor(configWith());
      expect(a).not.toBe(b);
      expect((await a.installationToken(102)).token).not.toBe((await b.installationToken(102)).token);
      // and one configuration has one client
      const config = configWith();
      expect(await appFor(config)).toBe(await appFor(config));
    });
  });

  describe('what GitHub answers', () => {
    it('an unknown installation is undefined; a suspended one cannot mint (403, not retried)', async () => {
      const app = await appFor(configWith());
      expect(await app.getInstallation(999)).toBeUndefined();
      github.addInstallation({ id: 103, account: 'gamma', repositories: ['gamma/infra'], suspended: true });
      expect(await app.getInstallation(103)).toMatchObject({ id: 103, accountLogin: 'gamma', accountType: 'Organization', repositorySelection: 'selected' });
      expect((await app.getInstallation(103))!.suspendedAt).not.toBeNull();
      const error = await app.installationToken(103).catch((caught: unknown) => caught);
      expect(error).toMatchObject({ status: 403, retryable: false, githubMessage: 'This installation has been suspended' });
    });

    it('5xx and network failures are retryable; a rate limit is retryable at x-ratelimit-reset', async () => {
      const app = await appFor(configWith());
      github.fail('get_installation', faults.serverError(502));
      expect(await app.getInstallation(101).catch((caught: unknown) => caught)).toMatchObject({ name: 'CodehostApiError', status: 502, retryable: true });
      github.fail('get_installation', faults.networkReset());
      expect(await app.getInstallation(101).catch((caught: unknown) => caught)).toMatchObject({ status: undefined, retryable: true });
      github.fail('get_installation', faults.rateLimited(120));
      const limited = (await app.getInstallation(101).catch((caught: unknown) => caught)) as CodehostApiError;
      expect(limited).toMatchObject({ status: 403, retryable: true });
      expect(limited.retryAt!.getTime()).toBeGreaterThan(Date.now() + 100_000);
      github.fail('get_installation', faults.secondaryRateLimit(30));
      const secondary = (await app.getInstallation(101).catch((caught: unknown) => caught)) as CodehostApiError;
      expect(secondary).toMatchObject({ status: 403, retryable: true });
      expect(secondary.retryAt!.getTime()).toBeLessThan(Date.now() + 31_000);
      // and then it works again
      expect(await app.getInstallation(101)).toMatchObject({ id: 101 });
    });

    it('gives up on a call GitHub does not answer within the attempt timeout (a retryable network error)', async () => {
      const app = await appFor(configWith({ DELIVERY_ATTEMPT_TIMEOUT_SECONDS: '1' }));
      github.fail('get_installation', faults.delay(1500));
      // answered (200) only after 1.5 s: the client has given up by then
      expect(await app.getInstallation(101).catch((caught: unknown) => caught)).toMatchObject({ name: 'CodehostApiError', status: undefined, retryable: true });
    });

    it('reads every page of a large installation', async () => {
      const many = Array.from({ length: 230 }, (_, i) => `big/repo-${String(i).padStart(3, '0')}`);
      github.addInstallation({ id: 104, account: 'big', repositories: many });
      const app = await appFor(configWith());
      const before = github.requestsTo('list_installation_repositories').length;
      const granted = await app.grantedRepositories(104);
      expect(granted.fullNames).toHaveLength(230);
      expect(granted.fullNames).toEqual([...many].sort());
      expect(github.requestsTo('list_installation_repositories').length - before).toBe(3);
    });
  });

  describe('configuration', () => {
    it('is 503 codehost_not_configured when any CODEHOST_APP_* is missing', async () => {
      for (const missing of ['CODEHOST_APP_ID', 'CODEHOST_APP_NAME', 'CODEHOST_APP_PRIVATE_KEY', 'CODEHOST_APP_WEBHOOK_SECRET']) {
        const error = await appFor(configWith({ [missing]: '' })).catch((caught: unknown) => caught);
        expect(error).toBeInstanceOf(ApiError);
        expect((error as ApiError).code).toBe('codehost_not_configured');
        expect((error as ApiError).status).toBe(503);
      }
    });

    it('is 503 when the key cannot be used, says why without the key, and logs it once', async () => {
      const config = configWith({ CODEHOST_APP_PRIVATE_KEY: '-----BEGIN RSA PRIVATE KEY-----\nMAMCAQA=\n-----END RSA PRIVATE KEY-----' });
      const before = logs.length;
      for (let i = 0; i < 2; i++) {
        const error = (await appFor(config).catch((caught: unknown) => caught)) as ApiError;
        expect(error.code).toBe('codehost_not_configured');
        expect(error.message).toMatch(/CODEHOST_APP_PRIVATE_KEY .*PKCS#1/);
        expect(error.message).not.toContain('MAMCAQA');
      }
      const lines = logs.slice(before).filter((line) => line.includes('the GitHub App cannot be used'));
      expect(lines).toHaveLength(1);
      expect(lines[0]).not.toContain('MAMCAQA');
    });

    it('is never built for a configuration without the App', async () => {
      const config = loadConfig({ ...TEST_SECRETS });
      expect(config.codehostApp).toBeUndefined();
      await expect(forgetInstallationTokens(config, 1)).resolves.toBeUndefined();
      expect(CodehostApp).toBeTypeOf('function');
    });
  });

  describe('the install state', () => {
    const secret = new Secret(TEST_SECRETS.AUTH_SECRET);
    const claims = { orgId: '0f8fad5b-d9cb-469f-a165-70867728950e', userId: '7c9e6679-7425-40de-944b-e07fc1f90ae7' };

    it('names the organization and the user, for ten minutes', async () => {
      const now = new Date('2026-11-21T10:00:00.000Z');
      const state = await signInstallState(secret, claims, now);
      expect(await verifyInstallState(secret, state, new Date(now.getTime() + 9 * 60_000))).toEqual({ ok: true, claims });
      expect(await verifyInstallState(secret, state, new Date(now.getTime() + 11 * 60_000))).toEqual({ ok: false, reason: 'expired' });
    });

    it('is refused when signed with another secret, altered, or a token of another kind', async () => {
      const now = new Date();
      const state = await signInstallState(secret, claims, now);
      expect(await verifyInstallState(new Secret('another-auth-secret-0123456789abcdefghij'), state, now)).toEqual({ ok: false, reason: 'invalid' });
      const [header, payload, signature] = state.split('.');
      const forged = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>;
      forged.org = '11111111-1111-4111-8111-111111111111';
      const tampered = `${header}.${Buffer.from(JSON.stringify(forged)).toString('base64url')}.${signature}`;
      expect(await verifyInstallState(secret, tampered, now)).toEqual({ ok: false, reason: 'invalid' });
      expect(await verifyInstallState(secret, 'not.a.jwt', now)).toEqual({ ok: false, reason: 'invalid' });
      // a run's callback token is signed with AUTH_SECRET too, under another derived key and audience
      const { signCallbackToken } = await import('../../src/auth/callback-token');
      const callback = await signCallbackToken(secret, { runId: claims.userId, orgId: claims.orgId, projectId: claims.orgId, envId: claims.orgId }, new Date(now.getTime() + 60_000));
      expect(await verifyInstallState(secret, callback, now)).toEqual({ ok: false, reason: 'invalid' });
    });
  });
});
