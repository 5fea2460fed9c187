import { createHmac, hash } from 'node:crypto';
import { createSigner } from 'fast-jwt';
import { PlainCallers } from '../auth/plain-callers';
import { join, resolve } from 'node:path';
import { loadConfig, type Config } from '../config';
import { createLogger, type Logger, type LogSink } from '../logger';
import type { Db } from '../db/client';
import type { SignHs256 } from '../auth/callback-token';
import { systemClock, type ChangeStreams, type Clock, type DeliveryScheduler, type Mailer, type Platform, type RateLimits } from '../platform';
import type { HmacSha256 } from '../runs/outbound-request';
import { ChangeHub, type HubOptions } from '../stream/hub';
import { openSseResponse } from '../stream/sse-response';
import { openSseOnSocket } from './sse-socket';
import type { ServerResponse } from 'node:http';
import { runPorts } from '../modules/action-runs/run-ports';
import { createRunEngine, type RunEngine } from '../runs/engine';
import { JobRunner, type JobRunnerOptions } from './job-runner';
import { guardedFetch } from './outbound-fetch';
import { resolveHost } from './resolve-host';
import { keepStatistics, migrateDatabase, openPglite, openPostgres, type NodeDatabase } from './database';
import { loadOrCreateLocalSecrets } from './local-secrets';
import { NodeRateLimits } from './rate-limit-store';
import { createNodeMailer } from './mailer';

/** Platform.signHs256: fast-jwt's signer, synchronous over node:crypto's HMAC. */
export const signHs256: SignHs256 = (key) => {
  const sign = createSigner({ key: Buffer.from(key), algorithm: 'HS256' });
  return (claims) => sign(claims);
};

/** RunEngine.hmacSha256: node:crypto's, for `webhook-signature`. */
export const hmacSha256: HmacSha256 = (key, message) => createHmac('sha256', key).update(message).digest();

export interface NodePlatform {
  platform: Platform;
  /** Delivers runs and reaps timed-out ones; the server starts it (startServer), tests drive it. */
  jobs: JobRunner;
  /** The entity change stream's fan-out. */
  hub: ChangeHub;
  database: NodeDatabase;
  /** Where the embedded database lives, or undefined when DATABASE_URL is used. */
  dataDir: string | undefined;
  close(): Promise<void>;
}

/**
 * Node host wiring: without DATABASE_URL, an embedded PGlite in
 * CELLPLANE_DATA_DIR (default `.cellplane/`) with local-only secrets; with
 * it, a `pg` pool. Migrations are applied before the first request.
 */
export async function createNodePlatform(
  env: Record<string, string | undefined>,
  options: { logSink?: LogSink } = {},
): Promise<NodePlatform> {
  const embedded = !env.DATABASE_URL;
  const dataDir = embedded ? resolve(env.CELLPLANE_DATA_DIR || '.cellplane') : undefined;
  const effectiveEnv = { ...env };
  if (dataDir) {
    const local = loadOrCreateLocalSecrets(dataDir);
    effectiveEnv.ENCRYPTION_KEY ||= local.ENCRYPTION_KEY;
    effectiveEnv.AUTH_SECRET ||= local.AUTH_SECRET;
  }
  // self-hosting (DATABASE_URL) must say where it is reached; the embedded default is reached where it listens
  const loaded = loadConfig(effectiveEnv, embedded ? {} : { apiBaseUrlRequired: 'when DATABASE_URL is set (self-hosting)' });
  const config: Config = { ...loaded, apiBaseUrl: loaded.apiBaseUrl ?? listeningUrl(env.HOST, loaded.port) };
  if (config.queueDriver !== 'pg') {
    throw new Error('QUEUE_DRIVER=cloudflare needs the Cloudflare Worker host; the Node host uses "pg"');
  }
  const logger: Logger = createLogger({
    level: config.logLevel,
    secrets: [config.databaseUrl, config.encryptionKey, config.authSecret, config.codehostApp?.privateKey, config.codehostApp?.webhookSecret, config.smtpUrl],
    sink: options.logSink,
  });
  const database = dataDir ? await openPglite(join(dataDir, 'db')) : openPostgres(config.databaseUrl!.reveal());
  try {
    await migrateDatabase(database);
  } catch (error) {
    await database.close();
    throw error;
  }
  const statistics = keepStatistics(database, (error) => logger.warn('could not refresh the embedded database statistics (ANALYZE)', { error }));
  // several instances may serve one Postgres database: their counts meet there; PGlite is one process
  const rateLimits = new NodeRateLimits({ clock: systemClock, logger, shared: database.kind === 'postgres' ? { db: database.db } : undefined });
  const mailer = createNodeMailer(config, logger);
  const { platform, jobs, hub } = platformWithJobRunner({
    config,
    logger,
    db: database.db,
    namedStatements: await serverIsPostgres(database),
    rateLimits,
    mailer,
  });
  return {
    platform,
    jobs,
    hub,
    database,
    dataDir,
    close: async () => {
      await statistics.stop();
      hub.close();
      await jobs.stop();
      await rateLimits.close();
      mailer.close();
      await database.close();
    },
  };
}

