import type { z } from '@hono/zod-openapi';
import type { Config } from '../config';
import type { RunEngine } from './engine';
import type { InterpolationContext } from './interpolation';
import type { RetryPolicy } from './retry';
import type { RunDraft, RunRow } from './run-context';

/**
 * The contract of a trigger kind (ARCHITECTURE "Runs: trigger kinds"): how a
 * run of an action is carried out, from the definition to the run's end.
 * The engine knows kinds only through this shape, in the registry of
 * src/runs/trigger-kinds/index.ts; `webhook` and `pull-request` are two
 * entries, and another kind is one more file there.
 *
 *   definition  `schema` validates the action's trigger; `redact` is how
 *               responses show it.
 *   trigger     `prepare`: the dry run — everything a delivery could refuse
 *               that can be known now is the caller's 4xx now (the request
 *               is answered with an ApiError), not a failed run later.
 *   delivery    `send`: one attempt, outside any transaction; `classify`:
 *               its result as delivered / retryable / rejected. The engine
 *               records the attempt and moves the run (src/runs/delivery.ts,
 *               src/runs/transitions.ts): running, or the next attempt per
 *               `retryPolicy`, or failed with `[delivery] ...`.
 *   completion  `complete` (optional): how a report (the callback, or the
 *               kind's own inbound event) ends the run; by default, as reported.
 *
 * A kind never changes a run's state itself: every state change is
 * src/runs/transitions.ts's.
 */

/** A trigger as the action and the run store it: its kind's definition, templates unresolved. */
export interface TriggerDefinition {
  type: string;
}

/** Columns of a run that belong to its kind (a pull-request run's pull request, DECISIONS §8). */
export type KindColumns = Partial<Pick<RunRow, 'repo' | 'prNumber' | 'prUrl' | 'headSha'>>;

/** Trigger time: the run is about to be written, with its delivery job, in one transaction. */
export interface TriggerTime {
  config: Config;
  run: RunDraft;
  /** The run's template context with a stand-in callback token; only the secrets named are decrypted. */
  templateContext(secretNames: string[]): Promise<InterpolationContext>;
}

/** One delivery attempt of a pending run. */
export interface Attempt<Trigger> {
  /** The run's stored trigger. */
  trigger: Trigger;
  run: RunRow;
  /** The attempt's number, from 1 (the retry policy counts them). */
  number: number;
  /** Config, clock, logger, fetch, resolveHost, the attempt timeout, the modules' ports. */
  engine: RunEngine;
  /**
   * Aborted when the host stops. A kind lets the error of a request aborted by
   * it propagate: the attempt is then not recorded and is made again later.
   */
  signal?: AbortSignal;
  /**
   * The run's template context, its callback token signed; every secret and
   * the token are concealed. A value that cannot be decrypted is Undeliverable.
   */
  templateContext(secretNames: string[]): Promise<InterpolationContext>;
  /** Values that must never reach a recorded error: every problem text is scrubbed of them. */
  conceal(...values: string[]): void;
}

/** What every attempt records, whatever its kind: the HTTP status of its last call (null when none answered) and how long it took. */
export interface Sent {
  httpStatus: number | null;
  latencyMs: number;
}

/** An attempt's result, for the run. */
export type Verdict =
  /** Carried out: the run becomes `running`, with the kind's columns. */
  | { kind: 'delivered'; columns?: KindColumns }
  /** Failed for now: another attempt per the retry policy, no sooner than `retryAfterMs`; past the last, the run fails. */
  | { kind: 'retryable'; problem: string; retryAfterMs?: number }
  /** Failed for good: the run fails with `[delivery] <problem> (not retried)`. */
  | { kind: 'rejected'; problem: string };

/** How a run is reported to have ended: the callback's body (DECISIONS §4), or a kind's event made into one. */
export type RunReport = { status: 'succeeded'; output?: unknown } | { status: 'failed'; error: string; output?: unknown };

/** Where a report came from: the run's callback, or an inbound event of the run's kind (e.g. a pull request closed). */
export type ReportSource = 'callback' | 'kind-event';

export interface TriggerKind<Trigger extends TriggerDefinition = TriggerDefinition, Result extends Sent = Sent> {
  readonly type: Trigger['type'];
  /** The trigger's definition, as actions accept and store it. */
  readonly schema: z.ZodType<Trigger>;
  /** The trigger as responses show it: literal credentials replaced by `[redacted]`. */
  redact(trigger: Trigger): Trigger;
  /**
   * The dry run at trigger time; throws an ApiError (src/http/errors.ts) for
   * what the caller must fix. Returns the kind's columns of the new run.
   */
  prepare(time: TriggerTime, trigger: Trigger): Promise<KindColumns>;
  /** One attempt. Throws Undeliverable for what no later attempt can change. */
  send(attempt: Attempt<Trigger>): Promise<Result>;
  classify(result: Result, trigger: Trigger): Verdict;
  retryPolicy(trigger: Trigger): RetryPolicy;
  /**
   * A report for an active run, before it is applied: the ending to apply,
   * or null when the report does not end the run (the kind carries on; the
   * run stays as it is). Without it, a run ends as reported.
   */
  complete?(run: RunRow, report: RunReport, source: ReportSource): RunReport | null;
}

/**
 * A kind this server knows the definition of but does not run: actions may
 * name it; triggering one answers 501 not_implemented with `unavailable`,
 * and a run of it that is somehow delivered fails with it.
 */
export interface UnavailableTriggerKind<Trigger extends TriggerDefinition = TriggerDefinition> {
  readonly type: Trigger['type'];
  readonly schema: z.ZodType<Trigger>;
  redact(trigger: Trigger): Trigger;
  readonly unavailable: string;
}

/** What the registry holds: kinds of every trigger and result type (each is only handed triggers its own schema accepted). */
export type AnyTriggerKind = TriggerKind<any, any> | UnavailableTriggerKind<any>;

/** Thrown by a kind's `send` for a failure no later attempt can change: the run fails with `[delivery] <message>`. */
export class Undeliverable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'Undeliverable';
  }
}
