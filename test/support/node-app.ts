import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { createApp } from '../../src/app';
import type { ChangeHub, HubOptions } from '../../src/stream/hub';
import { loadConfig } from '../../src/config';
import type { Db } from '../../src/db/client';
import { createLogger } from '../../src/logger';
import type { JobRunner, JobRunnerOptions } from '../../src/node/job-runner';
import { answerClientErrors } from '../../src/node/client-errors';
import { platformWithJobRunner } from '../../src/node/platform';
import { NodeRateLimits } from '../../src/node/rate-limit-store';
import type { RunEngine } from '../../src/runs/engine';
import { systemClock, type Clock, type MailMessage, type Platform } from '../../src/platform';
import { createTestDatabase, usingPostgres, type TestDatabase } from './node-database';
import { SecretScan } from './secret-scan';

/** The base of callback URLs in tests: hosts refuse to start without API_BASE_URL (docs/decisions.md, Outbound URLs). */
export const TEST_API_BASE_URL = 'http://cellplane.test';

/** The variables every test host needs (the two secrets, and API_BASE_URL; `options.env` overrides them). */
export const TEST_SECRETS = {
  ENCRYPTION_KEY: 'a3f1c2e4b5d6978877665544332211009f8e7d6c5b4a39281706f5e4d3c2b1a0',
  AUTH_SECRET: 'test-auth-secret-0123456789abcdefghijklmnop',
  API_BASE_URL: TEST_API_BASE_URL,
};

/** The limit createTestApi sets unless a test sets RATE_LIMIT_PER_MINUTE itself: far above what any suite sends. */
export const TEST_RATE_LIMIT_PER_MINUTE = '1000000';

export interface ApiResponse<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

export interface CallOptions {
  token?: string;
  body?: unknown;
  /** Sent as is, instead of JSON.stringify(body). */
  rawBody?: string;
  headers?: Record<string, string>;
}

export interface TestApi {
  app: ReturnType<typeof createApp>;
  platform: Platform;
  /** The run engine and the job runner, not started: tests deliver with `jobs.drain()`, or `jobs.start()`. */
  engine: RunEngine;
  jobs: JobRunner;
  /** The change stream's hub. */
  hub: ChangeHub;
  /** The app on a real HTTP server at 127.0.0.1 (for SSE clients and other real-socket tests); closed with the api. */
  listen(): Promise<string>;
  db: Db;
  testDatabase: TestDatabase;
  /** Every log line the app wrote. */
  logs: string[];
  /** Every message the app mailed, unless `env.SMTP_URL` sends them to a real SMTP server. */
  mails: MailMessage[];
  /** The secrets this api's traffic carried; `close()` fails if any reached a log line or a response that should not hold it. */
  secretScan: SecretScan;
  /** How many times a request leased the database. */
  databaseLeases(): number;
  /** The rate limiter; `sync()` pushes and reads the shared counts (with `sharedRateLimits`). */
  rateLimits: NodeRateLimits;
  call<T = any>(method: string, path: string, options?: CallOptions): Promise<ApiResponse<T>>;
  close(): Promise<void>;
}

