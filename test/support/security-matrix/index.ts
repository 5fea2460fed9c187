import { FOUNDATION_ROUTES } from './foundation';
import type { SecuredRoute } from './route';

export { asOwner, fresh, matrixOwner, type SecuredRoute } from './route';

/** Every secured route of the API; each module adds its file here. */
export const SECURED_ROUTES: SecuredRoute[] = [...FOUNDATION_ROUTES];