/**
 * The URL the Node host serves on (HOST, default 127.0.0.1, and PORT), as
 * startServer logs it. Without DATABASE_URL it is also the default
 * API_BASE_URL, so callback URLs never come from a request's Host header; a
 * wildcard HOST (0.0.0.0, ::) becomes the loopback address of its family.
 */
export function listeningUrl(host: string | undefined, port: number): string {
  const reachable = !host ? '127.0.0.1' : host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}`;
}

/** The line a host logs once it listens (src/node/server.ts, src/deno/server.ts): where, and on which database. */
export function logListening(node: NodePlatform, url: string): void {
  node.platform.logger.info('cellplane listening', {
    url,
    database: node.dataDir ? `embedded PGlite in ${node.dataDir}` : 'postgres (DATABASE_URL)',
    deployment: node.platform.config.deployment,
  });
}

/**
 * True for a real Postgres server, false for PGlite (embedded, or served over
 * pglite-socket at a DATABASE_URL), whose connections share one session.
 */
async function serverIsPostgres(database: NodeDatabase): Promise<boolean> {
  if (database.kind === 'pglite') return false;
  const { rows } = await database.pool.query<{ version: string }>('select version() as version');
  return !rows[0]?.version.includes('PGlite');
}

/**
 * How soon after the stop's signal another one is the same stop, not a
 * second one (both hosts' servers). Under `npm start` or `npm run deno`, a
 * supervisor that signals the process group (systemd's default) reaches the
 * server twice: directly, and relayed by npm a moment later. So does a
 * terminal's Ctrl-C. Only a signal sent after this long is someone asking
 * again, and ends the process at once.
 */
export const RELAYED_SIGNAL_MS = 1_000;

/**
 * A Platform whose requests all share one long-lived database handle (the
 * Node host's pool or PGlite): leasing is free and releasing does nothing.
 */
export function platformOnSharedDatabase(options: {
  config: Config;
  logger: Logger;
  db: Db;
  clock?: Clock;
  namedStatements?: boolean;
  deliveries?: DeliveryScheduler;
  changes?: ChangeStreams;
  /** Default: counted in process only. */
  rateLimits?: RateLimits;
  /** Default: SMTP when the config names a server, else the log. */
  mailer?: Mailer;
}): Platform {
  return {
    config: options.config,
    logger: options.logger,
    clock: options.clock ?? systemClock,
    openDatabase: () => ({ db: options.db, release: async () => {} }),
    bootstrap: { closed: false },
    namedStatements: options.namedStatements ?? false,
    deliveries: options.deliveries ?? { schedule: async () => {} },
    changes: options.changes ?? noChangeStreams,
    mailer: options.mailer ?? createNodeMailer(options.config, options.logger),
    rateLimits: options.rateLimits ?? new NodeRateLimits({ clock: options.clock ?? systemClock, logger: options.logger }),
    // one per platform, and a platform serves one database
    plainCallers: new PlainCallers(),
    // the one-shot hash (Node ≥ 20.12, Deno 2): half the cost of a Hash object per request
    sha256Hex: (text) => hash('sha256', text, 'hex'),
    signHs256,
    executionContext: false,
  };
}

/** For platforms that serve no streams (benchmarks of other paths): publishing is a no-op, opening one fails. */
const noChangeStreams: ChangeStreams = {
  publish: async () => {},
  open: async () => {
    throw new Error('this platform serves no change streams');
  },
};

/**
 * The Node host's platform and its job runner (QUEUE_DRIVER=pg): a trigger's
 * committed job wakes the runner; the runner's poll finds every other due job.
 */
export function platformWithJobRunner(
  options: Parameters<typeof platformOnSharedDatabase>[0] & {
    engine?: Partial<Pick<RunEngine, 'fetch' | 'random' | 'resolveHost'>>;
    runner?: Partial<JobRunnerOptions>;
    hub?: Partial<HubOptions>;
  },
): { platform: Platform; engine: RunEngine; jobs: JobRunner; hub: ChangeHub } {
  const engine = createRunEngine({
    db: options.db,
    config: options.config,
    logger: options.logger,
    clock: options.clock ?? systemClock,
    resolveHost,
    fetch: guardedFetch(options.config.outboundAllowedHosts),
    ports: runPorts,
    namedStatements: options.namedStatements ?? false,
    signHs256,
    hmacSha256,
    ...options.engine,
  });
  const jobs = new JobRunner(engine, options.runner);
  const hub = new ChangeHub({ withDb: (work) => work(options.db), clock: engine.clock, logger: options.logger }, options.hub);
  const platform = platformOnSharedDatabase({
    ...options,
    deliveries: { schedule: async () => jobs.nudge(), reserve: () => jobs.reserve() },
    changes: {
      publish: (envId, committed) => hub.publish(envId, committed),
      // on a real socket (the server), frames go straight to it; in-process requests (app.request) get a web stream
      open: async (request, { raw, headers }) => {
        const outgoing = (raw as { outgoing?: ServerResponse } | undefined)?.outgoing;
        return outgoing ? openSseOnSocket(hub, request, outgoing, headers) : openSseResponse(hub, request, headers);
      },
    },
  });
  return { platform, engine, jobs, hub };
}
