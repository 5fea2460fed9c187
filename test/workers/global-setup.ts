import { randomBytes } from 'node:crypto';
import type { TestProject } from 'vitest/node';
import { migrateDatabase, openPglite, openPostgres, servePgliteOverTcp } from '../../src/node/database';
import { startWsProxy } from '../../src/node/ws-proxy';
import { createThrowawayPostgres } from '../support/node-database';

/** The Worker's variables for the test run, handed to miniflare as bindings (vitest.config.ts). */
export interface WorkerTestBindings {
  DATABASE_URL: string;
  NEON_LOCAL_WS_PROXY: string;
  ENCRYPTION_KEY: string;
  AUTH_SECRET: string;
  QUEUE_DRIVER: 'cloudflare';
}

declare module 'vitest' {
  export interface ProvidedContext {
    workerBindings: WorkerTestBindings;
  }
}

/**
 * Runs in Node, before workerd starts: a fresh, migrated database for the
 * whole workers run, and the WebSocket proxy the Worker's Neon driver
 * reaches it through. With TEST_DATABASE_URL, a throwaway database on that
 * server (dropped afterwards); without, an in-memory PGlite behind
 * pglite-socket.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cleanups: (() => Promise<void>)[] = [];
  const teardown = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  };
  try {
    const database = process.env.TEST_DATABASE_URL
      ? await createPostgresDatabase(process.env.TEST_DATABASE_URL, cleanups)
      : await servePglite(cleanups);
    const proxy = await startWsProxy({ allow: [database.address], oneSessionAtATime: database.singleSession });
    cleanups.push(() => proxy.close());
    project.provide('workerBindings', {
      DATABASE_URL: database.url,
      NEON_LOCAL_WS_PROXY: proxy.address,
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      AUTH_SECRET: randomBytes(48).toString('base64url'),
      QUEUE_DRIVER: 'cloudflare',
    });
    return teardown;
  } catch (error) {
    await teardown();
    throw error;
  }
}

/** `singleSession`: PGlite, whose connections must take turns (src/node/ws-proxy.ts). */
type TestDatabase = { url: string; address: string; singleSession: boolean };

async function createPostgresDatabase(serverUrl: string, cleanups: (() => Promise<void>)[]): Promise<TestDatabase> {
  if (!/^postgres(ql)?:\/\//.test(serverUrl)) {
    throw new Error('TEST_DATABASE_URL expects a postgres:// or postgresql:// connection string');
  }
  const database = await createThrowawayPostgres(serverUrl, 'cellplane_w', 1);
  // drop closes the harness pool and (WITH FORCE) whatever the Worker left open
  cleanups.push(() => database.drop());
  const url = new URL(database.url!);
  return { url: url.toString(), address: `${url.hostname}:${url.port || '5432'}`, singleSession: false };
}

async function servePglite(cleanups: (() => Promise<void>)[]): Promise<TestDatabase> {
  const database = await openPglite(undefined);
  cleanups.push(() => database.close());
  if (database.kind !== 'pglite') throw new Error('expected an embedded PGlite');
  await migrateDatabase(database);
  const served = await servePgliteOverTcp(database.pglite);
  cleanups.push(() => served.stop());
  return { url: served.url, address: served.address, singleSession: true };
}
