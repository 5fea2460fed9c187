import type { Context, MiddlewareHandler } from 'hono';
import type { AppEnv } from '../context';
import type { Platform } from '../platform';
import { handleError } from './error-handler';
import { requestLimiter } from './rate-limit';

/** A client's own X-Request-Id is kept when it is this short and made of these characters (as hono's requestId middleware judges it). */
const REQUEST_ID_MAX_LENGTH = 255;
const REQUEST_ID_REFUSED = /[^\w\-=]/;

/**
 * What every request gets, public and unknown routes too, in one layer
 * outside all others:
 *
 * - its id: the client's `X-Request-Id` when it is well-formed, else a new
 *   UUID, in the response and in every log line of the request;
 * - its count against the rate limit (./rate-limit.ts), before anything else
 *   runs, so a refused request costs no database lookup; the standing in
 *   `RateLimit-Policy` and `RateLimit`;
 * - one log line once it is answered: method, path, status, duration.
 *
 * The headers are gathered in a plain object, the request's
 * `responseHeaders`, and given to the response once it is made. A response
 * built with them already in it (answerText) is left as it is: on Node such
 * a response is written from that object directly, where a `Headers` of the
 * context's would be built, merged and read back field by field
 * (bench/http-results.md, "2026-11-28, seventh"). One layer instead of three
 * is also two turns of the middleware chain fewer, on every request.
 */
export const requestEnvelope = (platform: Platform): MiddlewareHandler<AppEnv> => {
  const { logger } = platform;
  const limiter = requestLimiter(platform);
  const answerError = handleError(logger);
  return async (c, next) => {
    const started = Date.now();
    const clientId = c.req.header('x-request-id');
    const requestId =
      clientId && clientId.length <= REQUEST_ID_MAX_LENGTH && !REQUEST_ID_REFUSED.test(clientId) ? clientId : crypto.randomUUID();
    c.set('requestId', requestId);
    const headers: Record<string, string> = { 'X-Request-Id': requestId };
    c.set('responseHeaders', headers);
    let failureKey: string | undefined;
    try {
      if (limiter) {
        const admitted = limiter.admit(c, headers);
        failureKey = admitted instanceof Promise ? await admitted : admitted;
      }
      // the layers below answer their own errors (hono's compose hands them to onError): this catches the limit's
      await next();
    } catch (error) {
      if (!(error instanceof Error)) throw error;
      c.res = await answerError(error, c);
    }
    carryHeaders(c, headers);
    if (failureKey && c.res.status === 401) {
      const counted = limiter!.countFailure(failureKey);
      if (platform.executionContext) c.executionCtx.waitUntil(counted);
      else await counted;
    }
    logger.info('request', { requestId, method: c.req.method, path: c.req.path, status: c.res.status, durationMs: Date.now() - started });
  };
};

/**
 * A response of `text` whose headers are the request's own (X-Request-Id,
 * the rate limit's) and `contentType`, in one plain object: see
 * requestEnvelope. Outside the envelope (a sub-app tested alone) it is a
 * response with the content type only.
 */
export function answerText(c: Context<AppEnv>, text: string, status: number, contentType: string): Response {
  const response = new Response(text, { status, headers: { 'Content-Type': contentType, ...c.get('responseHeaders') } });
  c.set('answeredWithHeaders', response);
  return response;
}

/** Gives the request's headers to its response, unless it was built with them (answerText) and is still the one answering. */
function carryHeaders(c: Context<AppEnv>, headers: Record<string, string>): void {
  const response = c.res;
  if (c.get('answeredWithHeaders') === response) return;
  try {
    for (const name in headers) response.headers.set(name, headers[name]!);
  } catch {
    // the headers of a response from fetch() are immutable: the same response, with headers of its own
    const copy = new Response(response.body, response);
    for (const name in headers) copy.headers.set(name, headers[name]!);
    c.res = copy;
  }
}
