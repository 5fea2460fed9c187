import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { createApp } from '../../src/app';
import type { ChangeHub, HubOptions } from '../../src/stream/hub';
import { loadConfig } from '../../src/config';
import type { Db } from '../../src/db/client';
import { createLogger } from '../../src/logger';
import type { JobRunner, JobRunnerOptions } from '../../src/node/job-runner';
import { platformWithJobRunner } from '../../src/node/platform';
import type { RunEngine } from '../../src/runs/engine';
import type { Clock, Platform } from '../../src/platform';
import { createTestDatabase, usingPostgres, type TestDatabase } from './node-database';

export const TEST_SECRETS = {
  ENCRYPTION_KEY: 'a3f1c2e4b5d6978877665544332211009f8e7d6c5b4a39281706f5e4d3c2b1a0',
  AUTH_SECRET: 'test-auth-secret-0123456789abcdefghijklmnop',
};

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
  /** How many times a request leased the database. */
  databaseLeases(): number;
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
  } = {},
): Promise<TestApi> {
  const testDatabase = options.database ?? (await createTestDatabase());
  const config = loadConfig({ ...TEST_SECRETS, ...(options.env ?? {}) });
  const logs: string[] = [];
  const logger = createLogger({
    level: 'debug',
    secrets: [config.encryptionKey, config.authSecret],
    sink: (line) => logs.push(line),
  });
  let leases = 0;
  const db = testDatabase.database.db;
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
          const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
        });
      }
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    db,
    testDatabase,
    logs,
    databaseLeases: () => leases,
    async call(method, path, { token, body, rawBody, headers = {} } = {}) {
      const init: RequestInit = { method, headers: { ...headers } };
      if (token !== undefined) (init.headers as Record<string, string>).authorization = `Bearer ${token}`;
      if (rawBody !== undefined || body !== undefined) {
        init.body = rawBody ?? JSON.stringify(body);
        (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
      }
      const response = await app.request(path, init);
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = text.length ? JSON.parse(text) : undefined;
      } catch {
        // not JSON (the docs page): keep the text
      }
      return { status: response.status, body: parsed as any, headers: response.headers };
    },
    close: async () => {
      hub.close();
      if (server) {
        const closing = server;
        await new Promise<void>((resolve) => closing.close(() => resolve()));
      }
      await jobs.stop();
      if (!options.database) await testDatabase.drop();
    },
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
