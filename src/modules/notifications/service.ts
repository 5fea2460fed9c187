import type { z } from '@hono/zod-openapi';
import { and, count, desc, eq, isNull, sql } from 'drizzle-orm';
import { requireUserSession } from '../../auth/memberships';
import type { ServiceContext } from '../../context';
import { notifications } from '../../db/schema';
import { notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { isUuid } from '../names';
import {
  DEFAULT_NOTIFICATION_PAGE,
  type Notification,
  type NotificationList,
  type NotificationListQuery,
  type NotificationRead,
  type NotificationReadAll,
} from './schemas';

/**
 * A user's notifications (SPEC Notifications). The row's user is the only
 * access boundary: every query filters by the session's user, so another
 * user's notification is simply not found (404, never 403). Service tokens
 * and bootstrap mode have no user and get 401.
 */

type NotificationRow = typeof notifications.$inferSelect;

const toNotification = (row: NotificationRow): z.infer<typeof Notification> => ({
  id: row.id,
  kind: row.kind,
  title: row.title,
  body: row.body,
  data: row.data as Record<string, unknown>,
  orgId: row.orgId,
  readAt: optionalTimestamp(row.readAt),
  createdAt: timestamp(row.createdAt),
});

/** Newest first (ties, such as rows of one transaction, by id); `unreadCount` ignores `limit`. */
export async function listNotifications(
  ctx: ServiceContext,
  query: NotificationListQuery,
): Promise<z.infer<typeof NotificationList>> {
  const user = requireUserSession(ctx);
  const mine = eq(notifications.userId, user.userId);
  const unread = isNull(notifications.readAt);
  const rows = await ctx.db
    .select()
    .from(notifications)
    .where(query.unread === 'true' ? and(mine, unread) : mine)
    .orderBy(desc(notifications.createdAt), desc(notifications.id))
    .limit(query.limit ?? DEFAULT_NOTIFICATION_PAGE);
  const [counted] = await ctx.db.select({ unread: count() }).from(notifications).where(and(mine, unread));
  return { items: rows.map(toNotification), unreadCount: Number(counted?.unread ?? 0) };
}

/**
 * Marks one notification read. Idempotent: a second call answers the
 * first read's time (one guarded UPDATE keeps it, so two racing calls
 * agree too). An id that is not a UUID cannot name a notification: 404
 * before any query, as for any unknown id.
 */
export async function markRead(ctx: ServiceContext, id: string): Promise<z.infer<typeof NotificationRead>> {
  const user = requireUserSession(ctx);
  if (!isUuid(id)) throw notFound(`notification "${id}"`);
  const [row] = await ctx.db
    .update(notifications)
    .set({ readAt: sql`coalesce(${notifications.readAt}, ${ctx.clock.now().toISOString()}::timestamptz)` })
    .where(and(eq(notifications.id, id), eq(notifications.userId, user.userId)))
    .returning({ id: notifications.id, readAt: notifications.readAt });
  if (!row) throw notFound(`notification "${id}"`);
  return { id: row.id, readAt: timestamp(row.readAt!) };
}

/** Marks every unread notification of the user read; `updated` counts only those that were unread. */
export async function markAllRead(ctx: ServiceContext): Promise<z.infer<typeof NotificationReadAll>> {
  const user = requireUserSession(ctx);
  const marked = await ctx.db
    .update(notifications)
    .set({ readAt: ctx.clock.now() })
    .where(and(eq(notifications.userId, user.userId), isNull(notifications.readAt)))
    .returning({ id: notifications.id });
  return { updated: marked.length };
}
