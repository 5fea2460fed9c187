import { ACTIONS_ROUTES } from './actions';
import { ACTION_RUNS_ROUTES } from './action-runs';
import { CELLS_ROUTES } from './cells';
import { CHANGES_ROUTES } from './changes';
import { ENTITIES_ROUTES } from './entities';
import { ENTITY_TYPES_ROUTES } from './entity-types';
import { FOUNDATION_ROUTES } from './foundation';
import { RELATIONSHIP_TYPES_ROUTES } from './relationship-types';
import { RELATIONSHIPS_ROUTES } from './relationships';
import type { SecuredRoute } from './route';
import { SECRETS_ROUTES } from './secrets';

export { asOwner, fresh, matrixOwner, type SecuredRoute } from './route';
export { RUN_CALLBACK_ROUTES, type CallbackRoute } from './action-runs';

/** Every secured route of the API, a file per module. */
export const SECURED_ROUTES: SecuredRoute[] = [
  ...FOUNDATION_ROUTES,
  ...ENTITY_TYPES_ROUTES,
  ...RELATIONSHIP_TYPES_ROUTES,
  ...CELLS_ROUTES,
  ...ENTITIES_ROUTES,
  ...RELATIONSHIPS_ROUTES,
  ...ACTIONS_ROUTES,
  ...ACTION_RUNS_ROUTES,
  ...SECRETS_ROUTES,
  ...CHANGES_ROUTES,
];
