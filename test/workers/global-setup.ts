import { randomBytes } from 'node:crypto';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { migrateDatabase, openPglite, openPostgres } from '../../src/node/database';
import { startWsProxy } from '../../src/node/ws-proxy';

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
  const name = `cellplane_w_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  cleanups.push(async () => {
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    try {
      // FORCE: a pool the Worker left open must not keep the database alive
      await client.query(`drop database if exists ${name} with (force)`);
    } finally {
      await client.end();
    }
  });
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const database = openPostgres(url.toString(), { max: 1 });
  try {
    await migrateDatabase(database);
  } finally {
    await database.close();
  }
  return { url: url.toString(), address: `${url.hostname}:${url.port || '5432'}`, singleSession: false };
}

async function servePglite(cleanups: (() => Promise<void>)[]): Promise<TestDatabase> {
  const database = await openPglite(undefined);
  cleanups.push(() => database.close());
  if (database.kind !== 'pglite') throw new Error('expected an embedded PGlite');
  await migrateDatabase(database);
  // several connections may be open at once (each request's Pool); PGlite
  // runs their queries one at a time
  const server = new PGLiteSocketServer({ db: database.pglite, host: '127.0.0.1', port: 0, maxConnections: 64 });
  await server.start();
  cleanups.push(() => server.stop());
  const address = server.getServerConn();
  return { url: `postgres://postgres:postgres@${address}/postgres`, address, singleSession: true };
}
