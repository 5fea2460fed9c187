import { createExecutionContext, createMessageBatch, createScheduledController, getQueueResult } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { actionRuns, deliveryJobs, entities } from '../../src/db/schema';
import { delaySecondsUntil, SWEEP_GRACE_MS, type DeliveryMessage } from '../../src/runs/queue';
import worker from '../../src/worker';
import type { WorkerEnv } from '../../src/worker-platform';
import type { Reply } from '../support/receiver';
import { platform, withDb } from './worker-database';

/**
 * The Worker's delivery path in workerd: a trigger through the API, the
 * `queue` handler (deliveries and their dead-letter queue) and the
 * `scheduled` handler (reaper and sweep), against the database of the global
 * setup and a real HTTP receiver on 127.0.0.1, scripted through its control
 * server.
 *
 * The queue of wrangler.toml is real here (miniflare's): the DELIVERIES
 * binding sends to it and it calls the Worker's `queue` entry, like
 * production. The tests put a tap on that entry: a message of a run the
 * test has not handed to the queue (`throughQueue`) is recorded and acked
 * unprocessed, so each test drives the handler itself with batches from
 * `createMessageBatch`, and `getQueueResult` shows each message's ack or
 * retry. What the handler sends is recorded as it is sent (`sends`), with
 * its delay, and then travels the real queue like any message.
 */

const BASE = 'http://cellplane.test';
const tenant = inject('seededTenant');
const receiver = inject('receiver');
const PROJECT = `/${tenant.org}/${tenant.project}`;
const ENV = `${PROJECT}/envs/default`;
const DELIVERIES = 'cellplane-deliveries';
const DEAD_LETTERS = 'cellplane-deliveries-dlq';

// --- the API, the receiver, the database -------------------------------------

