import type { z } from '@hono/zod-openapi';
import { and, eq } from 'drizzle-orm';
import { requireUserSession } from '../../auth/memberships';
import type { ServiceContext } from '../../context';
import { userPreferences } from '../../db/schema';
import { ApiError } from '../../http/errors';
import { MAX_PREFERENCE_BYTES, type UserPreference, type UserPreferenceUpdate } from './schemas';

/**
 * Per-user preferences (SPEC User preferences): a JSON object per (user,
 * key). Every query is by the session's user; there is no way to name
 * another user's preferences. Service tokens and bootstrap mode get 401.
 */

type Preference = z.infer<typeof UserPreference>;

const ofUser = (userId: string, key: string) => and(eq(userPreferences.userId, userId), eq(userPreferences.key, key));

export async function getPreference(ctx: ServiceContext, key: string): Promise<Preference> {
  const user = requireUserSession(ctx);
  const [row] = await ctx.db.select({ value: userPreferences.value }).from(userPreferences).where(ofUser(user.userId, key)).limit(1);
  return { value: row ? (row.value as Record<string, unknown>) : null };
}

/**
 * The 64 KB limit is on the value's JSON text (UTF-8 bytes, as
 * JSON.stringify writes it), not on the request body: whitespace and the
 * `{"value": …}` envelope do not count, and the limit means the same
 * whatever the client's formatting. Over it is 400 validation_failed (SPEC
 * lists 400; bodies over 1 MiB are refused earlier with 413).
 */
function assertWithinLimit(value: Record<string, unknown>): void {
  const bytes = new TextEncoder().encode(JSON.stringify(value)).length;
  if (bytes > MAX_PREFERENCE_BYTES) {
    throw new ApiError('validation_failed', `preference value is ${bytes} bytes as JSON; at most ${MAX_PREFERENCE_BYTES} (64 KB)`, [
      { path: 'value', message: `must be at most ${MAX_PREFERENCE_BYTES} bytes as JSON` },
    ]);
  }
}

/** Creates or replaces the value, in one statement (two racing PUTs: the last one wins, neither fails). */
export async function putPreference(ctx: ServiceContext, key: string, input: UserPreferenceUpdate): Promise<Preference> {
  const user = requireUserSession(ctx);
  assertWithinLimit(input.value);
  const now = ctx.clock.now();
  const [row] = await ctx.db
    .insert(userPreferences)
    .values({ userId: user.userId, key, value: input.value, updatedAt: now })
    .onConflictDoUpdate({ target: [userPreferences.userId, userPreferences.key], set: { value: input.value, updatedAt: now } })
    .returning({ value: userPreferences.value });
  return { value: row!.value as Record<string, unknown> };
}

/** Removes the value; removing one that is not set is not an error (the answer is 204 either way). */
export async function deletePreference(ctx: ServiceContext, key: string): Promise<void> {
  const user = requireUserSession(ctx);
  await ctx.db.delete(userPreferences).where(ofUser(user.userId, key));
}
