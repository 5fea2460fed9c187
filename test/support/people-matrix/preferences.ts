import type { PeopleRoute } from './route';
import { freshName } from './route';

/**
 * User preferences × users (SPEC User preferences): any signed-in user
 * succeeds on their own keys; without a session, and for a service token, 401.
 */

const path = (key: string) => `/user/preferences/${key}`;
const anyUser = { access: 'any-user', tokens: 401 } as const;

export const PREFERENCES_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'GET',
    path: '/user/preferences/{key}',
    ...anyUser,
    success: 200,
    call: (api, _world, credential) => api.call('GET', path(freshName('matrix.pref')), { token: credential }),
  },
  {
    method: 'PUT',
    path: '/user/preferences/{key}',
    ...anyUser,
    success: 200,
    call: (api, _world, credential) =>
      api.call('PUT', path(freshName('matrix.pref')), { token: credential, body: { value: { matrix: true } } }),
  },
  {
    method: 'DELETE',
    path: '/user/preferences/{key}',
    ...anyUser,
    success: 204,
    call: async (api, _world, credential) => {
      const key = freshName('matrix.pref');
      // set first (when the caller can), so the delete removes something
      await api.call('PUT', path(key), { token: credential, body: { value: { matrix: true } } });
      return api.call('DELETE', path(key), { token: credential });
    },
  },
];
