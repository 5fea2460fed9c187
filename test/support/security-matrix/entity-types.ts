import type { SecuredRoute } from './route';

export const ENTITY_TYPES_ROUTES: SecuredRoute[] = [];
