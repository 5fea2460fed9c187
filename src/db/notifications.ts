import type { Queryable } from './client';
import { notifications } from './schema';

/**
 * The one writer of notification rows (SPEC Notifications; DECISIONS §8
 * lists when one is made). It lives beside the schema, not in
 * src/modules/notifications, because the run engine (src/runs/) notifies
 * too and must not import a module (ARCHITECTURE); the module re-exports it
 * as `notify`. Always called with the transaction of the change it tells
 * about, so a rolled-back change leaves no notification behind.
 */
export type NotificationKind =
  | 'org.member_added'
  | 'org.role_changed'
  | 'run.succeeded'
  | 'run.failed'
  | 'github.repositories_changed';

export interface NewNotification {
  userId: string;
  /** The organization it is about: removing the user from it removes the notification. */
  orgId: string | null;
  kind: NotificationKind;
  title: string;
  body?: string;
  data?: Record<string, unknown>;
  /** When it happened, by the app's clock; the database's now() when omitted. */
  createdAt?: Date;
}

export async function notify(tx: Queryable, ...items: NewNotification[]): Promise<void> {
  if (items.length === 0) return;
  await tx.insert(notifications).values(
    items.map((item) => ({
      userId: item.userId,
      orgId: item.orgId,
      kind: item.kind,
      title: item.title,
      body: item.body ?? '',
      data: item.data ?? {},
      ...(item.createdAt ? { createdAt: item.createdAt } : {}),
    })),
  );
}
