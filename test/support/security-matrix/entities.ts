import type { SecuredRoute } from './route';

export const ENTITIES_ROUTES: SecuredRoute[] = [];
