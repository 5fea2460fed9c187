import { sql } from 'drizzle-orm';
import { check, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { actions } from './actions';
import { createdAt, id, optionalTimestamp } from './columns';
import { entities } from './runtime';
import { envId } from './tenancy';

/**
 * Action runs (SPEC ActionRun; DECISIONS §4) and the machinery that carries
 * them out: the delivery job (the outbox row written with the run) and the
 * log of delivery attempts.
 */

export const RUN_STATUSES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
/** The active states: a run in one of them may still be delivered, completed, cancelled or reaped. */
export const ACTIVE_RUN_STATUSES = ['pending', 'running'] as const satisfies readonly RunStatus[];

export const actionRuns = pgTable(
  'action_runs',
  {
    id: id(),
    /**
     * The run's organization and project, for reads; no foreign keys of
     * their own: the environment's (env_id) cascades from both, and each
     * key a run's insert checks costs its trigger a lookup and a row lock
     * (bench/http-results.md, "2026-11-29, evening").
     */
    orgId: uuid('org_id').notNull(),
    projectId: uuid('project_id').notNull(),
    envId: envId(),
    /** The definition it ran; null once the action is deleted (the run's record stays). */
    actionId: uuid('action_id').references(() => actions.id, { onDelete: 'set null' }),
    actionName: text('action_name').notNull(),
    /** null once the entity is deleted. */
    entityId: uuid('entity_id').references(() => entities.id, { onDelete: 'set null' }),
    /** The entity's name when the run was triggered; kept after the entity is gone. */
    operationEntityName: text('operation_entity_name'),
    status: text('status', { enum: RUN_STATUSES }).notNull().default('pending'),
    parameters: jsonb('parameters').notNull().default(sql`'{}'::jsonb`),
    recommendations: jsonb('recommendations').notNull().default(sql`'{}'::jsonb`),
    triggeredBy: text('triggered_by').notNull(),
    /**
     * The action's trigger as it stood when the run was triggered, templates
     * not yet interpolated: a later edit of the action does not change what
     * an accepted run sends, and no resolved secret is ever stored.
     */
    trigger: jsonb('trigger').notNull(),
    /** What `{{ entity.* }}` means for this run: the entity as it was at trigger time. */
    entitySnapshot: jsonb('entity_snapshot').notNull(),
    onSuccess: text('on_success'),
    onFailure: text('on_failure'),
    /** Base of `{{ run.callbackUrl }}`: API_BASE_URL, or the origin the trigger request reached. */
    callbackBaseUrl: text('callback_base_url').notNull(),
    idempotencyKey: text('idempotency_key'),
    /** What the Idempotency-Key stood for: a replay with another body is refused. */
    requestFingerprint: text('request_fingerprint'),
    timeoutMinutes: integer('timeout_minutes').notNull(),
    /** created_at + timeout: the reaper fails an active run past it; the callback token expires with it. */
    timeoutAt: optionalTimestamp('timeout_at').notNull(),
    createdAt: createdAt(),
    startedAt: optionalTimestamp('started_at'),
    completedAt: optionalTimestamp('completed_at'),
    error: text('error'),
    output: jsonb('output'),
    /** A pull-request run's pull request (DECISIONS §8): `owner/name`, its number, URL and head commit. */
    repo: text('repo'),
    prNumber: integer('pr_number'),
    prUrl: text('pr_url'),
    headSha: text('head_sha'),
  },
  (t) => [
    check('action_runs_status_check', sql`${t.status} in ('pending', 'running', 'succeeded', 'failed', 'cancelled')`),
    // the run list: newest first, keyset on (created_at, id)
    index('action_runs_env_created_idx').on(t.envId, t.createdAt.desc(), t.id.desc()),
    index('action_runs_entity_idx').on(t.entityId),
    uniqueIndex('action_runs_env_idempotency_key_unique')
      .on(t.envId, t.idempotencyKey)
      .where(sql`${t.idempotencyKey} is not null`),
    // the reaper reads only active runs, by deadline
    index('action_runs_active_timeout_idx')
      .on(t.timeoutAt)
      .where(sql`${t.status} in ('pending', 'running')`),
    // a pull_request webhook finds the active run of its repository and pull request
    index('action_runs_active_pull_request_idx')
      .on(t.repo, t.prNumber)
      .where(sql`${t.status} in ('pending', 'running') and ${t.repo} is not null`),
  ],
);

/**
 * The outbox: one row per run whose trigger still has to be delivered,
 * written in the trigger's transaction and deleted in the transaction that
 * records the delivery's end. It is the truth about what is owed; a queue
 * message (Worker) or a poll (Node) only says "look at it now".
 *
 * A worker leases a due job (`lease_until`) before its attempt and writes
 * the attempt's outcome afterwards, so a process killed mid-attempt leaves a
 * lease that runs out, and the job is taken up again: at least once, with
 * the same `webhook-id`.
 */
export const deliveryJobs = pgTable(
  'delivery_jobs',
  {
    runId: uuid('run_id')
      .primaryKey()
      .references(() => actionRuns.id, { onDelete: 'cascade' }),
    /** The run's environment; no foreign key of its own: the job goes with its run, and the run with its environment. */
    envId: uuid('env_id').notNull(),
    /** The number of the next attempt, from 1. */
    attempt: integer('attempt').notNull().default(1),
    runAt: optionalTimestamp('run_at').notNull(),
    leaseUntil: optionalTimestamp('lease_until'),
    /** Worker: when a queue message was last sent for this job; the cron sweep re-sends lost ones. */
    dispatchedAt: optionalTimestamp('dispatched_at'),
    createdAt: createdAt(),
  },
  (t) => [index('delivery_jobs_run_at_idx').on(t.runAt)],
);

/** Every delivery attempt of a run: when, the HTTP status (if any), how long, and what went wrong. */
export const runAttempts = pgTable(
  'run_attempts',
  {
    runId: uuid('run_id')
      .notNull()
      .references(() => actionRuns.id, { onDelete: 'cascade' }),
    attempt: integer('attempt').notNull(),
    startedAt: optionalTimestamp('started_at').notNull(),
    latencyMs: integer('latency_ms').notNull(),
    /** The receiver's HTTP status; null when no response came (network error, timeout, refusal). */
    httpStatus: integer('http_status'),
    /** `delivered`, `retry` (another attempt is scheduled) or `failed` (the run failed with it). */
    outcome: text('outcome', { enum: ['delivered', 'retry', 'failed'] }).notNull(),
    error: text('error'),
  },
  (t) => [primaryKey({ name: 'run_attempts_pk', columns: [t.runId, t.attempt] })],
);
