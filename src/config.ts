import { z } from 'zod';
import { Secret } from './secret';

/**
 * Server configuration: every variable of SPEC "Deployment modes and server
 * configuration", plus the few this implementation adds (docs/configuration.md).
 * Parsed once at start; services receive the result, never the environment.
 * Error messages name the variable and what it expects, never its value.
 */

const secretOf = (schema: z.ZodString) => schema.transform((value) => new Secret(value));

const optionalUrl = z
  .url({ message: 'expects an absolute URL, e.g. https://api.example.com' })
  .transform((value) => value.replace(/\/+$/, ''))
  .optional();

const commaList = z
  .string()
  .optional()
  .transform((value) =>
    (value ?? '')
      .split(',')
      .map((item) => item.trim())
      .filter((item) => item.length > 0),
  );

const ConfigSchema = z.object({
  SERVICE_DEPLOYMENT: z
    .enum(['oss', 'cloud'], { message: 'expects "oss" or "cloud"' })
    .default('cloud'),
  PORT: z.coerce
    .number({ message: 'expects an integer port between 1 and 65535' })
    .int({ message: 'expects an integer port between 1 and 65535' })
    .min(1, { message: 'expects an integer port between 1 and 65535' })
    .max(65535, { message: 'expects an integer port between 1 and 65535' })
    .default(3000),
  QUEUE_DRIVER: z
    .string()
    .default('pg')
    .superRefine((value, ctx) => {
      if (value === 'sqs') {
        ctx.addIssue({
          code: 'custom',
          message:
            'expects "pg" or "cloudflare": "sqs" is not supported; on the Cloudflare Worker host, Cloudflare Queues take the serverless role (QUEUE_DRIVER=cloudflare)',
        });
      } else if (value !== 'pg' && value !== 'cloudflare') {
        ctx.addIssue({ code: 'custom', message: 'expects "pg" or "cloudflare"' });
      }
    })
    .transform((value) => value as 'pg' | 'cloudflare'),
  DATABASE_URL: secretOf(
    z.string().regex(/^postgres(ql)?:\/\//, { message: 'expects a postgres:// or postgresql:// connection string' }),
  ).optional(),
  ENCRYPTION_KEY: secretOf(
    z.string().regex(/^[0-9a-fA-F]{64}$/, { message: 'expects 32 bytes as 64 hexadecimal characters' }),
  ),
  AUTH_SECRET: secretOf(
    z.string().refine((value) => new TextEncoder().encode(value).length >= 32, {
      message: 'expects a string of at least 32 bytes',
    }),
  ),
  AUTH_URL: optionalUrl,
  API_BASE_URL: optionalUrl,
  TRUSTED_ORIGINS: commaList,
  SERVICE_UI_BASE_URL: optionalUrl,
  CODEHOST_APP_ID: z.string().regex(/^[0-9]+$/, { message: 'expects a numeric app id' }).optional(),
  CODEHOST_APP_NAME: z.string().min(1).optional(),
  CODEHOST_APP_PRIVATE_KEY: secretOf(
    z.string().includes('-----BEGIN', { message: 'expects a PEM private key (PKCS#1 or PKCS#8)' }),
  ).optional(),
  CODEHOST_APP_WEBHOOK_SECRET: secretOf(z.string().min(1)).optional(),
  // GitHub Enterprise Server, or a local test server (docs/codehost.md)
  CODEHOST_API_URL: z
    .url({ message: 'expects an absolute URL, e.g. https://api.github.com' })
    .transform((value) => value.replace(/\/+$/, ''))
    .default('https://api.github.com'),
  OUTBOUND_ALLOWED_HOSTS: commaList,
  SMTP_URL: secretOf(
    z.string().regex(/^smtps?:\/\//, { message: 'expects an smtp:// or smtps:// URL, e.g. smtp://127.0.0.1:2525' }),
  ).optional(),
  MAIL_FROM: z.string().min(3).default('Cellplane <no-reply@cellplane.localhost>'),
  SUPER_ADMIN_EMAILS: commaList,
  RATE_LIMIT_PER_MINUTE: z.coerce
    .number({ message: 'expects a positive integer' })
    .int({ message: 'expects a positive integer' })
    .positive({ message: 'expects a positive integer' })
    .default(600),
  LOG_LEVEL: z
    .enum(['debug', 'info', 'warn', 'error'], { message: 'expects debug, info, warn or error' })
    .default('info'),
  // tuning of the run engine (docs/decisions.md, Runs); the defaults are DECISIONS §4's
  DELIVERY_ATTEMPT_TIMEOUT_SECONDS: z.coerce
    .number({ message: 'expects an integer from 1 to 60' })
    .int({ message: 'expects an integer from 1 to 60' })
    .min(1, { message: 'expects an integer from 1 to 60' })
    .max(60, { message: 'expects an integer from 1 to 60' })
    .default(10),
  // the Node host's stop (src/node/server.ts, docs/decisions.md "Node host lifecycle")
  SHUTDOWN_GRACE_SECONDS: z.coerce
    .number({ message: 'expects a number of seconds from 0 to 300' })
    .min(0, { message: 'expects a number of seconds from 0 to 300' })
    .max(300, { message: 'expects a number of seconds from 0 to 300' })
    .default(5),
  DELIVERY_LEASE_SECONDS: z.coerce
    .number({ message: 'expects a whole number of seconds' })
    .int({ message: 'expects a whole number of seconds' })
    .positive({ message: 'expects a whole number of seconds' })
    .optional(),
});

type ParsedConfig = z.output<typeof ConfigSchema>;

export interface Config {
  deployment: ParsedConfig['SERVICE_DEPLOYMENT'];
  port: number;
  queueDriver: 'pg' | 'cloudflare';
  /** Absent only on the Node host, which then embeds PGlite; the Worker requires it. */
  databaseUrl?: Secret;
  encryptionKey: Secret;
  authSecret: Secret;
  authUrl?: string;
  apiBaseUrl?: string;
  trustedOrigins: string[];
  uiBaseUrl?: string;
  /** Present only when all four CODEHOST_APP_* variables are set. */
  codehostApp?: { appId: string; appName: string; privateKey: Secret; webhookSecret: Secret };
  /** The GitHub API the App talks to: github.com's, a GitHub Enterprise Server's, or a local test server. */
  codehostApiUrl: string;
  outboundAllowedHosts: string[];
  /** Where the service's own mail goes (DECISIONS §8); unset: the Node host logs each message instead. */
  smtpUrl?: Secret;
  mailFrom: string;
  superAdminEmails: string[];
  rateLimitPerMinute: number;
  logLevel: ParsedConfig['LOG_LEVEL'];
  /** Each outbound attempt's timeout (DECISIONS §4: 10 s). */
  deliveryAttemptTimeoutMs: number;
  /** How long a worker holds a delivery job: always longer than an attempt can take. */
  deliveryLeaseMs: number;
  /** How long the Node host's stop waits for requests and deliveries in flight before cutting them off. */
  shutdownGraceMs: number;
  version: string;
}

export class ConfigError extends Error {
  constructor(readonly problems: { variable: string; expects: string }[]) {
    super(
      `invalid server configuration:\n${problems.map((p) => `  ${p.variable}: ${p.expects}`).join('\n')}`,
    );
    this.name = 'ConfigError';
  }
}

/** The variables whose values must never be logged, printed or returned. */
export const SECRET_VARIABLES = [
  'DATABASE_URL',
  'ENCRYPTION_KEY',
  'AUTH_SECRET',
  'CODEHOST_APP_PRIVATE_KEY',
  'SMTP_URL',
] as const;

export const VERSION = '0.1.0';

type Env = Record<string, string | undefined>;

export interface LoadConfigOptions {
  /**
   * Set by a host that may not run without API_BASE_URL (the Worker; the Node
   * host with DATABASE_URL): where it is required, for the message. Callback
   * URLs are never built from a request's Host header (docs/decisions.md,
   * Outbound URLs and the callback base).
   */
  apiBaseUrlRequired?: string;
}

export function loadConfig(env: Env, options: LoadConfigOptions = {}): Config {
  // Empty strings mean "unset": wrangler and shells both produce them.
  const input = Object.fromEntries(
    Object.keys(ConfigSchema.shape).map((key) => [key, env[key] === '' ? undefined : env[key]]),
  );
  const result = ConfigSchema.safeParse(input);
  const missingBaseUrl =
    options.apiBaseUrlRequired !== undefined && input.API_BASE_URL === undefined
      ? [
          {
            variable: 'API_BASE_URL',
            expects: `is required ${options.apiBaseUrlRequired}: the public URL of this API (e.g. https://cellplane.example.com), which callback URLs are built from`,
          },
        ]
      : [];
  if (!result.success || missingBaseUrl.length > 0) {
    const problems = (result.success ? [] : result.error.issues).map((issue) => {
      const variable = String(issue.path[0] ?? 'configuration');
      return { variable, expects: input[variable] === undefined ? 'is required' : issue.message };
    });
    throw new ConfigError([...problems, ...missingBaseUrl]);
  }
  const c = result.data;
  const leaseSeconds = c.DELIVERY_LEASE_SECONDS ?? c.DELIVERY_ATTEMPT_TIMEOUT_SECONDS + 20;
  if (leaseSeconds <= c.DELIVERY_ATTEMPT_TIMEOUT_SECONDS) {
    throw new ConfigError([
      {
        variable: 'DELIVERY_LEASE_SECONDS',
        expects: `must be longer than DELIVERY_ATTEMPT_TIMEOUT_SECONDS (${c.DELIVERY_ATTEMPT_TIMEOUT_SECONDS}), or a live worker's job could be taken from it`,
      },
    ]);
  }
  const app = [c.CODEHOST_APP_ID, c.CODEHOST_APP_NAME, c.CODEHOST_APP_PRIVATE_KEY, c.CODEHOST_APP_WEBHOOK_SECRET];
  return {
    deployment: c.SERVICE_DEPLOYMENT,
    port: c.PORT,
    queueDriver: c.QUEUE_DRIVER,
    databaseUrl: c.DATABASE_URL,
    encryptionKey: c.ENCRYPTION_KEY,
    authSecret: c.AUTH_SECRET,
    authUrl: c.AUTH_URL,
    apiBaseUrl: c.API_BASE_URL,
    trustedOrigins: c.TRUSTED_ORIGINS,
    uiBaseUrl: c.SERVICE_UI_BASE_URL,
    codehostApp: app.every((value) => value !== undefined)
      ? {
          appId: c.CODEHOST_APP_ID!,
          appName: c.CODEHOST_APP_NAME!,
          privateKey: c.CODEHOST_APP_PRIVATE_KEY!,
          webhookSecret: c.CODEHOST_APP_WEBHOOK_SECRET!,
        }
      : undefined,
    codehostApiUrl: c.CODEHOST_API_URL,
    outboundAllowedHosts: c.OUTBOUND_ALLOWED_HOSTS,
    smtpUrl: c.SMTP_URL,
    mailFrom: c.MAIL_FROM,
    // compared with verified addresses, which Better Auth keeps lowercased
    superAdminEmails: c.SUPER_ADMIN_EMAILS.map((email) => email.toLowerCase()),
    rateLimitPerMinute: c.RATE_LIMIT_PER_MINUTE,
    logLevel: c.LOG_LEVEL,
    deliveryAttemptTimeoutMs: c.DELIVERY_ATTEMPT_TIMEOUT_SECONDS * 1000,
    deliveryLeaseMs: leaseSeconds * 1000,
    shutdownGraceMs: Math.round(c.SHUTDOWN_GRACE_SECONDS * 1000),
    version: VERSION,
  };
}
