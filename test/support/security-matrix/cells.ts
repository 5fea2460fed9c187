import type { SecuredRoute } from './route';

export const CELLS_ROUTES: SecuredRoute[] = [];
