import type { SecuredRoute } from './route';

export const RELATIONSHIP_TYPES_ROUTES: SecuredRoute[] = [];
