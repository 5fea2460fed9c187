import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { AppEnv, ServiceContext } from '../context';
import type { Db } from '../db/client';
import type { DatabaseLease, Platform } from '../platform';
import { authenticateRequest, CallerState } from '../auth/caller';
import { ApiError } from './errors';

export const MAX_BODY_BYTES = 1024 * 1024;

export const limitBody = (): MiddlewareHandler<AppEnv> =>
  bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: () => {
      throw new ApiError('payload_too_large', `request body exceeds ${MAX_BODY_BYTES} bytes (1 MiB)`);
    },
  });

const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/**
 * Parses a JSON body once, up front, so a malformed one is `invalid_json`
 * (not a schema error) and a body in another media type is refused clearly.
 * The parsed value is cached by Hono for the route's validator.
 */
export const parseJsonBody = (): MiddlewareHandler<AppEnv> => async (c, next) => {
  if (c.req.method === 'GET' || c.req.method === 'HEAD' || c.req.method === 'OPTIONS' || !c.req.raw.body) {
    return next();
  }
  const mediaType = (c.req.header('content-type') ?? '').split(';')[0]!.trim();
  if (!JSON_MEDIA_TYPE.test(mediaType)) {
    const text = await c.req.text();
    if (text.length === 0) return next();
    throw new ApiError('unsupported_media_type', 'request bodies must be JSON: send Content-Type: application/json');
  }
  try {
    await c.req.json();
  } catch {
    throw new ApiError('invalid_json', 'request body is not valid JSON');
  }
  return next();
};

/**
 * Checks the credentials that need no lookup and builds the request's
 * service context. The database is leased lazily: a request refused on the
 * token's shape or checksum never opens a connection, and the token itself
 * is looked up together with the request's tenancy (src/auth/access.ts).
 */
export const requestContext =
  (
    platform: Platform,
    /** false for routes that check their own credentials (the run callback); their caller stays unresolved. */
    options: { authenticate: boolean } = { authenticate: true },
  ): MiddlewareHandler<AppEnv> =>
  async (c, next) => {
    let lease: DatabaseLease | undefined;
    const db = (): Db => (lease ??= platform.openDatabase()).db;
    try {
      const callerState = options.authenticate
        ? await authenticateRequest({ db, bootstrap: platform.bootstrap }, c.req.header('authorization'))
        : new CallerState(undefined, undefined);
      const services: ServiceContext = {
        get db() {
          return db();
        },
        config: platform.config,
        logger: platform.logger,
        clock: platform.clock,
        get caller() {
          return callerState.current;
        },
        callerState,
        bootstrap: platform.bootstrap,
        namedStatements: platform.namedStatements,
        deliveries: platform.deliveries,
        changes: platform.changes,
        changedEnvironments: new Set(),
        requestId: c.var.requestId,
      };
      c.set('services', services);
      await next();
      for (const envId of services.changedEnvironments) {
        const published = platform.changes.publish(envId).catch((error: unknown) =>
          platform.logger.warn('could not publish entity changes; streams catch up at their next heartbeat', { envId, error }),
        );
        // outside the Worker the hub publishes in-process: nothing to wait for
        if (platform.executionContext) c.executionCtx.waitUntil(published);
      }
    } finally {
      if (lease) {
        const released = lease.release();
        if (platform.executionContext) c.executionCtx.waitUntil(released);
        else await released;
      }
    }
  };
