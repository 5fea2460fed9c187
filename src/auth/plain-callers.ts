import { eq, sql } from 'drizzle-orm';
import type { Caller, ServiceContext } from '../context';
import { accessEpoch } from '../db/schema';
import { plainCaller, type EnvRef, type PlainAccessRow } from './access';
import type { Permission } from './permissions';

/**
 * Plain answers of the token check (plainEnvironmentAccess in ./access.ts),
 * remembered per database with the access epoch they were read at.
 *
 * The epoch (`access_epoch`, one row) moves in the same transaction as any
 * change that could alter such an answer: triggers on `service_tokens`,
 * `orgs`, `projects` and `environments` (migrations/0009_access_epoch.sql).
 * A statement that reads the epoch and finds the remembered value therefore
 * sees the token, organization, project and environment exactly as when the
 * answer was read, in its own snapshot: a revocation, a suspension, a
 * deleted environment is seen by the very next statement that starts after
 * it commits, in this process or any other, as when the four tables were
 * joined on every request. Only the token's expiry passes with time; it is
 * judged against the request's clock here, as the statement judged it.
 *
 * Only a hint: a request that finds no entry, or whose statement finds the
 * epoch moved, checks the token in full (and remembers the new answer).
 */
export class PlainCallers {
  readonly #entries = new Map<string, RememberedCaller>();

  constructor(private readonly capacity = 10_000) {}

  /** The answer remembered for this token, path and permission, unless the token has expired since. */
  recall(key: string, now: Date): RememberedCaller | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    const expiresAt = entry.row.tokenExpiresAt;
    if (expiresAt !== null && expiresAt.getTime() <= now.getTime()) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry;
  }

  remember(key: string, entry: RememberedCaller): void {
    this.#entries.delete(key);
    // the oldest entry makes room: the map keeps insertion order
    if (this.#entries.size >= this.capacity) this.#entries.delete(this.#entries.keys().next().value!);
    this.#entries.set(key, entry);
  }

  forget(key: string): void {
    this.#entries.delete(key);
  }

  get size(): number {
    return this.#entries.size;
  }
}

export interface RememberedCaller {
  row: PlainAccessRow;
  /** The caller `row` settles, built once: a Caller is never changed once built. */
  caller: Caller;
  /** `access_epoch.value` in the snapshot that read `row`, as text (drivers differ on bigint). */
  epoch: string;
}

/**
 * One entry per token hash, path as written (ids or slugs) and permission.
 * The path's parts may hold any character, so the first two are prefixed by
 * their length and the last runs to the end: no two different keys' parts
 * read the same (the hash is hex and the permission has no space).
 */
export const plainCallerKey = (tokenHash: string, ref: EnvRef, permission: Permission): string =>
  `${permission} ${tokenHash} ${ref.org.length} ${ref.org}${ref.project.length} ${ref.project}${ref.env}`;

/** The epoch's value as text (drivers differ on bigint), for a statement that reads `access_epoch` where accessEpochRow(). */
export const accessEpochValue = () => sql<string>`${accessEpoch.value}::text`;
/** The epoch's one row. */
export const accessEpochRow = () => eq(accessEpoch.id, 1);

/** The access epoch as text, as a subquery: selected beside a full check, it is read in the same snapshot. */
export const currentAccessEpoch = () => sql<string | null>`(select ${accessEpochValue()} from ${accessEpoch} where ${accessEpochRow()})`;

/**
 * Settles the caller a full check found (`row`, read with `epoch`) and
 * remembers it for `key`; an epoch of null (no epoch row) is not remembered.
 */
export function settleAndRemember(ctx: ServiceContext, key: string, row: PlainAccessRow, epoch: string | null, ref: EnvRef, now: Date): void {
  const caller = plainCaller(row, ref, now);
  if (epoch !== null) ctx.plainCallers?.remember(key, { row, caller, epoch });
  ctx.callerState.settle(caller);
}
