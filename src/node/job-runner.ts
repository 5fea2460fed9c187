import { reapTimedOutRuns } from '../runs/completion';
import { pruneChanges } from '../stream/feed';
import { abandon, claimDueJobs, handBackLeases, runDeliveryAttempt, type DeliveryJob, type LeasedJob } from '../runs/delivery';
import type { DeliverySlot } from '../platform';
import type { RunEngine } from '../runs/engine';
import { GroupCommit } from '../runs/group-commit';
import { startRun, startRuns, type Delivered } from '../runs/transitions';

export interface JobRunnerOptions {
  /** How often the job table is polled when nothing woke the runner: the sweep that finds every due job. */
  pollIntervalMs: number;
  /** How often timed-out runs are reaped. */
  reapIntervalMs: number;
  /** Attempts in flight at once. */
  concurrency: number;
  /**
   * Jobs leased beyond the free slots while the slots turn over: a slot that
   * frees starts the next of them at once, with no claim's round trip
   * between one attempt and the next. 0 claims only for free slots.
   */
  claimAhead: number;
  /**
   * How long a job leased ahead may wait for a slot. Past it the lease is
   * handed back unused: the run it read is that old, and another worker may
   * be free. Never more than half the lease's margin over an attempt
   * (leaseMs − attemptTimeoutMs), so an attempt started from ahead ends
   * within its lease as one claimed for a free slot does.
   */
  aheadMaxWaitMs: number;
}

export const DEFAULT_JOB_RUNNER_OPTIONS: JobRunnerOptions = { pollIntervalMs: 1000, reapIntervalMs: 30_000, concurrency: 8, claimAhead: 8, aheadMaxWaitMs: 250 };

/** A job leased ahead of a free slot, with when (performance.now()). */
interface AheadJob {
  leased: LeasedJob;
  heldSince: number;
}

/**
 * The Node host's delivery worker (QUEUE_DRIVER=pg): due jobs are taken from
 * the job table with FOR UPDATE SKIP LOCKED and a lease (src/runs/delivery.ts),
 * so several processes on one database share the work and a killed one's
 * jobs are taken up when its leases run out. A trigger wakes the runner at
 * once (`nudge`); the poll catches everything else: retries coming due, jobs
 * of another process, jobs left by a crash. The reaper runs on its own timer.
 *
 * While the slots turn over (one has just freed, and a backlog is due), a
 * claim also leases up to `claimAhead` jobs beyond the free slots: each
 * slot that frees starts the next of them at once, and the claim that
 * refills them goes out while the slots are busy, once half are taken. A
 * job waits there at most `aheadMaxWaitMs`; past that, or when the runner
 * stops, its lease is handed back unused (src/runs/delivery.ts,
 * handBackLeases). A job waiting ahead is held as one in flight is: a
 * cancel of its run is refused (409 run_not_cancellable). Its attempt sends
 * the run as the claim read it, at most that long before: a run ended
 * meanwhile by its timeout or an entity move still gets the request, as one
 * whose attempt was out then does, and the outcome is not recorded against
 * it (every outcome's write is guarded).
 */
export class JobRunner {
  readonly #engine: RunEngine;
  readonly #options: JobRunnerOptions;
  /** Attempts whose requests are out: one a slot. */
  readonly #inFlight = new Set<Promise<void>>();
  /** Attempts answered whose outcomes are being written; they hold no slot. */
  readonly #recording = new Set<Promise<void>>();
  /** Outcomes written so far: drain() tells by it whether one was written while its claim was out. */
  #recorded = 0;
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  /** Jobs leased ahead of a free slot, oldest first. */
  readonly #ahead: AheadJob[] = [];
  /** Hands back the jobs ahead that waited too long, while any waits. */
  #aheadTimer: ReturnType<typeof setTimeout> | undefined;
  /** Whether a slot freed since the last claim went out: the slots are turning over, so jobs are claimed ahead. */
  #slotFreed = false;
  readonly #aheadMaxWaitMs: number;
  #pollTimer: ReturnType<typeof setInterval> | undefined;
  #reapTimer: ReturnType<typeof setInterval> | undefined;
  #polling: Promise<void> | undefined;
  #pollAgain = false;
  /**
   * Whether a due job may be waiting for a slot: something nudged since the
   * last claim that found nothing, or the last claim found something. A slot
   * that frees up claims only then: a claim after every attempt would be a
   * round trip per delivery that finds nothing while the runner keeps up
   * (the poll still looks every pollIntervalMs). Only an empty claim clears
   * it: a claim can come back short with more jobs due (seen with outcomes
   * being written at the same time), and a backlog left to the poll drains
   * at a few slots a second.
   */
  #mayBeDue = true;
  #running = false;
  /** Slots handed to triggers (reserve) whose jobs are not started yet: they count as taken. */
  #reserved = 0;
  /** Aborts the requests of the attempts in flight when a stop's grace period is over. */
  #abort = new AbortController();
  /** Delivered attempts answered while another's outcome is being written go in one statement after it. */
  readonly #delivered: GroupCommit<Delivered, boolean>;
  readonly #recordDelivered = (delivered: Delivered) => this.#delivered.write(delivered);

