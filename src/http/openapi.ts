import type { Context, TypedResponse } from 'hono';
import type { JSONParsed } from 'hono/utils/types';
import { z } from '@hono/zod-openapi';
import type { AppEnv } from '../context';
import { answerText } from './request-envelope';

/** The one error body (SPEC Errors, DECISIONS §7). */
export const ErrorBody = z
  .object({
    error: z.string().openapi({ example: 'organization "acme" not found' }),
    code: z.string().openapi({ example: 'not_found' }),
    details: z
      .array(z.object({ path: z.string(), message: z.string() }))
      .optional()
      .openapi({ description: 'Present on validation_failed: one item per problem.' }),
  })
  .openapi('Error');

const ERROR_DESCRIPTIONS = {
  400: 'Invalid request (validation_failed, invalid_json, or a rule of this endpoint)',
  401: 'No valid credentials (unauthorized)',
  403: 'Not allowed (forbidden, org_suspended)',
  404: 'Not found, or not visible to the caller (not_found)',
  409: 'Conflicts with existing state (already_exists)',
  410: 'The resume point is older than the change log keeps (resync_required)',
  413: 'Request body over 1 MiB (payload_too_large)',
  422: 'The Idempotency-Key was used before with another request (idempotency_key_reused)',
  501: 'Not available on this server yet (not_implemented)',
  502: 'The code host failed or could not be reached; nothing was changed (codehost_unavailable)',
  503: 'At capacity or not configured (stream_limit_reached, codehost_not_configured)',
} as const;

type ErrorStatus = keyof typeof ERROR_DESCRIPTIONS;

/** The error responses of a route, each documented with the shared Error body. */
export function errorResponses<S extends ErrorStatus>(...statuses: S[]) {
  return Object.fromEntries(
    statuses.map((status) => [
      status,
      { description: ERROR_DESCRIPTIONS[status], content: { 'application/json': { schema: ErrorBody } } },
    ]),
  ) as unknown as { [K in S]: { description: string; content: { 'application/json': { schema: typeof ErrorBody } } } };
}

export const jsonBody = <T extends z.ZodType>(schema: T, description?: string) => ({
  required: true,
  description,
  content: { 'application/json': { schema } },
});

export const jsonResponse = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  content: { 'application/json': { schema } },
});

/**
 * A 200 whose body is JSON text already written (by Postgres: the entity GET,
 * src/modules/entities/driver-rows.ts), sent as c.json would send it, typed
 * as the route's JSON response of `T`. Its headers are the content type and
 * the request's own (answerText): a header set on the context with
 * `c.header()` does not reach it.
 */
export function jsonText<T>(c: Context<AppEnv>, text: string): Response & TypedResponse<JSONParsed<T>, 200, 'json'> {
  return answerText(c, text, 200, 'application/json') as unknown as Response & TypedResponse<JSONParsed<T>, 200, 'json'>;
}

/** The first and last instants of the years 1000–9999, in UTC. */
const EARLIEST_INSTANT = Date.parse('1000-01-01T00:00:00.000Z');
const LATEST_INSTANT = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * An instant a client sends (lastSyncedAt, observedAt, updatedSince, since,
 * until, expiresAt): an RFC 3339 date-time with its offset, in UTC within
 * the years 1000–9999. RFC 3339 allows the year 0000, which Postgres refuses
 * (the write failed as a 500); and a timestamp of the years 1–999 is printed
 * by Postgres in a form that JavaScript's Date, and so drizzle, reads as
 * another year (0001 as 2001). Within these years every part agrees, and
 * toISOString() writes the instant back as it was stored.
 */
export const DateTimeInput = z.iso
  .datetime({ offset: true, message: 'must be an RFC 3339 date-time' })
  .refine((value) => {
    const instant = Date.parse(value);
    return instant >= EARLIEST_INSTANT && instant <= LATEST_INSTANT;
  }, 'must be between 1000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z')
  .openapi({ format: 'date-time', example: '2026-11-21T10:20:00.000Z' });

/** RFC 3339 UTC with milliseconds (DECISIONS §1). */
export const Timestamp = z.string().openapi({ format: 'date-time', example: '2026-11-21T10:20:00.000Z' });
export const timestamp = (date: Date): string => date.toISOString();
export const optionalTimestamp = (date: Date | null): string | null => (date ? date.toISOString() : null);

export const BearerSecurity = [{ bearerAuth: [] }];
/** A user session: the cookie (browsers) or the session token as a Bearer value (the CLI). */
export const UserSessionSecurity: Record<string, string[]>[] = [{ sessionCookie: [] }, { sessionBearer: [] }];
/** A service token or a user session. */
export const TokenOrSessionSecurity = [...BearerSecurity, ...UserSessionSecurity];
