/**
 * Group commit: writes handed in while one is out wait for it, then go
 * together in the next. A write that finds none out goes at once, so a lone
 * writer waits for nothing; under load, several writes share one statement
 * and one commit. The Node job runner records its delivered attempts
 * through one (src/node/job-runner.ts, src/runs/transitions.ts startRuns):
 * with eight attempts in flight, their answers come close together.
 *
 * A group whose write fails is written again one item at a time, each with
 * its own outcome: one item's failure (or a deadlock the group ran into)
 * fails no other.
 */
export class GroupCommit<I, O> {
  readonly #writeGroup: (items: I[]) => Promise<O[]>;
  readonly #writeOne: (item: I) => Promise<O>;
  readonly #maxGroup: number;
  readonly #groupFailed: (error: unknown, size: number) => void;
  #waiting: { item: I; resolve: (value: O) => void; reject: (error: unknown) => void }[] = [];
  #writing = false;

  /**
   * `writeGroup` gets two items or more and answers each, in their order;
   * `writeOne` gets one. At most `maxGroup` items go in one write.
   * `groupFailed` hears of a group write that failed (its items are then
   * written one at a time).
   */
  constructor(options: {
    writeGroup: (items: I[]) => Promise<O[]>;
    writeOne: (item: I) => Promise<O>;
    groupFailed: (error: unknown, size: number) => void;
    maxGroup?: number;
  }) {
    this.#writeGroup = options.writeGroup;
    this.#writeOne = options.writeOne;
    this.#groupFailed = options.groupFailed;
    this.#maxGroup = options.maxGroup ?? 64;
  }

  /** Resolves with the item's outcome once the write that carried it is committed. */
  write(item: I): Promise<O> {
    const written = new Promise<O>((resolve, reject) => this.#waiting.push({ item, resolve, reject }));
    if (!this.#writing) void this.#writeWaiting();
    return written;
  }

  async #writeWaiting(): Promise<void> {
    this.#writing = true;
    try {
      while (this.#waiting.length > 0) {
        const group = this.#waiting.splice(0, this.#maxGroup);
        if (group.length > 1) {
          const outcomes = await this.#writeGroup(group.map((one) => one.item)).catch((error: unknown) => void this.#groupFailed(error, group.length));
          if (outcomes) {
            group.forEach((one, i) => one.resolve(outcomes[i]!));
            continue;
          }
        }
        // alone, or its group failed: one at a time, one write each (in turn, so a failing database is not hit in a burst)
        for (const one of group) await this.#writeOne(one.item).then(one.resolve, one.reject);
      }
    } finally {
      this.#writing = false;
    }
  }
}
