import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config';
import { createWorkerPlatform } from '../../src/worker-platform';

/**
 * The Worker builds `{{ run.callbackUrl }}` from API_BASE_URL only, so it
 * refuses to start without it (docs/decisions.md, Outbound URLs and the
 * callback base); the global setup binds it like the other variables.
 */
describe('API_BASE_URL on the Worker', () => {
  it('is bound for the tests, and the platform takes it', () => {
    expect(createWorkerPlatform(env).config.apiBaseUrl).toBe('http://cellplane.test');
  });

  it('refuses to start without it, naming it and never a value', () => {
    for (const unset of [undefined, '']) {
      let thrown: unknown;
      try {
        createWorkerPlatform({ ...env, API_BASE_URL: unset });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(ConfigError);
      const problems = (thrown as ConfigError).problems;
      expect(problems).toEqual([{ variable: 'API_BASE_URL', expects: expect.stringContaining('is required on the Cloudflare Worker host') }]);
      const message = (thrown as ConfigError).message;
      for (const value of [env.DATABASE_URL, env.ENCRYPTION_KEY, env.AUTH_SECRET] as string[]) expect(message).not.toContain(value);
    }
  });

  it('is reported together with the other problems of the environment', () => {
    const { DATABASE_URL: _database, API_BASE_URL: _base, ...rest } = env;
    let thrown: unknown;
    try {
      createWorkerPlatform(rest as typeof env);
    } catch (error) {
      thrown = error;
    }
    expect((thrown as ConfigError).problems.map((p) => p.variable).sort()).toEqual(['API_BASE_URL', 'DATABASE_URL']);
  });

  it('the running Worker serves with it (a health check through the entry)', async () => {
    const response = await exports.default.fetch('http://cellplane.test/healthz');
    expect(response.status).toBe(200);
  });
});
