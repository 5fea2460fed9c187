import { exports } from 'cloudflare:workers';
import { inArray } from 'drizzle-orm';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { actionRuns } from '../../src/db/schema';
import { eventually } from '../support/eventually';
import type { Release, Reply } from '../support/receiver';
import { platform, withDb } from './worker-database';

/**
 * Delivery under saturation on the Worker host (issue 10): the real queue of
 * wrangler.toml (miniflare's: batches of up to 5, handed to the Worker's
 * `queue` entry, src/runs/queue.ts consumeDeliveries) with receivers that
 * hold their requests, then a burst of triggers beyond a batch. Every run
 * must still be delivered, and a batch of receivers that never answer must
 * not keep the others waiting for good: miniflare hands the consumer one
 * batch at a time, so a held batch holds the queue behind it, and only the
 * attempt timeout (DELIVERY_ATTEMPT_TIMEOUT_SECONDS) ends it. In production
 * the consumer also scales out; the timeout is what bounds a batch there too.
 *
 * The receiver is the global setup's, shared with the other files: this
 * file's requests go under a path prefix of its own, scripted apart
 * (scripted-receiver.ts `?prefix=`).
 */

const BASE = 'http://cellplane.test';
const tenant = inject('seededTenant');
const receiver = inject('receiver');
const PROJECT = `/${tenant.org}/${tenant.project}`;
const ENV = `${PROJECT}/envs/default`;
const TAG = `sat-${Math.random().toString(36).slice(2, 8)}`;
/** wrangler.toml max_batch_size */
const BATCH = 5;
/** How often a wait asks the receiver or the database again. */
const POLL_MS = 100;

