import type { SecuredRoute } from './route';

export const RELATIONSHIPS_ROUTES: SecuredRoute[] = [];