async function call(method: string, url: string, options: { body?: unknown; token?: string } = {}) {
  const headers: Record<string, string> = { authorization: `Bearer ${options.token ?? tenant.token}` };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await exports.default.fetch(url.startsWith('http') ? url : `${BASE}${url}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

interface Run {
  id: string;
  status: string;
  error: string | null;
  output: unknown;
  startedAt: string | null;
  attempts: { attempt: number; httpStatus: number | null; outcome: string; error: string | null }[];
}

const getRun = async (id: string): Promise<Run> => (await call('GET', `${ENV}/action-runs/${id}`)).body;

async function script(...replies: Reply[]): Promise<void> {
  const response = await fetch(`${receiver.control}/__script`, { method: 'POST', body: JSON.stringify(replies) });
  expect(response.status).toBe(200);
}

interface Received {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** What the receiver got at this entity's hook, oldest first. */
async function receivedFor(entity: string): Promise<Received[]> {
  const all = (await (await fetch(`${receiver.control}/__requests`)).json()) as Received[];
  return all.filter((request) => request.url === `/hooks/${entity}`);
}


/** The entity's state, read from its row (the entity API has its own tests). */
const stateOf = (name: string) =>
  withDb(async (db) => (await db.select({ state: entities.state }).from(entities).where(eq(entities.name, name)).limit(1))[0]?.state);

const jobOf = (runId: string) =>
  withDb(async (db) => (await db.select().from(deliveryJobs).where(eq(deliveryJobs.runId, runId)).limit(1))[0]);

// --- the queue: the tap on the Worker's entry, and driving the handler --------

/** The Worker's entry with the handler signatures of the runtime (src/worker.ts leaves out the arguments it does not use). */
const entry = worker as Required<Pick<ExportedHandler<WorkerEnv>, 'queue' | 'scheduled'>>;
const handleBatch = entry.queue.bind(entry);
/** Every message the real queue delivered, in order. */
const tapped: unknown[] = [];
/** Runs whose messages the real queue hands to the real handler. */
const throughQueue = new Set<string>();

const tappedFor = (runId: string) => tapped.filter((body) => (body as DeliveryMessage | null)?.runId === runId);

/** Every message sent while a handler ran, with its options, before it enters the queue. */
let sends: { body: DeliveryMessage; delaySeconds: number | undefined }[] = [];
const recordingEnv: WorkerEnv = {
  ...env,
  DELIVERIES: {
    send: async (body: DeliveryMessage, options?: QueueSendOptions) => {
      sends.push({ body, delaySeconds: options?.delaySeconds });
      await env.DELIVERIES.send(body, options);
    },
    sendBatch: () => Promise.reject(new Error('the run engine sends one message at a time')),
  } as unknown as Queue,
};

let messageIds = 0;

/** One batch through the Worker's `queue` handler: which messages it acked, which it retried. */
async function consume(queue: string, bodies: unknown[]) {
  const ids = bodies.map(() => `message-${++messageIds}`);
  const batch = createMessageBatch(
    queue,
    bodies.map((body, i) => ({ id: ids[i]!, timestamp: new Date(), attempts: 1, body })),
  );
  const retries = batch.messages.map((message) => vi.spyOn(message, 'retry'));
  sends = [];
  const ctx = createExecutionContext();
  await handleBatch(batch, recordingEnv, ctx);
  // FetcherQueueResult is not in this @cloudflare/workers-types; the fields used here
  const result: { explicitAcks: string[]; retryMessages: { msgId: string }[] } = await getQueueResult(batch, ctx);
  const name = (id: string) => ids.indexOf(id);
  return {
    acked: result.explicitAcks.map(name),
    retried: result.retryMessages.map((m) => name(m.msgId)),
    /** The options each message's retry() got (getQueueResult does not report them). */
    retryOptions: retries.map((spy) => spy.mock.calls[0]?.[0]),
    sent: sends,
  };
}

async function tick() {
  sends = [];
  const ctx = createExecutionContext();
  await entry.scheduled(createScheduledController({ cron: '* * * * *' }), recordingEnv, ctx);
  return { sent: sends };
}

// --- fixtures ------------------------------------------------------------------

let entityCount = 0;

/** A new `vm`, its `deploy` triggered (202), and the message the trigger sent, as the queue delivered it. */
async function triggered() {
  const entity = `vm-${++entityCount}`;
  const created = await call('POST', `${ENV}/entities`, { body: { kind: 'Entity', entityType: 'vm', name: entity } });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const response = await call('POST', `${ENV}/entities/${entity}/actions/deploy`, { body: { parameters: { size: 'large' } } });
  expect(response.status, JSON.stringify(response.body)).toBe(202);
  const run = response.body as Run;
  expect(run.status).toBe('pending');
  await vi.waitFor(() => expect(tappedFor(run.id)).toEqual([{ runId: run.id, attempt: 1 }]), { timeout: 10_000, interval: 50 });
  return { entity, runId: run.id, message: { runId: run.id, attempt: 1 } satisfies DeliveryMessage };
}

/** The callback the receiver was handed, made through the API like the external workflow would. */
async function callBack(request: Received, result: unknown) {
  const payload = JSON.parse(request.body) as { callbackUrl: string; callbackToken: string };
  return call('POST', payload.callbackUrl, { token: payload.callbackToken, body: result });
}

const deployAction = {
  kind: 'Action',
  name: 'deploy',
  entityType: 'vm',
  onSuccess: 'running',
  onFailure: 'failed',
  parameters: [{ name: 'size', type: 'string', default: 'small' }],
  trigger: {
    type: 'webhook',
    url: `${receiver.url}/hooks/{{ entity.name }}`,
    payload: {
      entity: '{{ entity.name }}',
      size: '{{ parameters.size }}',
      callbackUrl: '{{ run.callbackUrl }}',
      callbackToken: '{{ run.callbackToken }}',
    },
    // no wait between attempts unless the receiver asks for one (Retry-After)
    retry: { maxAttempts: 3, initialDelayMs: 0 },
  },
};

beforeAll(async () => {
  vi.spyOn(entry, 'queue').mockImplementation(async (batch, batchEnv, ctx) => {
    const through = batch.messages.filter((m) => throughQueue.has((m.body as DeliveryMessage | null)?.runId ?? ''));
    for (const message of batch.messages) {
      tapped.push(message.body);
      if (!through.includes(message)) message.ack();
    }
    if (through.length === 0) return;
    const part: MessageBatch = {
      queue: batch.queue,
      messages: through,
      metadata: batch.metadata,
      ackAll: () => through.forEach((m) => m.ack()),
      retryAll: (options) => through.forEach((m) => m.retry(options)),
    };
    await handleBatch(part, batchEnv, ctx);
  });
  const type = await call('POST', `${PROJECT}/entity-types`, {
    body: {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
    },
  });
  expect(type.status, JSON.stringify(type.body)).toBe(201);
  expect((await call('POST', `${PROJECT}/actions`, { body: deployAction })).status).toBe(201);
});

afterAll(() => {
  vi.restoreAllMocks();
});

// --- the tests -----------------------------------------------------------------

describe.sequential('deliveries on the Worker: the queue handler', () => {
  it('delivers a due message: the receiver gets the trigger, the message is acked, the run is running', async () => {
    await script({ status: 202 });
    const { entity, runId, message } = await triggered();

    const result = await consume(DELIVERIES, [message]);
    expect(result).toMatchObject({ acked: [0], retried: [], sent: [] });

    const [request, ...more] = await receivedFor(entity);
    expect(more).toEqual([]);
    expect(request).toMatchObject({ method: 'POST', headers: { 'webhook-id': runId } });
    expect(JSON.parse(request!.body)).toMatchObject({ entity, size: 'large', callbackUrl: expect.stringContaining(`/action-runs/${runId}/callback`) });
    const run = await getRun(runId);
    expect(run).toMatchObject({ status: 'running', attempts: [{ attempt: 1, httpStatus: 202, outcome: 'delivered', error: null }] });
    expect(run.startedAt).not.toBeNull();
    expect(await jobOf(runId)).toBeUndefined();

    // the callback ends it, and moves the entity to onSuccess
    const done = await callBack(request!, { status: 'succeeded', output: { url: 'https://app.example.com' } });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body).toMatchObject({ status: 'succeeded', output: { url: 'https://app.example.com' } });
    expect(await stateOf(entity)).toBe('running');
  });

  it('on a 503 records the attempt, re-schedules the job and sends a message for attempt 2, which the queue carries to the next delivery', async () => {
    await script({ status: 503 }, { status: 200 });
    const { entity, runId, message } = await triggered();
    // from here the real queue hands this run's messages to the real handler
    throughQueue.add(runId);

    const result = await consume(DELIVERIES, [message]);
    expect(result).toMatchObject({ acked: [0], retried: [] });
    // initialDelayMs 0 and no Retry-After: due at once
    expect(result.sent).toEqual([{ body: { runId, attempt: 2 }, delaySeconds: 0 }]);
    const afterFirst = await getRun(runId);
    expect(afterFirst).toMatchObject({
      status: 'pending',
      attempts: [{ attempt: 1, httpStatus: 503, outcome: 'retry', error: 'the receiver answered HTTP 503' }],
    });

    // miniflare's queue delivers attempt 2 to the Worker's queue entry, and the receiver now answers 200
    await vi.waitFor(async () => expect((await getRun(runId)).status).toBe('running'), { timeout: 10_000, interval: 100 });
    expect(tappedFor(runId)).toEqual([message, { runId, attempt: 2 }]);
    expect((await receivedFor(entity)).length).toBe(2);
    expect((await getRun(runId)).attempts.map((a) => [a.attempt, a.httpStatus, a.outcome])).toEqual([
      [1, 503, 'retry'],
      [2, 200, 'delivered'],
    ]);
    expect(await jobOf(runId)).toBeUndefined();
  });

  it('honours Retry-After: attempt 2 is sent with that delay; its message coming early is retried, a stale one acked with nothing sent', async () => {
    await script({ status: 503, headers: { 'retry-after': '120' } });
    const { entity, runId, message } = await triggered();

    const first = await consume(DELIVERIES, [message]);
    expect(first).toMatchObject({ acked: [0], retried: [] });
    expect(first.sent).toHaveLength(1);
    expect(first.sent[0]!.body).toEqual({ runId, attempt: 2 });
    expect(first.sent[0]!.delaySeconds).toBeGreaterThan(110);
    expect(first.sent[0]!.delaySeconds).toBeLessThanOrEqual(120);
    const job = await jobOf(runId);
    expect(job).toMatchObject({ attempt: 2, leaseUntil: null });
    expect(job!.runAt.getTime()).toBeGreaterThan(Date.now() + 110_000);

    // attempt 2 before its time: back to the queue until then, nothing delivered
    const early = await consume(DELIVERIES, [{ runId, attempt: 2 }]);
    expect(early).toMatchObject({ acked: [], retried: [0], sent: [] });
    expect(early.retryOptions[0]!.delaySeconds).toBeGreaterThan(110);
    expect(early.retryOptions[0]!.delaySeconds).toBeLessThanOrEqual(120);

    // attempt 1 again (a duplicate, or the queue's redelivery): it has passed, nothing to do
    const stale = await consume(DELIVERIES, [message]);
    expect(stale).toMatchObject({ acked: [0], retried: [], sent: [] });

    expect((await receivedFor(entity)).length).toBe(1);
    expect(await jobOf(runId)).toMatchObject({ attempt: 2, runAt: job!.runAt, leaseUntil: null });
    expect((await call('DELETE', `${ENV}/action-runs/${runId}`)).body.status).toBe('cancelled');
  });

  it('acks a malformed message and logs it', async () => {
    const logged = vi.spyOn(console, 'error');
    const result = await consume(DELIVERIES, [{ hello: 'world' }, 'not json at all', null]);
    expect(result).toMatchObject({ acked: [0, 1, 2], retried: [], sent: [] });
    const lines = logged.mock.calls.map(([line]) => String(line)).filter((line) => line.includes('malformed delivery message'));
    expect(lines).toHaveLength(3);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'error', body: { hello: 'world' } });
    logged.mockRestore();
  });

  it('acks or retries each message of a mixed batch on its own', async () => {
    await script({ status: 200 });
    const due = await triggered();
    const held = await triggered();
    // held's attempt is not due for a minute
    await withDb((db) => db.update(deliveryJobs).set({ runAt: new Date(Date.now() + 60_000) }).where(eq(deliveryJobs.runId, held.runId)));

    const result = await consume(DELIVERIES, [held.message, { runId: due.runId, attempt: 7 }, due.message, { runId: 42 }]);
    expect(result).toMatchObject({ acked: [1, 2, 3], retried: [0], sent: [] });
    expect((await getRun(due.runId)).status).toBe('running');
    expect((await getRun(held.runId)).status).toBe('pending');
    expect(await receivedFor(held.entity)).toEqual([]);
    await call('DELETE', `${ENV}/action-runs/${held.runId}`);
  });

  it('retries a message the handler fails on, after the lease it took runs out', async () => {
    const { runId, message } = await triggered();
    // a run the engine cannot read (its stored trigger is not an object) makes the attempt throw
    await withDb((db) => db.update(actionRuns).set({ trigger: sql`'null'::jsonb` }).where(eq(actionRuns.id, runId)));

    const result = await consume(DELIVERIES, [message]);
    expect(result).toMatchObject({ acked: [], retried: [0], sent: [] });
    expect(result.retryOptions[0]).toEqual({ delaySeconds: Math.ceil(platform.config.deliveryLeaseMs / 1000) });
    expect(await jobOf(runId)).toMatchObject({ attempt: 1, leaseUntil: expect.any(Date) });
    expect((await getRun(runId)).status).toBe('pending');
    // sooner, the job is still held: the message would be taken for a duplicate and acked
    expect(await consume(DELIVERIES, [message])).toMatchObject({ acked: [0], retried: [] });

    // past max_retries the queue dead-letters it: the dead-letter consumer fails the run
    const dead = await consume(DEAD_LETTERS, [message]);
    expect(dead).toMatchObject({ acked: [0], retried: [] });
    const failed = await getRun(runId);
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/^\[delivery\] the delivery could not be processed/);
    expect(await jobOf(runId)).toBeUndefined();
  });

  it('a dead-lettered message fails its run with a [delivery] error and drops the job; a malformed one is acked', async () => {
    const { runId, message } = await triggered();

    const result = await consume(DEAD_LETTERS, [message, 'garbage']);
    expect(result).toMatchObject({ acked: [0, 1], retried: [], sent: [] });
    const failed = await getRun(runId);
    expect(failed).toMatchObject({ status: 'failed', attempts: [] });
    expect(failed.error).toMatch(/^\[delivery\] the delivery could not be processed/);
    expect(await jobOf(runId)).toBeUndefined();
  });
});

describe.sequential('deliveries on the Worker: the cron tick', () => {
  it('reaps runs past their deadline: running and pending ones fail, each with its reason, and their jobs go', async () => {
    await script({ status: 200 });
    const running = await triggered();
    const pending = await triggered();
    await consume(DELIVERIES, [running.message]);
    const past = new Date(Date.now() - 60_000);
    await withDb((db) => db.update(actionRuns).set({ timeoutAt: past }).where(eq(actionRuns.id, running.runId)));
    await withDb((db) => db.update(actionRuns).set({ timeoutAt: past }).where(eq(actionRuns.id, pending.runId)));

    await tick();

    expect(await getRun(running.runId)).toMatchObject({ status: 'failed', error: 'timed out after 60 minutes without a completion' });
    expect(await getRun(pending.runId)).toMatchObject({
      status: 'failed',
      error: '[delivery] timed out after 60 minutes before the trigger could be delivered',
    });
    expect(await jobOf(pending.runId)).toBeUndefined();
    // a late callback finds it over
    const [request] = await receivedFor(running.entity);
    const late = await callBack(request!, { status: 'succeeded' });
    expect({ status: late.status, code: late.body.code }).toEqual({ status: 409, code: 'run_not_completable' });
  });

  it('re-sends a lost delivery once per grace period; the queue carries it to the receiver and the callback completes the run', async () => {
    await script({ status: 200 });
    // its message was taken by the tap and never processed: lost
    const { entity, runId, message } = await triggered();
    const overdue = new Date(Date.now() - SWEEP_GRACE_MS - 1_000);
    await withDb((db) => db.update(deliveryJobs).set({ runAt: overdue }).where(and(eq(deliveryJobs.runId, runId), eq(deliveryJobs.attempt, 1))));
    throughQueue.add(runId);

    const before = Date.now();
    const { sent } = await tick();
    expect(sent.filter((s) => s.body.runId === runId)).toEqual([{ body: message, delaySeconds: undefined }]);
    const job = await jobOf(runId);
    expect(job?.dispatchedAt?.getTime()).toBeGreaterThanOrEqual(before - 1_000);

    // the real queue hands it to the Worker's queue handler, which delivers it
    await vi.waitFor(async () => expect((await getRun(runId)).status).toBe('running'), { timeout: 10_000, interval: 100 });
    expect(tappedFor(runId)).toEqual([message, message]);
    const [request] = await receivedFor(entity);
    expect(request!.headers['webhook-id']).toBe(runId);

    const done = await callBack(request!, { status: 'failed', error: 'terraform apply failed' });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body).toMatchObject({ status: 'failed', error: 'terraform apply failed' });
    expect(await stateOf(entity)).toBe('failed');
  });

  it('does not re-send a job it re-sent within the grace period', async () => {
    const { runId } = await triggered();
    const overdue = new Date(Date.now() - SWEEP_GRACE_MS - 1_000);
    await withDb((db) => db.update(deliveryJobs).set({ runAt: overdue }).where(eq(deliveryJobs.runId, runId)));

    expect((await tick()).sent.filter((s) => s.body.runId === runId)).toHaveLength(1);
    expect((await tick()).sent.filter((s) => s.body.runId === runId)).toHaveLength(0);
    await call('DELETE', `${ENV}/action-runs/${runId}`);
  });
});

describe('delaySecondsUntil (Queues take whole seconds; getQueueResult does not show them)', () => {
  const now = new Date('2026-01-01T00:00:00.000Z');
  const later = (ms: number) => new Date(now.getTime() + ms);
  it('rounds up, so a message never arrives before its job is due', () => {
    expect(delaySecondsUntil(later(1), now)).toBe(1);
    expect(delaySecondsUntil(later(1_000), now)).toBe(1);
    expect(delaySecondsUntil(later(1_001), now)).toBe(2);
    expect(delaySecondsUntil(later(120_000), now)).toBe(120);
  });
  it('is 0 for a job due now or overdue', () => {
    expect(delaySecondsUntil(now, now)).toBe(0);
    expect(delaySecondsUntil(later(-5_000), now)).toBe(0);
  });
});
