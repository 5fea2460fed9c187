import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { AppEnv, ServiceContext } from '../context';
import type { Db } from '../db/client';
import type { Config } from '../config';
import type { DatabaseLease, Platform } from '../platform';
import { authenticateRequest } from '../auth/authenticators';
import { CallerState } from '../auth/caller';
import { authFor } from '../auth/sessions';
import type { ChangeRow } from '../stream/feed';
import { ApiError } from './errors';
import { refuseHostileJson } from './hostile-input';

export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * Refuses a body over MAX_BODY_BYTES with 413, and tells the client the
 * connection ends with it (`Connection: close`): the unread rest of the body
 * is still on the wire, and the Node host closes such a socket shortly after
 * answering, so a client that kept it alive would send its next request into
 * a dead connection.
 */
export const limitBody = (): MiddlewareHandler<AppEnv> => {
  const tooLarge = (c: Context<AppEnv>): never => {
    c.header('Connection', 'close');
    throw new ApiError('payload_too_large', `request body exceeds ${MAX_BODY_BYTES} bytes (1 MiB)`);
  };
  const limit = bodyLimit({ maxSize: MAX_BODY_BYTES, onError: tooLarge });
  return (c, next) => {
    // a GET or HEAD has no body in a fetch Request
    if (c.req.method === 'GET' || c.req.method === 'HEAD') return next();
    // a declared length is judged as hono's bodyLimit judges it, but without
    // asking for the body: on Node that would build a full fetch Request (a
    // web stream over the socket and an AbortSignal) and leave the adapter's
    // direct read of the body unusable
    const length = declaredLength(c);
    if (length === undefined) return limit(c, next);
    return length > MAX_BODY_BYTES ? tooLarge(c) : next();
  };
};

/**
 * The body's length as a request that is not chunked declares it
 * (Content-Length, which the HTTP parser holds the body to), or undefined
 * when the body's length is known only by reading it.
 */
function declaredLength(c: Context<AppEnv>): number | undefined {
  const length = c.req.header('content-length');
  if (length === undefined || c.req.header('transfer-encoding') !== undefined || !/^\d{1,15}$/.test(length)) return undefined;
  return Number(length);
}

const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/**
 * Parses a JSON body once, up front, so a malformed one is `invalid_json`
 * (not a schema error) and a body in another media type is refused clearly;
 * the parsed body is then walked for hostile input (./hostile-input.ts).
 *
 * No body means no body, whatever the headers say: generic clients send
 * `Content-Type: application/json` on every request, DELETEs included. A
 * zero-byte body is treated as absent: the request is replaced by one without
 * a body or content type, so the route's own schema decides (an optional
 * body is `{}`, a required one is 400 validation_failed).
 */
export const parseJsonBody = (): MiddlewareHandler<AppEnv> => (c, next) => {
  if (c.req.method === 'GET' || c.req.method === 'HEAD' || c.req.method === 'OPTIONS') return next();
  // a declared length says there is a body (a zero-byte one is read, and replaced below) without building one
  if (declaredLength(c) === undefined && !c.req.raw.body) return next();
  return parseBody(c, next);
};

async function parseBody(c: Context<AppEnv>, next: () => Promise<void>): Promise<void> {
  const text = await c.req.text();
  if (text.length === 0) {
    c.req.raw = withoutBody(c.req.raw);
    return next();
  }
  const mediaType = (c.req.header('content-type') ?? '').split(';')[0]!.trim();
  if (!JSON_MEDIA_TYPE.test(mediaType)) {
    throw new ApiError('unsupported_media_type', 'request bodies must be JSON: send Content-Type: application/json');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'request body is not valid JSON');
  }
  refuseHostileJson(parsed);
  return next();
}

/** The same request with no body and no content headers. */
function withoutBody(request: Request): Request {
  const headers = new Headers(request.headers);
  headers.delete('content-type');
  headers.delete('content-length');
  headers.delete('transfer-encoding');
  return new Request(request.url, { method: request.method, headers, signal: request.signal });
}

