import type { SecuredRoute } from './route';

export const SECRETS_ROUTES: SecuredRoute[] = [];
