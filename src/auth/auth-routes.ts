import type { Handler } from 'hono';
import type { AppEnv } from '../context';
import type { Platform } from '../platform';
import { ApiError } from '../http/errors';
import { refuseHostileJson } from '../http/hostile-input';
import { authFor } from './sessions';

/**
 * `/api/auth/*`: Better Auth's handler on a database leased for the
 * request. Its error bodies (`{ code: "INVALID_EMAIL_OR_PASSWORD", message }`)
 * are rewritten to the API's own shape, `{ error, code }` with a snake_case
 * code (DECISIONS §7); everything else passes through untouched.
 */
export const authHandler =
  (platform: Platform): Handler<AppEnv> =>
  async (c) => {
    const lease = platform.openDatabase();
    try {
      const auth = authFor({ db: lease.db, config: platform.config, logger: platform.logger, mailer: platform.mailer });
      await refuseHostileAuthBody(c.req.raw);
      const response = await auth.handler(withoutStrayFetchMetadata(c.req.raw));
      const answer = response.status >= 400 ? await asApiError(response) : await withoutSessionTokens(c.req.path, response);
      // the request's own headers (X-Request-Id, the rate limit's) are added by src/http/request-envelope.ts
      return answer;
    } finally {
      const released = lease.release();
      if (platform.executionContext) c.executionCtx.waitUntil(released);
      else await released;
    }
  };

/**
 * The edge check every other route's body gets (src/http/hostile-input.ts):
 * NUL characters, lone surrogates, JSON nested deeper than 64 levels. Better
 * Auth would store a lone surrogate as U+FFFD and meet a NUL at the database
 * (an error logged, 422 "failed to create user"); here both are a clear 400
 * before Better Auth reads anything. Read from a clone: Better Auth reads
 * the body itself.
 */
async function refuseHostileAuthBody(request: Request): Promise<void> {
  if (!request.body || !/json/i.test(request.headers.get('content-type') ?? '')) return;
  const text = await request.clone().text();
  if (text.length === 0) return;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'request body is not valid JSON');
  }
  refuseHostileJson(parsed);
}

/**
 * Better Auth treats any Fetch Metadata header as a browser's and then
 * demands an Origin. Node's and Deno's fetch send `Sec-Fetch-Mode: cors`
 * alone, without an Origin, so a script or the CLI signing in with plain
 * fetch was refused (403 missing_or_null_origin). A browser always sends
 * `Sec-Fetch-Site` with the others; a request without it is not a
 * browser's, and its stray Fetch Metadata headers are dropped before Better
 * Auth reads them. Browser requests (and any request with a cookie) are
 * checked as before.
 */
function withoutStrayFetchMetadata(request: Request): Request {
  const headers = request.headers;
  if (headers.has('sec-fetch-site') || headers.has('cookie')) return request;
  if (!headers.has('sec-fetch-mode') && !headers.has('sec-fetch-dest')) return request;
  const stripped = new Headers(headers);
  stripped.delete('sec-fetch-mode');
  stripped.delete('sec-fetch-dest');
  stripped.delete('sec-fetch-user');
  return new Request(request, { headers: stripped });
}

const isJson = (response: Response) => (response.headers.get('content-type') ?? '').includes('application/json');

/** Where the session token is handed out on purpose: once, to whoever just signed in (the CLI keeps it). */
const HANDS_OUT_TOKEN = /\/(sign-in|sign-up)\//;

/**
 * Better Auth echoes session tokens in session bodies (get-session,
 * list-sessions). The cookie is HttpOnly so that a script in a page cannot
 * read the token; echoing it would undo that. Every `token` of a session
 * object (one with `userId` and `expiresAt`) is removed, except where a
 * sign-in hands its own token out.
 */
async function withoutSessionTokens(path: string, response: Response): Promise<Response> {
  if (!isJson(response) || HANDS_OUT_TOKEN.test(path)) return response;
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return new Response(text, response);
  }
  const headers = new Headers(response.headers);
  headers.delete('content-length');
  return new Response(JSON.stringify(redactSessions(body)), { status: response.status, headers });
}

function redactSessions(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactSessions);
  if (value === null || typeof value !== 'object') return value;
  const entries = Object.entries(value as Record<string, unknown>);
  const isSession = 'userId' in value && 'expiresAt' in value;
  return Object.fromEntries(entries.filter(([key]) => !(isSession && key === 'token')).map(([key, item]) => [key, redactSessions(item)]));
}

async function asApiError(response: Response): Promise<Response> {
  if (!isJson(response)) return bodilessAsApiError(response);
  const text = await response.text();
  let body: { code?: unknown; message?: unknown; error?: unknown } = {};
  try {
    body = JSON.parse(text) ?? {};
  } catch {
    // not JSON after all: a plain message
  }
  const message = typeof body.message === 'string' ? body.message : typeof body.error === 'string' ? body.error : response.statusText || 'request refused';
  const code = typeof body.code === 'string' ? body.code.toLowerCase() : defaultCode(response.status);
  const headers = new Headers(response.headers);
  headers.delete('content-length');
  return new Response(JSON.stringify({ error: message, code }), { status: response.status, headers });
}

/**
 * An error Better Auth answers without a body — its router's 404 for a path
 * no endpoint serves, e.g. the SSO endpoints in `oss` mode (SPEC: 404) —
 * gets the API's error body too. A non-JSON error with a body passes as is.
 */
async function bodilessAsApiError(response: Response): Promise<Response> {
  const text = response.body ? await response.text() : '';
  if (text.length > 0) return new Response(text, response);
  const headers = new Headers(response.headers);
  headers.set('content-type', 'application/json');
  headers.delete('content-length');
  const error = response.status === 404 ? 'no such auth endpoint' : response.statusText || 'request refused';
  return new Response(JSON.stringify({ error, code: defaultCode(response.status) }), { status: response.status, headers });
}

const defaultCode = (status: number): string =>
  status === 401 ? 'unauthorized' : status === 403 ? 'forbidden' : status === 404 ? 'not_found' : status === 429 ? 'rate_limited' : status >= 500 ? 'internal' : 'validation_failed';