/**
 * Checks the credentials that need no lookup (the authenticators of
 * src/auth/authenticators.ts, in order) and builds the request's service
 * context. The database is leased lazily: a request refused on the
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
    const services = new RequestServices(platform, c.get('requestId'));
    try {
      services.callerState = options.authenticate
        ? await authenticateRequest({
            header: (name) => c.req.header(name),
            db: () => services.db,
            bootstrap: platform.bootstrap,
            auth: () => services.auth(),
            authSecret: platform.config.authSecret,
            knownTokenHash: c.get('serviceTokenHash'),
            localOperator: platform.localOperator,
          })
        : new CallerState(undefined, undefined);
      if (services.callerState.user?.via === 'cookie') refuseCrossSiteWrite(c.req.raw, platform.config);
      c.set('services', services);
      await next();
      const publish = (envId: string, committed?: ChangeRow[]) => {
        const published = platform.changes.publish(envId, committed).catch((error: unknown) =>
          platform.logger.warn('could not publish entity changes; streams catch up at their next heartbeat', { envId, error }),
        );
        // outside the Worker the hub publishes in-process: nothing to wait for
        if (platform.executionContext) c.executionCtx.waitUntil(published);
      };
      for (const envId of services.changedEnvironments) publish(envId);
      for (const [envId, committed] of services.committedChanges) if (!services.changedEnvironments.has(envId)) publish(envId, committed);
    } finally {
      const released = services.release();
      if (released) {
        if (platform.executionContext) c.executionCtx.waitUntil(released);
        else await released;
      }
    }
  };

/**
 * A request's ServiceContext: the database leased on first use, the caller
 * read through its state. A class, not an object literal with getters: V8
 * gives each such literal accessor pairs of its own (its getters are new
 * closures every time), allocated in the old generation and pointing at the
 * request's state, so every request's objects outlived the young generation
 * and were promoted, to be collected only by full collections (bench/http-results.md,
 * "2026-11-27"). Its getters live on the prototype: spreading it (`{ ...ctx }`)
 * would drop `db` and `caller`.
 */
class RequestServices implements ServiceContext {
  readonly config: ServiceContext['config'];
  readonly logger: ServiceContext['logger'];
  readonly clock: ServiceContext['clock'];
  readonly bootstrap: ServiceContext['bootstrap'];
  readonly namedStatements: boolean;
  readonly deliveries: ServiceContext['deliveries'];
  readonly changes: ServiceContext['changes'];
  readonly mailer: ServiceContext['mailer'];
  readonly changedEnvironments = new Set<string>();
  readonly committedChanges = new Map<string, ChangeRow[]>();
  readonly plainCallers: ServiceContext['plainCallers'];
  readonly signHs256: ServiceContext['signHs256'];
  /** Set by the middleware once the request is authenticated, before any handler runs. */
  callerState!: CallerState;
  readonly #platform: Platform;
  #lease: DatabaseLease | undefined;

  constructor(
    platform: Platform,
    readonly requestId: string,
  ) {
    this.#platform = platform;
    this.config = platform.config;
    this.logger = platform.logger;
    this.clock = platform.clock;
    this.bootstrap = platform.bootstrap;
    this.namedStatements = platform.namedStatements;
    this.deliveries = platform.deliveries;
    this.changes = platform.changes;
    this.plainCallers = platform.plainCallers;
    this.signHs256 = platform.signHs256;
    this.mailer = platform.mailer;
  }

  get db(): Db {
    return (this.#lease ??= this.#platform.openDatabase()).db;
  }

  get caller(): ServiceContext['caller'] {
    return this.callerState.current;
  }

  auth(): ReturnType<ServiceContext['auth']> {
    return authFor({ db: this.db, config: this.config, logger: this.logger, mailer: this.mailer });
  }

  /** Gives the lease back, if the request opened one. */
  release(): Promise<void> | undefined {
    return this.#lease?.release();
  }
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * CSRF: a browser sends the session cookie with any site's request, so a
 * cookie-authenticated write is accepted only from the API's own origin
 * (the request's, API_BASE_URL's or AUTH_URL's) or one of TRUSTED_ORIGINS.
 * Browsers send `Origin` on every cross-site write; a write without one is
 * refused too. Bearer sessions and service tokens are never sent by a
 * browser on its own, so they are not checked.
 */
export function refuseCrossSiteWrite(request: Request, config: Pick<Config, 'apiBaseUrl' | 'authUrl' | 'trustedOrigins'>): void {
  if (SAFE_METHODS.has(request.method)) return;
  const origin = request.headers.get('origin');
  const allowed = [new URL(request.url).origin, config.apiBaseUrl, config.authUrl, ...config.trustedOrigins]
    .filter((value): value is string => value !== undefined)
    .map((value) => originOf(value));
  if (origin !== null && allowed.includes(originOf(origin))) return;
  throw new ApiError(
    'origin_not_trusted',
    origin === null
      ? 'a cookie-authenticated write needs an Origin header: send it, or use Authorization: Bearer <session token>'
      : `origin ${origin} is not trusted for cookie-authenticated writes: add it to TRUSTED_ORIGINS, or use Authorization: Bearer <session token>`,
  );
}

const originOf = (value: string): string => {
  try {
    return new URL(value).origin;
  } catch {
    return value;
  }
};
