import { index, integer, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * Request counts of the Node host's rate limiter (src/node/rate-limit-store.ts)
 * when several instances serve one Postgres database: one row per key and
 * window, the sum of the deltas every instance has pushed. Rows of ended
 * windows are deleted by the instances' sync. `key` never holds a credential
 * (src/http/rate-limit.ts says what it holds).
 */
export const rateLimitCounters = pgTable(
  'rate_limit_counters',
  {
    key: text('key').notNull(),
    windowStart: timestamp('window_start', { withTimezone: true, mode: 'date' }).notNull(),
    count: integer('count').notNull(),
  },
  (t) => [primaryKey({ columns: [t.key, t.windowStart] }), index('rate_limit_counters_window_start_idx').on(t.windowStart)],
);
