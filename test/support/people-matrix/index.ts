import { routeKey } from '../security-matrix/route';
import type { PeopleRoute } from './route';

export { freshName, type PeopleRoute, type PeopleWorld } from './route';

/** Every route a user session may call, a file per module. */
export const PEOPLE_ROUTES: (PeopleRoute & { name: string })[] = [].map((route: PeopleRoute) => ({ ...route, name: routeKey(route) }));