  constructor(engine: RunEngine, options: Partial<JobRunnerOptions> = {}) {
    this.#engine = engine;
    this.#options = { ...DEFAULT_JOB_RUNNER_OPTIONS, ...options };
    this.#aheadMaxWaitMs = Math.min(this.#options.aheadMaxWaitMs, (engine.leaseMs - engine.attemptTimeoutMs) / 2);
    const { db, namedStatements } = engine;
    this.#delivered = new GroupCommit({
      writeGroup: async (group) => {
        const started = await startRuns(db, group, namedStatements);
        return group.map((one) => started.has(one.runId));
      },
      writeOne: ({ at, ...attempt }) => startRun(db, attempt, at, {}, namedStatements),
      groupFailed: (error, size) => engine.logger.warn('delivered attempts written one at a time: their group write failed', { size, error }),
    });
  }

  start(): void {
    if (this.#running) return;
    this.#running = true;
    if (this.#abort.signal.aborted) this.#abort = new AbortController();
    this.#pollTimer = setInterval(() => this.nudge(), this.#options.pollIntervalMs);
    this.#reapTimer = setInterval(() => void this.reap(), this.#options.reapIntervalMs);
    this.nudge();
    void this.reap();
  }

  /** Look at the job table now (a trigger just committed a job, or a retry came due). */
  nudge(): void {
    this.#mayBeDue = true;
    if (!this.#running) return;
    void this.#poll();
  }

  /**
   * A free slot for a trigger that writes its job already leased to this
   * runner (DeliveryScheduler.reserve): its first attempt starts from the
   * written run, without a claim, one round trip sooner. Undefined when the
   * runner is stopped or every slot is taken.
   */
  reserve(): DeliverySlot | undefined {
    if (!this.#running || this.#free() <= 0) return undefined;
    this.#reserved++;
    let open = true;
    /** Ends the reservation once; false when it had ended already. */
    const close = () => {
      if (!open) return false;
      open = false;
      this.#reserved--;
      return true;
    };
    return {
      leaseUntil: new Date(this.#engine.clock.now().getTime() + this.#engine.leaseMs),
      // the check phase: after every tick queued now (pg's pool hands a client over in one) and the I/O they write
      meanwhile: (work) => new Promise<void>((resolve) => setImmediate(resolve)).then(work),
      start: (leased) => {
        if (!close()) return;
        if (this.#running) this.#track(leased);
        // stopping: the lease is handed back, and whichever worker polls next makes the attempt
        else void abandon(this.#engine, leased.job).catch((error: unknown) => this.#engine.logger.error('could not hand a lease back', { runId: leased.job.runId, error }));
      },
      release: () => {
        if (close()) this.nudge();
      },
    };
  }

  /**
   * Fails the runs past their timeout, and drops changes past the change
   * log's retention; safe to run anywhere, any number of times.
   */
  async reap(): Promise<string[]> {
    try {
      const reaped = await reapTimedOutRuns(this.#engine.db, this.#engine.clock);
      if (reaped.length > 0) this.#engine.logger.info('reaped timed-out runs', { count: reaped.length, runIds: reaped });
      const pruned = await pruneChanges(this.#engine.db, this.#engine.clock.now());
      if (pruned > 0) this.#engine.logger.info('pruned the change log', { count: pruned });
      return reaped;
    } catch (error) {
      this.#engine.logger.error('reaper failed', { error });
      return [];
    }
  }

  /**
   * Every job due now, delivered, and the attempts they led to that are due
   * by then too, until nothing due is left. A slot that frees up takes the
   * next due job at once, as on the running host. For tests and tools; the
   * running host uses nudge().
   */
  async drain(): Promise<void> {
    for (;;) {
      const recordedBefore = this.#recorded;
      this.#startAhead();
      const free = this.#free();
      this.#take(free > 0 ? await claimDueJobs(this.#engine, free) : []);
      if (this.#inFlight.size === 0 && this.#recording.size === 0) {
        // nothing left, unless an outcome was written while the claim was out: a retry it scheduled,
        // committed after the claim's snapshot, was not seen by it (the running host is woken by #wakeAt)
        if (this.#recorded === recordedBefore) return;
        continue;
      }
      // an attempt was answered (its slot is free) or recorded (the retry it scheduled may be due)
      await Promise.race([...this.#inFlight, ...this.#recording]);
    }
  }

  /**
   * Stops taking jobs and waits for the attempts in flight to be recorded,
   * for up to `graceMs`; then aborts the requests of those still waiting on
   * their receivers. An aborted attempt is not recorded and its job's lease
   * is handed back (src/runs/delivery.ts, abandon): whichever worker polls
   * next, this host after a restart or another on the same database, makes
   * the same attempt again. Resolves with how many attempts were aborted.
   */
  async stop(graceMs = Number.POSITIVE_INFINITY): Promise<number> {
    this.#running = false;
    clearInterval(this.#pollTimer);
    clearInterval(this.#reapTimer);
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    await this.#polling;
    clearTimeout(this.#aheadTimer);
    this.#aheadTimer = undefined;
    // the jobs leased ahead are not started: whichever worker polls next takes them
    await this.#handBack(this.#ahead.splice(0).map((ahead) => ahead.leased.job));
    const settled = Promise.all([...this.#inFlight, ...this.#recording]).then(() => true);
    if (!Number.isFinite(graceMs)) {
      await settled;
      return 0;
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const graceOver = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), graceMs)));
    const inTime = await Promise.race([settled, graceOver]);
    clearTimeout(timer);
    if (inTime) return 0;
    const aborted = this.#inFlight.size;
    this.#abort.abort();
    await Promise.all([...this.#inFlight, ...this.#recording]);
    return aborted;
  }

  #poll(): Promise<void> {
    if (this.#polling) {
      this.#pollAgain = true;
      return this.#polling;
    }
    // `.finally` always runs on a later microtask, after the assignment below:
    // a poll that finds every slot busy ends before its first await, and had it
    // cleared `#polling` inside its own body, the assignment would then have
    // stored the finished promise for good, and every later nudge returned at once
    const polling = this.#claimWhileFree().finally(() => {
      if (this.#polling !== polling) return;
      this.#polling = undefined;
      // a nudge that came after the loop's last look would otherwise wait for the next poll tick
      if (this.#pollAgain) this.nudge();
    });
    this.#polling = polling;
    return polling;
  }

  /**
   * Claims due jobs into the free slots until none is free or nothing more
   * is due; while the slots turn over, also the jobs ahead of them, once
   * half of those are taken.
   */
  async #claimWhileFree(): Promise<void> {
    try {
      do {
        this.#pollAgain = false;
        this.#startAhead();
        const free = this.#free();
        const { claimAhead } = this.#options;
        const turningOver = free > 0 || this.#slotFreed;
        const room = turningOver && this.#ahead.length <= claimAhead / 2 ? claimAhead - this.#ahead.length : 0;
        // #mayBeDue stays set: a slot freeing up claims then (#track)
        if (free + room <= 0) return;
        // a nudge while the claim is out sets it again
        this.#mayBeDue = false;
        this.#slotFreed = false;
        const jobs = await claimDueJobs(this.#engine, free + room);
        this.#take(jobs);
        if (jobs.length > 0) this.#mayBeDue = true;
        if (jobs.length === free + room) this.#pollAgain = true;
      } while (this.#pollAgain && this.#running);
    } catch (error) {
      this.#engine.logger.error('delivery poll failed', { error });
    }
  }

  /**
   * Runs a leased job's attempt in a slot. The slot is free again once the
   * request is answered: the next attempt's claim and request go out while
   * this one's outcome is written (stop and drain wait for both). A
   * delivered outcome goes through #delivered: answered while another is
   * being written, it waits and goes in one statement with the others.
   */
  #track(leased: LeasedJob): void {
    const { job } = leased;
    let answered!: () => void;
    const sent = new Promise<void>((resolve) => (answered = resolve));
    const attempt = runDeliveryAttempt(this.#engine, leased, { signal: this.#abort.signal, onSent: answered, recordDelivered: this.#recordDelivered }).then(
      (result) => {
        if (result.kind === 'retry') this.#wakeAt(result.runAt);
      },
      (error) => {
        // the lease runs out and the job is taken up again
        this.#engine.logger.error('delivery attempt failed to run', { runId: job.runId, attempt: job.attempt, error });
      },
    );
    const recorded = attempt.finally(() => {
      this.#recorded++;
      this.#recording.delete(recorded);
    });
    this.#recording.add(recorded);
    const tracked = Promise.race([sent, attempt]).finally(() => {
      this.#inFlight.delete(tracked);
      if (!this.#running) return;
      // a slot is free: it takes the next job leased ahead, or one that may be waiting
      this.#slotFreed = true;
      this.#startAhead();
      if (this.#mayBeDue) void this.#poll();
    });
    this.#inFlight.add(tracked);
  }

  /** Slots neither in flight nor reserved. */
  #free(): number {
    return this.#options.concurrency - this.#inFlight.size - this.#reserved;
  }

  /** A claim's jobs: into the slots free now (a trigger may have reserved one while the claim was out), the rest ahead. */
  #take(jobs: readonly LeasedJob[]): void {
    let free = this.#free();
    const heldSince = performance.now();
    for (const leased of jobs) {
      if (free-- > 0) this.#track(leased);
      else this.#ahead.push({ leased, heldSince });
    }
    if (this.#ahead.length > 0) this.#watchAhead();
  }

  /** The jobs ahead into the free slots, oldest first; one that waited too long is handed back instead. */
  #startAhead(): void {
    const stale: DeliveryJob[] = [];
    while (this.#ahead.length > 0 && this.#free() > 0) {
      const next = this.#ahead.shift()!;
      if (this.#waitedTooLong(next)) stale.push(next.leased.job);
      else this.#track(next.leased);
    }
    void this.#handBack(stale);
  }

  #waitedTooLong(ahead: AheadJob): boolean {
    return performance.now() - ahead.heldSince > this.#aheadMaxWaitMs;
  }

  /** While jobs wait ahead, a timer hands back those that waited too long (every slot stayed busy), as the oldest comes due. */
  #watchAhead(): void {
    if (this.#aheadTimer !== undefined || this.#ahead.length === 0) return;
    const dueIn = this.#aheadMaxWaitMs - (performance.now() - this.#ahead[0]!.heldSince);
    this.#aheadTimer = setTimeout(() => {
      this.#aheadTimer = undefined;
      const stale: DeliveryJob[] = [];
      while (this.#ahead.length > 0 && this.#waitedTooLong(this.#ahead[0]!)) stale.push(this.#ahead.shift()!.leased.job);
      void this.#handBack(stale);
      this.#watchAhead();
    }, Math.max(0, dueIn) + 1);
    this.#aheadTimer.unref?.();
  }

  /**
   * Leases handed back unused, then the runner woken, as those jobs are due
   * again (a stopped runner stays asleep); a failure is logged, and the
   * leases run out as a dead worker's do.
   */
  async #handBack(jobs: DeliveryJob[]): Promise<void> {
    if (jobs.length === 0) return;
    try {
      await handBackLeases(this.#engine.db, jobs);
      this.nudge();
    } catch (error) {
      this.#engine.logger.error('could not hand leases back; they run out instead', { count: jobs.length, error });
    }
  }

  #wakeAt(runAt: Date): void {
    if (!this.#running) return;
    const delay = Math.max(0, runAt.getTime() - this.#engine.clock.now().getTime());
    // the poll catches anything further out
    if (delay >= this.#options.pollIntervalMs) return;
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.nudge();
    }, delay);
    this.#timers.add(timer);
  }
}
