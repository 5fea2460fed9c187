import type { RouteKey } from './route';

/**
 * Routes that answer without credentials, listed here so the matrix knows
 * they are public on purpose: a route missing from every list fails the
 * matrix. They are registered before the API's credential check, so a
 * header, even a bogus one, changes nothing.
 */
export const PUBLIC_ROUTES: (RouteKey & { success: number; /** The path called, where `path` is a pattern. */ callPath?: string })[] = [
  { method: 'GET', path: '/healthz', success: 200 },
  { method: 'GET', path: '/openapi.json', success: 200 },
  { method: 'GET', path: '/docs', success: 200 },
  // Better Auth's handler: sign-up and sign-in are public by nature; its session routes check the session themselves
  { method: 'GET', path: '/api/auth/*', callPath: '/api/auth/ok', success: 200 },
  { method: 'POST', path: '/api/auth/*', callPath: '/api/auth/sign-out', success: 200 },
];
