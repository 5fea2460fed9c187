import { ACTIONS_ROUTES } from './actions';
import { ACTION_RUNS_ROUTES } from './action-runs';
import { BATCH_ROUTES } from './batch';
import { CELLS_ROUTES } from './cells';
import { CHANGES_ROUTES } from './changes';
import { ENTITIES_ROUTES } from './entities';
import { ENTITY_TYPES_ROUTES } from './entity-types';
import { FOUNDATION_ROUTES } from './foundation';
import { GITHUB_ROUTES } from './github';
import { GRAPH_VIEWS_ROUTES } from './graph-views';
import { RELATIONSHIP_TYPES_ROUTES } from './relationship-types';
import { RELATIONSHIPS_ROUTES } from './relationships';
import { routeKey, type SecuredRoute } from './route';
import { SECRETS_ROUTES } from './secrets';

export { asOwner, fresh, matrixOwner, routeKey, type RouteKey, type SecuredRoute } from './route';
export { RUN_CALLBACK_ROUTES, type CallbackRoute } from './action-runs';
export { PUBLIC_ROUTES } from './public';
import { GITHUB_SIGNED_ROUTES as APP_SIGNED_ROUTES } from './github';
import { GITHUB_PROJECT_WEBHOOK_ROUTES } from './github-project-webhook';
export type { SignedRoute } from './github';

/** Routes with a credential of their own from the code host: the App webhook, the install callback, a project's webhook. */
export const GITHUB_SIGNED_ROUTES = [...APP_SIGNED_ROUTES, ...GITHUB_PROJECT_WEBHOOK_ROUTES];

/**
 * Every route of the API that takes a service token, a file per module. With
 * RUN_CALLBACK_ROUTES and PUBLIC_ROUTES it names every route of the app's
 * route table, exactly once (checked by test/node/security-matrix.test.ts).
 */
export const SECURED_ROUTES: (SecuredRoute & { name: string })[] = [
  ...FOUNDATION_ROUTES,
  ...ENTITY_TYPES_ROUTES,
  ...RELATIONSHIP_TYPES_ROUTES,
  ...CELLS_ROUTES,
  ...ENTITIES_ROUTES,
  ...BATCH_ROUTES,
  ...RELATIONSHIPS_ROUTES,
  ...ACTIONS_ROUTES,
  ...ACTION_RUNS_ROUTES,
  ...SECRETS_ROUTES,
  ...CHANGES_ROUTES,
  ...GRAPH_VIEWS_ROUTES,
  ...GITHUB_ROUTES,
  // `name` for test titles (`it.each(SECURED_ROUTES)('$name …')`): the route key
].map((route) => ({ ...route, name: routeKey(route) }));
