import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config';
import { TEST_SECRETS } from '../support/node-app';

const problemsOf = (env: Record<string, string | undefined>) => {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return { problems: (error as ConfigError).problems, message: (error as Error).message };
  }
  throw new Error('expected loadConfig to throw');
};

describe('loadConfig', () => {
  it('applies SPEC defaults', () => {
    const config = loadConfig(TEST_SECRETS);
    expect(config).toMatchObject({
      deployment: 'cloud',
      port: 3000,
      queueDriver: 'pg',
      trustedOrigins: [],
      outboundAllowedHosts: [],
      rateLimitPerMinute: 600,
      codehostApp: undefined,
    });
    expect(config.databaseUrl).toBeUndefined();
  });

  it('parses every variable', () => {
    const config = loadConfig({
      ...TEST_SECRETS,
      SERVICE_DEPLOYMENT: 'oss',
      PORT: '8080',
      QUEUE_DRIVER: 'cloudflare',
      DATABASE_URL: 'postgresql://u:p@db.example.com/cellplane',
      AUTH_URL: 'https://auth.example.com/',
      API_BASE_URL: 'https://api.example.com/',
      TRUSTED_ORIGINS: 'https://a.example.com, https://b.example.com',
      SERVICE_UI_BASE_URL: 'https://ui.example.com',
      CODEHOST_APP_ID: '12345',
      CODEHOST_APP_NAME: 'cellplane-app',
      CODEHOST_APP_PRIVATE_KEY: '-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----',
      CODEHOST_APP_WEBHOOK_SECRET: 'whsec',
    });
    expect(config.deployment).toBe('oss');
    expect(config.port).toBe(8080);
    expect(config.queueDriver).toBe('cloudflare');
    expect(config.databaseUrl?.reveal()).toBe('postgresql://u:p@db.example.com/cellplane');
    expect(config.apiBaseUrl).toBe('https://api.example.com');
    expect(config.trustedOrigins).toEqual(['https://a.example.com', 'https://b.example.com']);
    expect(config.codehostApp?.appId).toBe('12345');
    expect(config.codehostApp?.privateKey.reveal()).toContain('BEGIN RSA');
  });

  it('leaves the code-hosting app unconfigured unless all four variables are set', () => {
    const config = loadConfig({ ...TEST_SECRETS, CODEHOST_APP_ID: '1', CODEHOST_APP_NAME: 'x' });
    expect(config.codehostApp).toBeUndefined();
  });

  it.each([
    [{ ENCRYPTION_KEY: undefined }, 'ENCRYPTION_KEY', 'is required'],
    [{ ENCRYPTION_KEY: 'abcd' }, 'ENCRYPTION_KEY', '32 bytes as 64 hexadecimal characters'],
    [{ ENCRYPTION_KEY: 'z'.repeat(64) }, 'ENCRYPTION_KEY', '32 bytes as 64 hexadecimal characters'],
    [{ AUTH_SECRET: undefined }, 'AUTH_SECRET', 'is required'],
    [{ AUTH_SECRET: 'short-secret' }, 'AUTH_SECRET', 'at least 32 bytes'],
    [{ PORT: 'eighty' }, 'PORT', 'integer port'],
    [{ PORT: '70000' }, 'PORT', 'integer port'],
    [{ SERVICE_DEPLOYMENT: 'saas' }, 'SERVICE_DEPLOYMENT', '"oss" or "cloud"'],
    [{ QUEUE_DRIVER: 'redis' }, 'QUEUE_DRIVER', '"pg" or "cloudflare"'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL', 'postgres://'],
    [{ API_BASE_URL: 'not a url' }, 'API_BASE_URL', 'absolute URL'],
    [{ CODEHOST_APP_ID: 'abc' }, 'CODEHOST_APP_ID', 'numeric'],
  ])('rejects %j naming %s', (override, variable, expects) => {
    const { problems, message } = problemsOf({ ...TEST_SECRETS, ...override });
    expect(problems.map((p) => p.variable)).toContain(variable);
    expect(problems.find((p) => p.variable === variable)!.expects).toContain(expects);
    expect(message).toContain(variable);
  });

  it('refuses QUEUE_DRIVER=sqs and says what takes its role', () => {
    const { problems } = problemsOf({ ...TEST_SECRETS, QUEUE_DRIVER: 'sqs' });
    expect(problems).toEqual([
      { variable: 'QUEUE_DRIVER', expects: expect.stringContaining('Cloudflare Queues') },
    ]);
  });

  it('never echoes a rejected secret value', () => {
    const badKey = 'deadbeef-not-hex-but-secret-material-XYZ';
    const badUrl = 'mysql://admin:hunter2-password@db/x';
    const { message, problems } = problemsOf({ ...TEST_SECRETS, ENCRYPTION_KEY: badKey, DATABASE_URL: badUrl });
    const text = `${message}${JSON.stringify(problems)}`;
    expect(text).not.toContain(badKey);
    expect(text).not.toContain('hunter2');
  });

  it('keeps secrets out of string and JSON renderings of the config', () => {
    const config = loadConfig({ ...TEST_SECRETS, DATABASE_URL: 'postgres://u:pw-xyz@h/db' });
    const rendered = `${JSON.stringify(config)} ${String(config.authSecret)} ${config.encryptionKey}`;
    expect(rendered).not.toContain(TEST_SECRETS.AUTH_SECRET);
    expect(rendered).not.toContain(TEST_SECRETS.ENCRYPTION_KEY);
    expect(rendered).not.toContain('pw-xyz');
    expect(rendered).toContain('[redacted]');
  });
});
