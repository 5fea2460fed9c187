import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { errorResponses, jsonBody, jsonResponse, Timestamp, UserSessionSecurity } from '../http/openapi';
import { AUTH_BASE_PATH } from './sessions';

/**
 * The standard routes of Better Auth at /api/auth, in the API's OpenAPI
 * document (Better Auth serves them; these entries only describe them).
 * Its other routes (verification, password reset, SSO) are Better Auth's
 * own: https://www.better-auth.com/docs.
 */
const User = z
  .object({
    id: z.uuid(),
    email: z.email(),
    name: z.string(),
    emailVerified: z.boolean(),
    image: z.string().nullable(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('User');

const SignedIn = z
  .object({
    token: z.string().openapi({ description: 'The session token. The Bearer value is the `set-auth-token` response header (token and signature).' }),
    user: User,
  })
  .openapi('SignedIn');

const Session = z
  .object({
    session: z.object({ id: z.uuid(), userId: z.uuid(), expiresAt: Timestamp, createdAt: Timestamp, updatedAt: Timestamp }),
    user: User,
  })
  .nullable()
  .openapi('Session');

const setAuthToken = {
  'set-auth-token': { description: 'The session as a Bearer value (`Authorization: Bearer <value>`), for clients without cookies', schema: { type: 'string' as const } },
  'set-cookie': { description: 'The session cookie `cellplane.session_token` (HttpOnly)', schema: { type: 'string' as const } },
};

export function registerAuthPaths(app: OpenAPIHono<any>): void {
  const registry = app.openAPIRegistry;
  registry.registerPath({
    method: 'post',
    path: `${AUTH_BASE_PATH}/sign-up/email`,
    tags: ['User sessions'],
    summary: 'Create a user with email and password, and sign in',
    description: 'Sends a verification link to the address. Passwords: at least 10 characters.',
    request: { body: jsonBody(z.object({ email: z.email(), password: z.string().min(10), name: z.string().min(1) })) },
    responses: { 200: { ...jsonResponse(SignedIn, 'Signed up and in'), headers: setAuthToken }, ...errorResponses(400, 413) },
  });
  registry.registerPath({
    method: 'post',
    path: `${AUTH_BASE_PATH}/sign-in/email`,
    tags: ['User sessions'],
    summary: 'Sign in with email and password',
    request: { body: jsonBody(z.object({ email: z.email(), password: z.string(), rememberMe: z.boolean().optional() })) },
    responses: { 200: { ...jsonResponse(SignedIn, 'Signed in'), headers: setAuthToken }, ...errorResponses(400, 401, 413) },
  });
  registry.registerPath({
    method: 'post',
    path: `${AUTH_BASE_PATH}/sign-out`,
    tags: ['User sessions'],
    summary: 'End the current session',
    security: UserSessionSecurity,
    responses: { 200: jsonResponse(z.object({ success: z.boolean() }), 'Signed out') },
  });
  registry.registerPath({
    method: 'get',
    path: `${AUTH_BASE_PATH}/get-session`,
    tags: ['User sessions'],
    summary: 'The current session and its user (null without one)',
    security: UserSessionSecurity,
    responses: { 200: jsonResponse(Session, 'The session, or null') },
  });
}
