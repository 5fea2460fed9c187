import type { Handler } from 'hono';
import type { AppEnv } from '../context';
import type { Platform } from '../platform';
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
      return await asApiError(await auth.handler(c.req.raw));
    } finally {
      const released = lease.release();
      if (platform.executionContext) c.executionCtx.waitUntil(released);
      else await released;
    }
  };

async function asApiError(response: Response): Promise<Response> {
  if (response.status < 400 || !(response.headers.get('content-type') ?? '').includes('application/json')) return response;
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

const defaultCode = (status: number): string =>
  status === 401 ? 'unauthorized' : status === 403 ? 'forbidden' : status === 404 ? 'not_found' : status === 429 ? 'rate_limited' : status >= 500 ? 'internal' : 'validation_failed';
