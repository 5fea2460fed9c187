import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';

/** DECISIONS §7: notifications `limit` default 50, max 200. */
export const DEFAULT_NOTIFICATION_PAGE = 50;
export const MAX_NOTIFICATION_PAGE = 200;

export const Notification = z
  .object({
    id: z.uuid(),
    kind: z.string().openapi({
      description: 'What happened: org.member_added, org.role_changed, run.succeeded, run.failed, github.repositories_changed',
      example: 'run.succeeded',
    }),
    title: z.string().openapi({ example: '"deploy" succeeded on "web-1"' }),
    body: z.string().openapi({ description: 'More detail; may be empty', example: 'The run finished in platform/default.' }),
    data: z.record(z.string(), z.unknown()).openapi({
      description: 'Machine-readable details of the kind, e.g. for run.*: runId, actionName, entityName, envName, projectSlug',
      example: { runId: '0f8fad5b-d9cb-469f-a165-70867728950e', actionName: 'deploy', entityName: 'web-1', envName: 'default', projectSlug: 'platform' },
    }),
    orgId: z.uuid().nullable().openapi({ description: 'The organization it is about, when there is one' }),
    readAt: Timestamp.nullable().openapi({ description: 'When it was first marked read; null while unread' }),
    createdAt: Timestamp,
  })
  .openapi('Notification');

export const NotificationList = z
  .object({
    items: z.array(Notification).openapi({ description: 'Newest first, at most `limit`' }),
    unreadCount: z.number().int().openapi({ description: "All of the user's unread notifications, whatever `limit` and `unread` say" }),
  })
  .openapi('NotificationList');

export const NotificationRead = z
  .object({
    id: z.uuid(),
    readAt: Timestamp.openapi({ description: 'When it was first marked read: marking it again keeps this time' }),
  })
  .openapi('NotificationRead');

export const NotificationReadAll = z
  .object({ updated: z.number().int().openapi({ description: 'How many were unread and are now read' }) })
  .openapi('NotificationReadAll');

export const NotificationListQuery = z.object({
  unread: z.enum(['true', 'false']).optional().openapi({ description: '`true`: unread notifications only' }),
  limit: z
    .string()
    .regex(/^[0-9]+$/, { message: `must be an integer from 1 to ${MAX_NOTIFICATION_PAGE}` })
    .transform(Number)
    .pipe(z.number().int().min(1).max(MAX_NOTIFICATION_PAGE))
    .optional()
    .openapi({
      type: 'integer',
      minimum: 1,
      maximum: MAX_NOTIFICATION_PAGE,
      default: DEFAULT_NOTIFICATION_PAGE,
      description: `How many to return: 1 to ${MAX_NOTIFICATION_PAGE}, default ${DEFAULT_NOTIFICATION_PAGE}`,
      example: DEFAULT_NOTIFICATION_PAGE,
    }),
});
export type NotificationListQuery = z.infer<typeof NotificationListQuery>;

export const NotificationParams = z.object({
  id: z.string().min(1).openapi({ description: 'Notification id (a UUID; anything else is 404)' }),
});
