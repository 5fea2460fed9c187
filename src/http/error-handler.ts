import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { AppEnv } from '../context';
import type { Logger } from '../logger';
import { ApiError } from './errors';

/**
 * The one place errors become responses: `{ error, code }` with the status of
 * the code. Anything unexpected is an opaque 500 carrying the request id,
 * logged once; a stack, SQL text or secret never reaches the client.
 */
export const handleError = (logger: Logger) => (err: Error, c: Context<AppEnv>) => {
  const apiError = toApiError(err);
  if (apiError) return c.json(apiError.toBody(), apiError.status);
  if (clientGone(err, c)) {
    // not a fault of the server: nobody is left to answer, and nothing was written
    logger.info('client closed the request before it was read', { requestId: c.get('requestId'), method: c.req.method, path: c.req.path });
    return c.json({ error: 'the client closed the request before it was read', code: 'request_aborted' }, 400);
  }
  const requestId = c.get('requestId');
  logger.error('unhandled error', { requestId, method: c.req.method, path: c.req.path, error: err });
  return c.json({ error: `internal error (request id ${requestId})`, code: 'internal' }, 500);
};

function toApiError(err: Error): ApiError | undefined {
  if (err instanceof ApiError) return err;
  if (err instanceof HTTPException) {
    switch (err.status) {
      case 400:
        return new ApiError('invalid_json', 'request body is not valid JSON');
      case 401:
        return new ApiError('unauthorized', 'authentication required');
      case 404:
        return new ApiError('not_found', 'not found');
      case 413:
        return new ApiError('payload_too_large', 'request body exceeds 1 MiB');
      case 415:
        return new ApiError('unsupported_media_type', 'request bodies must be JSON: send Content-Type: application/json');
    }
  }
  return undefined;
}

/**
 * The client went away while its request was being read: the host aborts the
 * request's signal, and on Node reading the rest of the body fails with the
 * incoming message's own `aborted` (ECONNRESET), whichever comes first.
 */
function clientGone(err: Error, c: Context<AppEnv>): boolean {
  if (c.req.raw.signal?.aborted) return true;
  return (err as { code?: unknown }).code === 'ECONNRESET' && err.message === 'aborted';
}
