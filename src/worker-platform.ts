import { PlainCallers } from './auth/plain-callers';
import { neonConfig, Pool } from '@neondatabase/serverless';
import { drizzle } from 'drizzle-orm/neon-serverless';
import { ConfigError, loadConfig, type Config } from './config';
import type { Db } from './db/client';
import * as schema from './db/schema';
import { createLogger, type Logger, type LogSink } from './logger';
import { delaySecondsUntil, type DeliveryQueue } from './runs/queue';
import { encodeSubscription, SUBSCRIPTION_HEADER } from './stream/subscription';
import { rateLimitWindow } from './http/rate-limit';
import {
  type ChangeStreams,
  systemClock,
  type BootstrapMemo,
  type Clock,
  type DatabaseLease,
  type Mailer,
  type Platform,
  type RateLimits,
  type RateLimitStanding,
} from './platform';
import type { RateLimiter } from '../durable-objects/rate-limiter';

/**
 * The Worker's environment: the `[vars]` and secrets of wrangler.toml (all
 * strings) beside its bindings. Only the strings reach `loadConfig`.
 */
export interface WorkerEnv {
  ENVIRONMENT_STREAM: DurableObjectNamespace;
  /** One Durable Object per rate-limit key (durable-objects/rate-limiter.ts). */
  RATE_LIMITER: DurableObjectNamespace<RateLimiter>;
  DELIVERIES: Queue;
  DATABASE_URL?: string;
  QUEUE_DRIVER?: string;
  /**
   * Local only (`npm run dev`, the workers tests): `host:port` of the
   * WebSocket→TCP proxy in front of a plain Postgres or PGlite, which has no
   * WebSocket endpoint of its own. Never set in production.
   */
  NEON_LOCAL_WS_PROXY?: string;
  [variable: string]: unknown;
}

/**
 * Bootstrap mode only closes, so "closed" is remembered for the isolate's
 * lifetime; another isolate finds out from the database on its own.
 */
const bootstrap: BootstrapMemo = { closed: false };

/**
 * Worker host wiring. Throws ConfigError (naming variables, never values)
 * when the environment cannot serve: the Worker has no embedded database, so
 * DATABASE_URL is required, deliveries go through Cloudflare Queues, and
 * API_BASE_URL is required (callback URLs are built from it, never from a
 * request's Host header).
 */
export function createWorkerPlatform(env: WorkerEnv, options: { logSink?: LogSink } = {}): Platform {
  const variables = stringVariables(env);
  // every problem at once, so a first deploy does not fail one variable at a time
  const problems: ConfigError['problems'] = [];
  let config: Config | undefined;
  try {
    config = loadConfig(variables, { apiBaseUrlRequired: 'on the Cloudflare Worker host (wrangler.toml [vars])' });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    problems.push(...error.problems);
  }
  if (!variables.DATABASE_URL) {
    problems.push({
      variable: 'DATABASE_URL',
      expects: 'is required on the Cloudflare Worker host (set it with `wrangler secret put DATABASE_URL`)',
    });
  }
  if (config && config.queueDriver !== 'cloudflare') {
    problems.push({
      variable: 'QUEUE_DRIVER',
      expects: 'must be "cloudflare" on the Cloudflare Worker host (wrangler.toml [vars])',
    });
  }
  const localProxy = variables.NEON_LOCAL_WS_PROXY || undefined;
  if (localProxy !== undefined && !/^(\[[0-9a-fA-F:.]+\]|[\w.-]+):\d{1,5}$/.test(localProxy)) {
    problems.push({ variable: 'NEON_LOCAL_WS_PROXY', expects: 'expects host:port, e.g. 127.0.0.1:8788' });
  }
  if (problems.length > 0 || !config) throw new ConfigError(problems);

  if (localProxy !== undefined) useLocalWebSocketProxy(localProxy);

  const logger: Logger = createLogger({
    level: config.logLevel,
    secrets: [config.databaseUrl, config.encryptionKey, config.authSecret, config.codehostApp?.privateKey, config.codehostApp?.webhookSecret, config.smtpUrl],
    sink: options.logSink,
  });
  const connectionString = config.databaseUrl!.reveal();

  return {
    config,
    logger,
    clock: systemClock,
    openDatabase: () => openRequestPool(connectionString, logger),
    bootstrap,
    // through the local proxy the server may be PGlite, one session for every connection
    namedStatements: localProxy === undefined,
    deliveries: {
      schedule: (job) =>
        deliveryQueue(env).send({ runId: job.runId, attempt: job.attempt }, { delaySeconds: delaySecondsUntil(job.runAt, new Date()) }),
    },
    changes: environmentStreams(env),
    mailer: workerMailer(logger),
    rateLimits: rateLimiterObjects(env, systemClock),
    // the platform lives as long as the isolate (src/worker.ts): so do the answers it remembers
    plainCallers: new PlainCallers(),
    executionContext: true,
  };
}

/**
 * The change stream on the Worker: one Durable Object per environment
 * (durable-objects/environment-stream.ts), addressed by the environment's id.
 * The Worker authorizes; the object holds the connections and reads the log.
 */
