import { notifications } from '../../../src/db/schema';
import type { TestApi } from '../node-app';
import type { PeopleRoute, PeopleWorld } from './route';

/**
 * Notifications × users (SPEC Notifications): any signed-in user succeeds on
 * their own notifications; without a session, and for a service token, 401.
 */

/**
 * The user a credential signs in as: one of the world's users, else whoever
 * GET /api/auth/get-session says; undefined for no credential or a token.
 */
async function userOf(api: TestApi, world: PeopleWorld, credential: string | undefined): Promise<string | undefined> {
  if (credential === undefined) return undefined;
  const known = [world.owner, world.admin, world.member, world.outsider, world.superAdmin].find((user) => user.token === credential);
  if (known) return known.id;
  if (credential.startsWith('cpl_')) return undefined;
  const session = await api.call('GET', '/api/auth/get-session', { token: credential });
  return session.status === 200 ? (session.body?.user?.id as string | undefined) : undefined;
}

/** A fresh unread notification of the caller (of the world's owner when the caller is no user, so the id exists). */
async function notificationFor(api: TestApi, world: PeopleWorld, credential: string | undefined): Promise<string> {
  const userId = (await userOf(api, world, credential)) ?? world.owner.id;
  const [row] = await api.db
    .insert(notifications)
    .values({ userId, orgId: null, kind: 'org.member_added', title: 'people matrix' })
    .returning({ id: notifications.id });
  return row!.id;
}

const anyUser = { access: 'any-user', tokens: 401 } as const;

export const NOTIFICATIONS_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'GET',
    path: '/notifications',
    ...anyUser,
    success: 200,
    call: (api, _world, credential) => api.call('GET', '/notifications', { token: credential }),
  },
  {
    method: 'POST',
    path: '/notifications/{id}/read',
    ...anyUser,
    success: 200,
    call: async (api, world, credential) => {
      const id = await notificationFor(api, world, credential);
      return api.call('POST', `/notifications/${id}/read`, { token: credential });
    },
  },
  {
    method: 'POST',
    path: '/notifications/read-all',
    ...anyUser,
    success: 200,
    call: (api, _world, credential) => api.call('POST', '/notifications/read-all', { token: credential }),
  },
];