/** The app in-process on a fresh database, with captured logs and a controllable clock. */
export async function createTestApi(
  options: {
    clock?: Clock;
    env?: Record<string, string>;
    engine?: Partial<Pick<RunEngine, 'fetch' | 'random' | 'resolveHost'>>;
    runner?: Partial<JobRunnerOptions>;
    hub?: Partial<HubOptions>;
    /** Another api's database, shared (a second app instance); it is dropped by its owner, not by this api. */
    database?: TestDatabase;
    /** Count through `rate_limit_counters`, as a Node host on Postgres does; tests sync by hand (`rateLimits.sync()`). */
    sharedRateLimits?: boolean;
  } = {},
): Promise<TestApi> {
  const testDatabase = options.database ?? (await createTestDatabase());
  // suites make hundreds of requests a minute per token; the rate-limit tests set their own limit
  const config = loadConfig({ ...TEST_SECRETS, RATE_LIMIT_PER_MINUTE: TEST_RATE_LIMIT_PER_MINUTE, ...(options.env ?? {}) });
  const logs: string[] = [];
  const mails: MailMessage[] = [];
  const secretScan = new SecretScan();
  secretScan.registerConfig({ TEST_DATABASE_URL: process.env.TEST_DATABASE_URL, ...TEST_SECRETS, ...(options.env ?? {}) });
  const logger = createLogger({
    level: 'debug',
    secrets: [config.encryptionKey, config.authSecret, config.codehostApp?.privateKey, config.codehostApp?.webhookSecret],
    sink: (line) => logs.push(line),
  });
  let leases = 0;
  const db = testDatabase.database.db;
  // the timer never fires within a test (an hour); syncs happen where the test calls them
  const rateLimits = new NodeRateLimits({
    clock: options.clock ?? systemClock,
    logger,
    shared: options.sharedRateLimits ? { db, intervalMs: 3_600_000 } : undefined,
  });
  // named statements exactly where a host would use them: on a real Postgres server
  const { platform: shared, engine, jobs, hub } = platformWithJobRunner({
    config,
    logger,
    db,
    clock: options.clock,
    namedStatements: usingPostgres(),
    engine: options.engine,
    runner: options.runner,
    hub: options.hub,
    rateLimits,
    // with SMTP_URL the host's own mailer sends; otherwise messages are kept for the test to read
    mailer: config.smtpUrl ? undefined : { send: async (message) => void mails.push(message) },
  });
  const platform: Platform = {
    ...shared,
    openDatabase: () => {
      leases += 1;
      return shared.openDatabase();
    },
  };
  const app = createApp(platform);
  let server: ServerType | undefined;
  return {
    app,
    platform,
    engine,
    jobs,
    hub,
    async listen() {
      if (!server) {
        server = await new Promise<ServerType>((resolve) => {
          const s = serve({ fetch: scannedFetch(app.fetch, secretScan), port: 0, hostname: '127.0.0.1' }, () => resolve(s));
          // as the Node host does: a request the HTTP parser refuses is answered in the error shape
          answerClientErrors(s as Server);
        });
      }
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    db,
    testDatabase,
    logs,
    mails,
    secretScan,
    databaseLeases: () => leases,
    rateLimits,
    async call(method, path, { token, body, rawBody, headers = {} } = {}) {
      const init: RequestInit = { method, headers: { ...headers } };
      if (token !== undefined) (init.headers as Record<string, string>).authorization = `Bearer ${token}`;
      if (rawBody !== undefined || body !== undefined) {
        init.body = rawBody ?? JSON.stringify(body);
        (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
      }
      const authorization = Object.entries(init.headers as Record<string, string>).find(([name]) => name.toLowerCase() === 'authorization')?.[1];
      const sequence = secretScan.observeRequest({ method, path, authorization, body: jsonOrUndefined(init.body) });
      const response = await app.request(path, init);
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = text.length ? JSON.parse(text) : undefined;
      } catch {
        // not JSON (the docs page): keep the text
      }
      secretScan.observeResponse(sequence, { method, path, text, body: parsed });
      return { status: response.status, body: parsed as any, headers: response.headers };
    },
    close: async () => {
      hub.close();
      if (server) {
        const closing = server;
        await new Promise<void>((resolve) => closing.close(() => resolve()));
      }
      await jobs.stop();
      await rateLimits.close();
      if (!options.database) await testDatabase.drop();
      secretScan.scanLines(logs, 'log line');
      secretScan.assertClean(`createTestApi, ${secretScan.stats().requests} requests`);
    },
  };
}

const jsonOrUndefined = (text: unknown) => {
  if (typeof text !== 'string') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
};

/** The app's fetch with the secret scan watching: tokens and credentials sent, and every JSON response (streams are not read). */
function scannedFetch(fetch: (request: Request, env?: unknown) => Response | Promise<Response>, scan: SecretScan) {
  return async (request: Request, env?: unknown): Promise<Response> => {
    const path = new URL(request.url).pathname;
    const json = request.headers.get('content-type')?.includes('application/json') ?? false;
    // a body the client never finished sending is the app's to answer, not the scan's
    const sent = json && request.body ? await request.clone().text().catch(() => undefined) : undefined;
    const body = sent === undefined ? undefined : jsonOrUndefined(sent);
    const sequence = scan.observeRequest({ method: request.method, path, authorization: request.headers.get('authorization'), body });
    const response = await fetch(request, env);
    if (response.headers.get('content-type')?.includes('application/json')) {
      const text = await response.clone().text();
      scan.observeResponse(sequence, { method: request.method, path, text, body: jsonOrUndefined(text) });
    }
    return response;
  };
}

/** A clock tests move by hand. */
export function manualClock(start = new Date('2026-11-21T10:00:00.000Z')): Clock & { advance(ms: number): void; set(date: Date): void } {
  let now = start.getTime();
  return {
    now: () => new Date(now),
    advance: (ms) => {
      now += ms;
    },
    set: (date) => {
      now = date.getTime();
    },
  };
}
