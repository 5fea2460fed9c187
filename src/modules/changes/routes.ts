import { createRoute } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { ApiError } from '../../http/errors';
import { TokenOrSessionSecurity, errorResponses, jsonResponse } from '../../http/openapi';
import { EnvParams } from '../entities/schemas';
import { ChangesPage, ChangesQuery, StreamQuery } from './schemas';
import { listChanges, openEntityStream } from './service';

const TAGS = ['Entity changes'];

export const changeRoutes = new ApiRoutes<AppEnv>();

changeRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs/{envName}/entities/stream',
    tags: TAGS,
    summary: "Stream an environment's entity changes (Server-Sent Events)",
    description:
      'Needs data:read. Events `entity.created`, `entity.updated`, `entity.deleted`, each with `id:` the environment\'s change sequence and `data:` `{ type, entity, at }`. Send `Last-Event-ID` (or `?lastEventId=`) to resume: the changes after it are replayed from the log, then the stream goes on live, with no gap and no duplicate. Without it the stream starts at the latest change. A resume point older than the log keeps (72 h) gets an `event: resync` and the stream goes on from the latest change. A `: heartbeat` comment every 15 s. Filters `entityType` and `cell` (direct members); a cell-scoped token sees only its cells. The stream ends (`event: end`) when the token is revoked or expires.',
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, query: StreamQuery },
    responses: {
      200: { description: 'text/event-stream', content: { 'text/event-stream': { schema: { type: 'string' } } } },
      ...errorResponses(400, 401, 403, 404, 503),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    const { lastEventId: fromQuery, ...filters } = c.req.valid('query');
    const header = c.req.header('last-event-id');
    let after: number | null = fromQuery ?? null;
    if (header !== undefined && header.trim() !== '') {
      if (!/^\d+$/.test(header.trim())) {
        throw new ApiError('validation_failed', 'Last-Event-ID must be a change sequence (a non-negative integer)', [
          { path: 'Last-Event-ID', message: 'is not a change sequence' },
        ]);
      }
      after = Number(header.trim());
    }
    // a stream written straight to its socket (the Node host) is never seen by the envelope that gives a response its headers
    const headers = c.get('responseHeaders') ?? {};
    return openEntityStream(c.get('services'), { org: o, project: p, env: envName }, filters, after, { raw: c.env, headers });
  },
);

changeRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/envs/{envName}/changes',
    tags: TAGS,
    summary: "Poll an environment's entity changes (JSON catch-up)",
    description:
      'Needs data:read. The changes after `after`, oldest first, at most `limit` examined (default 100, at most 1000), with the stream\'s filters and scope rules; `next` is the `after` of the next call. A resume point older than the log keeps (72 h) is 410 resync_required: reload the state, then poll from its latest sequence.',
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, query: ChangesQuery },
    responses: {
      200: jsonResponse(ChangesPage, 'A page of changes'),
      ...errorResponses(400, 401, 403, 404, 410),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    return c.json(await listChanges(c.get('services'), { org: o, project: p, env: envName }, c.req.valid('query')), 200);
  },
);