async function call(method: string, path: string, body?: unknown) {
  const response = await exports.default.fetch(`${BASE}${path}`, {
    method,
    headers: { authorization: `Bearer ${tenant.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

async function expectStatus(status: number, method: string, path: string, body?: unknown) {
  const response = await call(method, path, body);
  expect(response.status, `${method} ${path}: ${JSON.stringify(response.body)}`).toBe(status);
  return response.body;
}

const control = async (method: string, path: string, body?: unknown) => {
  const response = await fetch(`${receiver.control}${path}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  expect(response.status).toBe(200);
  return response.json() as Promise<any>;
};
const route = (prefix: string, ...replies: Reply[]) => control('POST', `/__script?prefix=${encodeURIComponent(prefix)}`, replies);
const heldUnder = async (prefix: string) => (await control('GET', `/__held?prefix=${encodeURIComponent(prefix)}`)).held as number;
const release = async (prefix: string, reply?: Release) =>
  (await control('POST', `/__release?prefix=${encodeURIComponent(prefix)}`, { reply })).released as number;
/** The webhook-ids that reached the receiver under `prefix`, in order. */
const arrivedUnder = async (prefix: string) =>
  ((await control('GET', '/__requests')) as { url: string; headers: Record<string, string> }[])
    .filter((request) => request.url.startsWith(prefix))
    .map((request) => request.headers['webhook-id']!);

const statuses = (runIds: string[]) =>
  withDb(async (db) => db.select({ id: actionRuns.id, status: actionRuns.status }).from(actionRuns).where(inArray(actionRuns.id, runIds)));

const count = (ids: string[], runIds: string[]) => {
  const seen = new Set(ids);
  return runIds.filter((id) => seen.has(id)).length;
};

let entity = '';
/** A webhook action on this file's entity type to `prefix` on the receiver; returns its name. */
async function action(prefix: string, retry: Record<string, unknown> = { maxAttempts: 3, initialDelayMs: 0 }) {
  const name = `${TAG}-${prefix.split('/').pop()}`;
  await expectStatus(201, 'POST', `${PROJECT}/actions`, {
    kind: 'Action',
    name,
    entityType: `${TAG}-vm`,
    onSuccess: 'running',
    onFailure: 'failed',
    trigger: { type: 'webhook', url: `${receiver.url}${prefix}/{{ entity.name }}`, payload: { entity: '{{ entity.name }}' }, retry },
  });
  return name;
}
/** `n` runs of `name`, triggered `parallel` at a time; their ids. */
async function trigger(name: string, n: number, parallel = 5): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i += parallel) {
    const chunk = Math.min(parallel, n - i);
    const runs = await Promise.all(
      Array.from({ length: chunk }, () => expectStatus(202, 'POST', `${ENV}/entities/${entity}/actions/${name}`, { parameters: {} })),
    );
    ids.push(...runs.map((run) => run.id as string));
  }
  return ids;
}

beforeAll(async () => {
  await expectStatus(201, 'POST', `${PROJECT}/entity-types`, {
    kind: 'EntityType',
    name: `${TAG}-vm`,
    states: ['new', 'running', 'failed'],
    initialState: 'new',
  });
  entity = `${TAG}-box`;
  await expectStatus(201, 'POST', `${ENV}/entities`, { kind: 'Entity', entityType: `${TAG}-vm`, name: entity });
});

/** Waits until every run of `runIds` is `status`. */
async function allReach(runIds: string[], status: string, timeoutMs: number): Promise<void> {
  let last: { status: string }[] = [];
  await eventually(
    async () => {
      last = await statuses(runIds);
      return last.length === runIds.length && last.every((run) => run.status === status) ? true : undefined;
    },
    { timeoutMs, intervalMs: POLL_MS, what: () => `${last.filter((run) => run.status === status).length} of ${runIds.length} runs ${status}` },
  );
}

describe.sequential('delivery under saturation on the Worker: the real queue and its consumer', () => {
  it('a batch held by slow receivers, then a burst of 40 beyond a batch: every run is delivered', { timeout: 90_000 }, async () => {
    const slow = `/${TAG}/slow`;
    const fast = `/${TAG}/fast`;
    await route(slow, { hold: true });
    await route(fast, { status: 200 });
    const slowAction = await action(slow);
    const fastAction = await action(fast);

    // more slow runs than a batch holds
    const slowRuns = await trigger(slowAction, BATCH + 2);
    await eventually(async () => ((await heldUnder(slow)) > 0 ? true : undefined), { timeoutMs: 20_000, intervalMs: POLL_MS, what: 'no slow request held' });

    // the burst comes while a batch waits on its receivers
    const burst = await trigger(fastAction, 40, 10);
    expect(new Set(burst).size).toBe(40);

    // the slow receivers answer in batches, as their requests come, until every slow run has been sent
    await eventually(
      async () => {
        await release(slow);
        return count(await arrivedUnder(slow), slowRuns) === slowRuns.length && (await heldUnder(slow)) === 0 ? true : undefined;
      },
      {
        timeoutMs: 40_000,
        intervalMs: POLL_MS,
        what: async () => `${count(await arrivedUnder(slow), slowRuns)} of ${slowRuns.length} slow runs and ${count(await arrivedUnder(fast), burst)} of ${burst.length} burst runs sent`,
      },
    );
    await eventually(
      async () => (count(await arrivedUnder(fast), burst) === burst.length ? true : undefined),
      { timeoutMs: 30_000, intervalMs: POLL_MS, what: async () => `${count(await arrivedUnder(fast), burst)} of ${burst.length} burst runs sent` },
    );
    expect(new Set(await arrivedUnder(slow))).toEqual(new Set(slowRuns));
    expect(new Set(await arrivedUnder(fast))).toEqual(new Set(burst));
    await allReach([...slowRuns, ...burst], 'running', 20_000);
  });

  it('receivers that never answer hold their batch only until the attempt timeout: the burst behind them is delivered', { timeout: 90_000 }, async () => {
    const hung = `/${TAG}/hung`;
    const fast = `/${TAG}/fast2`;
    await route(hung, { hang: true });
    await route(fast, { status: 200 });
    // one attempt: a timed-out attempt fails its run
    const hangAction = await action(hung, { maxAttempts: 1, initialDelayMs: 0 });
    const fastAction = await action(fast);

    const hungRuns = await trigger(hangAction, BATCH);
    await eventually(async () => ((await arrivedUnder(hung)).length > 0 ? true : undefined), { timeoutMs: 20_000, intervalMs: POLL_MS, what: 'no hung request arrived' });
    const burst = await trigger(fastAction, 30, 10);

    await eventually(
      async () => (count(await arrivedUnder(fast), burst) === burst.length ? true : undefined),
      {
        timeoutMs: 60_000,
        intervalMs: POLL_MS,
        what: async () => `${count(await arrivedUnder(fast), burst)} of ${burst.length} burst runs sent, ${count(await arrivedUnder(hung), hungRuns)} of ${hungRuns.length} hung runs sent`,
      },
    );
    await allReach(burst, 'running', 20_000);
    await allReach(hungRuns, 'failed', 30_000);
    expect(new Set(await arrivedUnder(hung))).toEqual(new Set(hungRuns));
    const failed = await expectStatus(200, 'GET', `${ENV}/action-runs/${hungRuns[0]}`);
    expect(failed.error).toContain(`no response within ${platform.config.deliveryAttemptTimeoutMs / 1000} s`);
  });
});
