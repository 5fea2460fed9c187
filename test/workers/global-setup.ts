import { randomBytes } from 'node:crypto';
import type { TestProject } from 'vitest/node';
import { generateServiceToken, hashServiceToken } from '../../src/auth/service-token';
import type { Db } from '../../src/db/client';
import { environments, orgs, projects, serviceTokens } from '../../src/db/schema';
import { migrateDatabase, openPglite, servePgliteOverTcp } from '../../src/node/database';
import { startWsProxy } from '../../src/node/ws-proxy';
import { createThrowawayPostgres } from '../support/node-database';
import { startScriptedReceiver, type ScriptedReceiver } from './scripted-receiver';
import { generateAppKeys, startGitHubServer, TEST_WEBHOOK_SECRET } from '../support/github-server';

/** The Worker's variables for the test run, handed to miniflare as bindings (vitest.config.ts). */
export interface WorkerTestBindings {
  DATABASE_URL: string;
  NEON_LOCAL_WS_PROXY: string;
  ENCRYPTION_KEY: string;
  AUTH_SECRET: string;
  QUEUE_DRIVER: 'cloudflare';
  /** The scripted receiver's host:port, so the outbound guard lets deliveries reach it on loopback. */
  OUTBOUND_ALLOWED_HOSTS: string;
  /** Required on the Worker; the origin the tests address the Worker by (any origin reaches `exports.default.fetch`). */
  API_BASE_URL: string;
  /** Far above what any file sends; rate-limit.test.ts builds its platform with a small one. */
  RATE_LIMIT_PER_MINUTE: string;
  /** The super-admin of people.test.ts. */
  SUPER_ADMIN_EMAILS: string;
  /** The GitHub App (github.test.ts), its private key as PKCS#1 (converted in workerd), pointed at the local GitHub server. */
  CODEHOST_APP_ID: string;
  CODEHOST_APP_NAME: string;
  CODEHOST_APP_PRIVATE_KEY: string;
  CODEHOST_APP_WEBHOOK_SECRET: string;
  CODEHOST_API_URL: string;
}

/** The local GitHub server (test/support/github-server.ts) the Worker's App talks to; tests script it under `/__control`. */
export interface ProvidedGitHub {
  url: string;
  appId: string;
  appSlug: string;
}

/** A tenant with an owner token, seeded in the database for the tests that are not about bootstrap mode. */
export interface SeededTenant {
  org: string;
  project: string;
  token: string;
  /** A viewer token limited to the cell `stream-blue` (which the stream tests create). Minting one through the API would close bootstrap mode, which the foundation tests own. */
  scopedToken: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    workerBindings: WorkerTestBindings;
    seededTenant: SeededTenant;
    receiver: ScriptedReceiver;
    github: ProvidedGitHub;
  }
}

/**
 * Runs in Node, before workerd starts: a fresh, migrated database for the
 * whole workers run, and the WebSocket proxy the Worker's Neon driver
 * reaches it through. With TEST_DATABASE_URL, a throwaway database on that
 * server (dropped afterwards); without, an in-memory PGlite behind
 * pglite-socket. Also the webhook receiver the deliveries go to, with the
 * control server the tests script it through (scripted-receiver.ts).
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
    project.provide('seededTenant', await seedTenant(database.db));
    const proxy = await startWsProxy({ allow: [database.address], oneSessionAtATime: database.singleSession });
    cleanups.push(() => proxy.close());
    const receiver = await startScriptedReceiver();
    cleanups.push(() => receiver.close());
    project.provide('receiver', { url: receiver.url, host: receiver.host, control: receiver.control });
    const githubKeys = generateAppKeys();
    const github = await startGitHubServer({ appId: '4242', publicKeyPem: githubKeys.publicKeyPem });
    cleanups.push(() => github.close());
    project.provide('github', { url: github.url, appId: github.appId, appSlug: github.appSlug });
    project.provide('workerBindings', {
      DATABASE_URL: database.url,
      NEON_LOCAL_WS_PROXY: proxy.address,
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      AUTH_SECRET: randomBytes(48).toString('base64url'),
      QUEUE_DRIVER: 'cloudflare',
      OUTBOUND_ALLOWED_HOSTS: receiver.host,
      API_BASE_URL: 'http://cellplane.test',
      RATE_LIMIT_PER_MINUTE: '1000000',
      SUPER_ADMIN_EMAILS: 'root@worker.example',
      CODEHOST_APP_ID: github.appId,
      CODEHOST_APP_NAME: github.appSlug,
      CODEHOST_APP_PRIVATE_KEY: githubKeys.pkcs1Pem,
      CODEHOST_APP_WEBHOOK_SECRET: TEST_WEBHOOK_SECRET,
      CODEHOST_API_URL: github.url,
    });
    return teardown;
  } catch (error) {
    await teardown();
    throw error;
  }
}

/** `singleSession`: PGlite, whose connections must take turns (src/node/ws-proxy.ts). */
type TestDatabase = { url: string; address: string; singleSession: boolean; db: Db };

/**
 * Inserts an organization, a project with its `default` environment and an
 * owner token, leaving bootstrap mode open (the foundation tests close it
 * themselves through the API): system_state, not the presence of a token,
 * decides bootstrap mode.
 */
async function seedTenant(db: Db): Promise<SeededTenant> {
  const [org] = await db.insert(orgs).values({ name: 'Seeded', slug: 'seeded' }).returning();
  const [project] = await db.insert(projects).values({ orgId: org!.id, name: 'Lifecycle', slug: 'lifecycle' }).returning();
  await db.insert(environments).values({ orgId: org!.id, projectId: project!.id, name: 'default' });
  const { token, prefix } = generateServiceToken();
  await db.insert(serviceTokens).values({
    orgId: org!.id,
    projectId: project!.id,
    name: 'seeded-owner',
    prefix,
    tokenHash: await hashServiceToken(token),
    role: 'owner',
  });
  const scoped = generateServiceToken();
  await db.insert(serviceTokens).values({
    orgId: org!.id,
    projectId: project!.id,
    name: 'seeded-scoped-viewer',
    prefix: scoped.prefix,
    tokenHash: await hashServiceToken(scoped.token),
    role: 'viewer',
    cellScopes: ['stream-blue'],
  });
  return { org: org!.slug, project: project!.slug, token, scopedToken: scoped.token };
}

async function createPostgresDatabase(serverUrl: string, cleanups: (() => Promise<void>)[]): Promise<TestDatabase> {
  if (!/^postgres(ql)?:\/\//.test(serverUrl)) {
    throw new Error('TEST_DATABASE_URL expects a postgres:// or postgresql:// connection string');
  }
  const database = await createThrowawayPostgres(serverUrl, 'cellplane_w', 1);
  // drop closes the harness pool and (WITH FORCE) whatever the Worker left open
  cleanups.push(() => database.drop());
  const url = new URL(database.url!);
  return { url: url.toString(), address: `${url.hostname}:${url.port || '5432'}`, singleSession: false, db: database.database.db };
}

async function servePglite(cleanups: (() => Promise<void>)[]): Promise<TestDatabase> {
  const database = await openPglite(undefined);
  cleanups.push(() => database.close());
  if (database.kind !== 'pglite') throw new Error('expected an embedded PGlite');
  await migrateDatabase(database);
  const served = await servePgliteOverTcp(database.pglite);
  cleanups.push(() => served.stop());
  return { url: served.url, address: served.address, singleSession: true, db: database.db };
}
