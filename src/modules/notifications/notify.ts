import type { Queryable } from '../../db/client';
import { notifications } from '../../db/schema';

/**
 * What a notification says (SPEC Notifications; DECISIONS §8 lists when one
 * is made). Written in the transaction of the change it tells about.
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
    })),
  );
}