function environmentStreams(env: WorkerEnv): ChangeStreams {
  const stub = (envId: string) => env.ENVIRONMENT_STREAM.get(env.ENVIRONMENT_STREAM.idFromName(envId));
  return {
    async publish(envId) {
      const response = await stub(envId).fetch('https://environment-stream/publish', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ envId }),
      });
      await response.body?.cancel();
    },
    async open(request) {
      const response = await stub(request.envId).fetch('https://environment-stream/subscribe', {
        headers: { [SUBSCRIPTION_HEADER]: encodeSubscription(request) },
      });
      return new Response(response.body, response);
    },
  };
}

const MAX_SPENT_BUDGETS = 10_000;

/**
 * Rate limits on the Worker: one Durable Object per key, so the count holds
 * across isolates and locations (docs/decisions.md, Rate limits). The client
 * address is CF-Connecting-IP, which Cloudflare sets on every request.
 */
function rateLimiterObjects(env: WorkerEnv, clock: Clock): RateLimits {
  // spent budgets this platform (built once per isolate) has seen, until their windows end: refused again with no call
  const spentBudgets = new Map<string, RateLimitStanding>();
  const spent = (key: string): RateLimitStanding | undefined => {
    const standing = spentBudgets.get(key);
    if (!standing) return undefined;
    if (standing.resetAt > clock.now().getTime()) return { ...standing, allowed: false };
    spentBudgets.delete(key);
    return undefined;
  };
  return {
    clientAddress: (c) => c.req.header('cf-connecting-ip'),
    async hit(key, limit) {
      const known = spent(key);
      if (known) return known;
      const { start, end } = rateLimitWindow(key, clock.now().getTime());
      const result = await env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(key)).hit(limit, start, end);
      const standing = { allowed: result.allowed, remaining: Math.max(0, limit - result.count), resetAt: result.end };
      if (standing.remaining === 0) {
        if (spentBudgets.size >= MAX_SPENT_BUDGETS) {
          const now = clock.now().getTime();
          for (const [spent, { resetAt }] of spentBudgets) if (resetAt <= now) spentBudgets.delete(spent);
          if (spentBudgets.size >= MAX_SPENT_BUDGETS) spentBudgets.clear();
        }
        spentBudgets.set(key, standing);
      }
      return standing;
    },
    peek: (key) => spent(key),
  };
}

/** The DELIVERIES binding as the run engine's queue port. */
export const deliveryQueue = (env: WorkerEnv): DeliveryQueue => ({
  send: async (message, options) => {
    await env.DELIVERIES.send(message, options);
  },
});

/** How long a released Pool may take to close its connections before the request lets go anyway. */
const POOL_CLOSE_GRACE_MS = 5_000;

/** The part of a driver client that release() reaches: its socket (a WebSocket underneath). */
type PoolClient = { connection?: { stream?: { end?(): void } } };

/**
 * A Pool per request: a Worker may not reuse a connection opened by another
 * request's I/O context. The request-context middleware releases it in
 * waitUntil, after the response has gone.
 *
 * `pool.end()` alone does not close the connections: the driver (1.2.0) sends
 * Terminate but loses the callback that would close its WebSocket, so each
 * socket stays open until the server hangs up (Postgres does, PGlite behind
 * pglite-socket never does) or the request's I/O context is torn down under
 * it. Release therefore ends each client's socket itself and waits for the
 * pool's `remove` events, so every connection is closed cleanly, inside the
 * request.
 */
function openRequestPool(connectionString: string, logger: Logger): DatabaseLease {
  const pool = new Pool({ connectionString });
  const open = new Set<PoolClient>();
  let allClosed: (() => void) | undefined;
  pool.on('connect', (client: PoolClient) => open.add(client));
  pool.on('remove', (client: PoolClient) => {
    open.delete(client);
    if (open.size === 0) allClosed?.();
  });
  // an idle connection dropped by the server must not surface as an unhandled error
  // through the logger's error serializer, like every other error: its message is bounded and cleaned
  pool.on('error', (error: unknown) => logger.warn('database connection lost', { error }));
  const db = drizzle({ client: pool, schema }) as unknown as Db;

  const release = async () => {
    const clients = [...open];
    const closed = clients.length === 0 ? Promise.resolve() : new Promise<void>((resolve) => (allClosed = resolve));
    await pool.end();
    for (const client of clients) {
      try {
        client.connection?.stream?.end?.();
      } catch {
        // already closed by the server: nothing left to do
      }
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([closed, new Promise<void>((resolve) => (timer = setTimeout(resolve, POOL_CLOSE_GRACE_MS)))]);
    clearTimeout(timer);
  };
  let released: Promise<void> | undefined;
  return { db, release: () => (released ??= release()) };
}

/**
 * Points the Neon driver at a local WebSocket→TCP proxy. Plain `ws://`, and
 * none of the pipelining that assumes Neon's own proxy; `coalesceWrites`
 * off because locally it only adds latency (ARCHITECTURE.md).
 */
function useLocalWebSocketProxy(proxy: string): void {
  neonConfig.wsProxy = (host, port) => `${proxy}/v2?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  neonConfig.coalesceWrites = false;
}

function stringVariables(env: WorkerEnv): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [name, value] of Object.entries(env)) {
    if (typeof value === 'string') out[name] = value;
  }
  return out;
}

/**
 * Mail on the Worker: a Worker cannot open an SMTP session through
 * nodemailer, so each message is written to the log, as the embedded Node
 * host does without SMTP_URL (docs/decisions.md, Mail).
 */
function workerMailer(logger: Logger): Mailer {
  return { send: async (message) => logger.info('mail not sent (the Worker host has no SMTP): its text follows', { ...message }) };
}
