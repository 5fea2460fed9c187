import { userSessionOnly } from '../../auth/memberships';
import { createRoute } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { errorResponses, jsonResponse, UserSessionSecurity } from '../../http/openapi';
import { NotificationList, NotificationListQuery, NotificationParams, NotificationRead, NotificationReadAll } from './schemas';
import { listNotifications, markAllRead, markRead } from './service';

export const notificationRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Notifications'];
const WHO = "The signed-in user's own notifications only; without a user session (a service token, bootstrap mode) 401.";

notificationRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/notifications',
    tags: TAGS,
    summary: "List the user's notifications",
    description: `Newest first. \`unread=true\` lists unread ones only; \`limit\` 1 to 200, default 50 (anything else is 400). \`unreadCount\` counts every unread notification of the user, whatever the limit. ${WHO}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { query: NotificationListQuery },
    responses: {
      200: jsonResponse(NotificationList, 'Notifications and the unread count'),
      ...errorResponses(400, 401),
    },
  }),
  async (c) => c.json(await listNotifications(c.get('services'), c.req.valid('query')), 200),
);

notificationRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/notifications/read-all',
    tags: TAGS,
    summary: "Mark all the user's notifications read",
    description: `\`updated\` is how many were unread. ${WHO}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    responses: {
      200: jsonResponse(NotificationReadAll, 'How many were marked read'),
      ...errorResponses(401),
    },
  }),
  async (c) => c.json(await markAllRead(c.get('services')), 200),
);

notificationRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/notifications/{id}/read',
    tags: TAGS,
    summary: 'Mark a notification read',
    description: `Idempotent: marking it again answers the time it was first read. Another user's notification, an unknown id or one that is not a UUID is 404. ${WHO}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: NotificationParams },
    responses: {
      200: jsonResponse(NotificationRead, 'The notification, read'),
      ...errorResponses(401, 404),
    },
  }),
  async (c) => c.json(await markRead(c.get('services'), c.req.valid('param').id), 200),
);
