import type { SecuredRoute } from './route';

export const ACTIONS_ROUTES: SecuredRoute[] = [];
