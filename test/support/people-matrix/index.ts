import { routeKey } from '../security-matrix/route';
import { ADMIN_PEOPLE_ROUTES } from './admin';
import { GITHUB_PEOPLE_ROUTES } from './github';
import { GRAPH_VIEWS_PEOPLE_ROUTES } from './graph-views';
import { MEMBERS_PEOPLE_ROUTES } from './members';
import { NOTIFICATIONS_PEOPLE_ROUTES } from './notifications';
import { PREFERENCES_PEOPLE_ROUTES } from './preferences';
import { SSO_PEOPLE_ROUTES } from './sso';
import type { PeopleRoute } from './route';

export { freshName, type PeopleRoute, type PeopleWorld } from './route';

/** Every route a user session may call, a file per module. */
export const PEOPLE_ROUTES: (PeopleRoute & { name: string })[] = [...MEMBERS_PEOPLE_ROUTES, ...GRAPH_VIEWS_PEOPLE_ROUTES, ...ADMIN_PEOPLE_ROUTES, ...SSO_PEOPLE_ROUTES, ...NOTIFICATIONS_PEOPLE_ROUTES, ...PREFERENCES_PEOPLE_ROUTES, ...GITHUB_PEOPLE_ROUTES].map((route) => ({
  ...route,
  name: routeKey(route),
}));
