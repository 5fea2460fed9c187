import { and, isNull, lt, lte, or, sql } from 'drizzle-orm';
import { deliveryJobs } from '../db/schema';
import { reapTimedOutRuns, failDeadLettered } from './transitions';
import { claimJob, runDeliveryAttempt } from './delivery';
import { pruneChanges } from '../stream/feed';
import type { RunEngine } from './engine';

/**
 * The Worker's delivery path (QUEUE_DRIVER=cloudflare): a queue message names
 * a job and its attempt; the job row stays the truth (src/runs/delivery.ts).
 * Each message is acked or retried on its own. A message lost anywhere — the
 * send after a commit failed, a consumer died holding a lease — is made up
 * for by the cron sweep, which re-sends every job overdue and unheld.
 */

export interface DeliveryMessage {
  runId: string;
  attempt: number;
}

/** What a consumer needs of a queue message (Cloudflare's Message, narrowed). */
export interface QueueMessage {
  body: unknown;
  ack(): void;
  retry(options?: { delaySeconds?: number }): void;
}

export interface DeliveryQueue {
  send(message: DeliveryMessage, options?: { delaySeconds?: number }): Promise<void>;
}

/** Queues take whole seconds (ARCHITECTURE.md); a delay is rounded up, never down. */
export const delaySecondsUntil = (runAt: Date, now: Date): number => Math.max(0, Math.ceil((runAt.getTime() - now.getTime()) / 1000));

function isDeliveryMessage(body: unknown): body is DeliveryMessage {
  const candidate = body as Partial<DeliveryMessage> | null;
  return typeof candidate?.runId === 'string' && Number.isInteger(candidate.attempt);
}

/** The consumer of the deliveries queue. */
export async function consumeDeliveries(engine: RunEngine, queue: DeliveryQueue, messages: readonly QueueMessage[]): Promise<void> {
  await Promise.all(
    messages.map(async (message) => {
      if (!isDeliveryMessage(message.body)) {
        engine.logger.error('dropped a malformed delivery message', { body: message.body });
        message.ack();
        return;
      }
      const { runId, attempt } = message.body;
      try {
        const claim = await claimJob(engine, runId, attempt);
        if (claim === null) {
          // done already, moved on to a later attempt, or held by a live worker: nothing for this message to do
          message.ack();
        } else if ('early' in claim) {
          message.retry({ delaySeconds: delaySecondsUntil(claim.early, engine.clock.now()) });
        } else {
          const result = await runDeliveryAttempt(engine, claim);
          if (result.kind === 'retry') {
            await queue.send({ runId, attempt: result.attempt }, { delaySeconds: delaySecondsUntil(result.runAt, engine.clock.now()) });
          }
          message.ack();
        }
      } catch (error) {
        // A lease taken for this attempt holds the job until it runs out, and a
        // message arriving sooner would find the job held and be acked as a
        // duplicate: so the retry waits out the lease. Each failure uses one of
        // the consumer's max_retries (wrangler.toml); then the dead-letter queue.
        const delaySeconds = Math.ceil(engine.leaseMs / 1000);
        engine.logger.error('delivery message failed; the queue will retry it', { runId, attempt, delaySeconds, error });
        message.retry({ delaySeconds });
      }
    }),
  );
}

/** The consumer of the dead-letter queue: the run fails, with a `[delivery]` reason; each message acked or retried on its own. */
export async function consumeDeadLetters(engine: RunEngine, messages: readonly QueueMessage[]): Promise<void> {
  await Promise.all(
    messages.map(async (message) => {
      if (!isDeliveryMessage(message.body)) {
        engine.logger.error('dropped a malformed dead-lettered message', { body: message.body });
        message.ack();
        return;
      }
      const { runId, attempt } = message.body;
      try {
        const failed = await failDeadLettered(engine.db, engine.clock, runId, attempt);
        engine.logger.error('delivery dead-lettered', { runId, attempt, runFailed: failed });
        message.ack();
      } catch (error) {
        // past the dead-letter queue's own retries the message is dropped; the job row is still there, so the sweep re-sends it
        engine.logger.error('dead-lettered message failed; the queue will retry it', { runId, attempt, error });
        message.retry();
      }
    }),
  );
}

/** A job this long overdue and held by nobody lost its message. */
export const SWEEP_GRACE_MS = 60_000;

/**
 * Re-sends a message for every job overdue by more than the grace period and
 * not held by a live worker, at most once per grace period each.
 */
export async function sweepLostDeliveries(engine: RunEngine, queue: DeliveryQueue, limit = 500): Promise<number> {
  const now = engine.clock.now();
  const overdue = new Date(now.getTime() - SWEEP_GRACE_MS);
  const rows = await engine.db
    .update(deliveryJobs)
    .set({ dispatchedAt: now })
    .where(
      sql`${deliveryJobs.runId} in (${engine.db
        .select({ runId: deliveryJobs.runId })
        .from(deliveryJobs)
        .where(
          and(
            lte(deliveryJobs.runAt, overdue),
            or(isNull(deliveryJobs.leaseUntil), lt(deliveryJobs.leaseUntil, now)),
            or(isNull(deliveryJobs.dispatchedAt), lt(deliveryJobs.dispatchedAt, overdue)),
          ),
        )
        .limit(limit)})`,
    )
    .returning({ runId: deliveryJobs.runId, attempt: deliveryJobs.attempt });
  for (const row of rows) await queue.send({ runId: row.runId, attempt: row.attempt });
  if (rows.length > 0) engine.logger.warn('re-sent lost delivery messages', { count: rows.length });
  return rows.length;
}

/** The cron tick: reap timed-out runs, re-send lost deliveries, drop changes past the log's retention. */
export async function scheduledTick(engine: RunEngine, queue: DeliveryQueue): Promise<{ reaped: string[]; resent: number }> {
  const reaped = await reapTimedOutRuns(engine.db, engine.clock);
  if (reaped.length > 0) engine.logger.info('reaped timed-out runs', { count: reaped.length, runIds: reaped });
  const resent = await sweepLostDeliveries(engine, queue);
  const pruned = await pruneChanges(engine.db, engine.clock.now());
  if (pruned > 0) engine.logger.info('pruned the change log', { count: pruned });
  return { reaped, resent };
}
