import { userSessionOnly } from '../../auth/memberships';
import { createRoute } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { errorResponses, jsonBody, jsonResponse, UserSessionSecurity } from '../../http/openapi';
import { PreferenceParams, UserPreference, UserPreferenceUpdate } from './schemas';
import { deletePreference, getPreference, putPreference } from './service';

export const preferenceRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['User preferences'];
const PATH = '/user/preferences/{key}';
const WHO =
  'The signed-in user\'s own preferences; without a user session (a service token, bootstrap mode) 401. A key is 1 to 128 letters, digits and `. _ : -`, starting with a letter or digit (400 otherwise).';

preferenceRoutes.openapi(
  createRoute({
    method: 'get',
    path: PATH,
    tags: TAGS,
    summary: 'Get a preference',
    description: `\`value\` is null when the key is not set. ${WHO}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: PreferenceParams },
    responses: {
      200: jsonResponse(UserPreference, 'The value, or null'),
      ...errorResponses(400, 401),
    },
  }),
  async (c) => c.json(await getPreference(c.get('services'), c.req.valid('param').key), 200),
);

preferenceRoutes.openapi(
  createRoute({
    method: 'put',
    path: PATH,
    tags: TAGS,
    summary: 'Set a preference',
    description: `Creates or replaces the value. \`value\` must be a JSON object of at most 64 KB (65,536 bytes as compact JSON, UTF-8): over it, a missing or non-object value, or another field is 400 validation_failed; invalid JSON is 400 invalid_json; a body over 1 MiB 413. ${WHO}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: PreferenceParams, body: jsonBody(UserPreferenceUpdate) },
    responses: {
      200: jsonResponse(UserPreference, 'The stored value'),
      ...errorResponses(400, 401, 413),
    },
  }),
  async (c) => c.json(await putPreference(c.get('services'), c.req.valid('param').key, c.req.valid('json')), 200),
);

preferenceRoutes.openapi(
  createRoute({
    method: 'delete',
    path: PATH,
    tags: TAGS,
    summary: 'Remove a preference',
    description: `204 whether or not it was set. ${WHO}`,
    security: UserSessionSecurity,
    middleware: userSessionOnly,
    request: { params: PreferenceParams },
    responses: {
      204: { description: 'Removed (or was not set); no body' },
      ...errorResponses(400, 401),
    },
  }),
  async (c) => {
    await deletePreference(c.get('services'), c.req.valid('param').key);
    return c.body(null, 204);
  },
);
