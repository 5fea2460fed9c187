/**
 * The Postgres error under whatever a driver and drizzle wrapped it in
 * (drizzle puts the driver's error in `cause`), so services can tell a
 * constraint's refusal from a real failure. SQLSTATE codes by name.
 */

export const SQLSTATE = {
  uniqueViolation: '23505',
  foreignKeyViolation: '23503',
  restrictViolation: '23001',
} as const;

export interface DatabaseError {
  code: string;
  constraint?: string;
}

export function databaseError(error: unknown): DatabaseError | undefined {
  let current = error;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth++) {
    const candidate = current as { code?: unknown; constraint?: unknown; cause?: unknown };
    if (typeof candidate.code === 'string' && /^[0-9A-Z]{5}$/.test(candidate.code)) {
      return { code: candidate.code, constraint: typeof candidate.constraint === 'string' ? candidate.constraint : undefined };
    }
    current = candidate.cause;
  }
  return undefined;
}

/** The unique constraint an error violated ('' when the driver did not name it), or undefined for any other error. */
export function violatedUniqueConstraint(error: unknown): string | undefined {
  const found = databaseError(error);
  return found?.code === SQLSTATE.uniqueViolation ? (found.constraint ?? '') : undefined;
}

/** A foreign key refused the write or delete: RESTRICT (23001) or NO ACTION (23503). */
export function isForeignKeyRefusal(error: unknown): boolean {
  const code = databaseError(error)?.code;
  return code === SQLSTATE.restrictViolation || code === SQLSTATE.foreignKeyViolation;
}
