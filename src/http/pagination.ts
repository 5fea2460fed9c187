import type { Context } from 'hono';
import { ApiError } from './errors';

/**
 * Keyset pagination (DECISIONS §3): the cursor is an opaque, URL-safe
 * encoding of the last row's sort key; the next page starts strictly after
 * it, so its cost does not depend on depth. The body stays a plain array;
 * the next page is announced by `X-Next-Cursor` and `Link: <…>; rel="next"`.
 */

export function encodeCursor(key: readonly (string | number)[]): string {
  const bytes = new TextEncoder().encode(JSON.stringify(key));
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export function decodeCursor(cursor: string, arity: number): (string | number)[] {
  try {
    const binary = atob(cursor.replace(/-/g, '+').replace(/_/g, '/'));
    const key = JSON.parse(new TextDecoder().decode(Uint8Array.from(binary, (ch) => ch.charCodeAt(0))));
    if (Array.isArray(key) && key.length === arity && key.every((part) => ['string', 'number'].includes(typeof part))) {
      return key;
    }
  } catch {
    // fall through
  }
  throw new ApiError('validation_failed', 'cursor is not valid: pass the X-Next-Cursor value unchanged', [
    { path: 'cursor', message: 'is not a cursor this endpoint issued' },
  ]);
}

/** Sets `X-Next-Cursor` and `Link: rel="next"` when there is a next page. */
export function announceNextPage(c: Context, nextCursor: string | null): void {
  if (!nextCursor) return;
  const url = new URL(c.req.url);
  url.searchParams.set('cursor', nextCursor);
  c.header('X-Next-Cursor', nextCursor);
  c.header('Link', `<${url.pathname}${url.search}>; rel="next"`);
}

/** Fetch `limit + 1` rows, then split: the extra row only says whether a next page exists. */
export function splitPage<T>(rows: T[], limit: number, keyOf: (row: T) => (string | number)[]): { page: T[]; next: string | null } {
  if (rows.length <= limit) return { page: rows, next: null };
  const page = rows.slice(0, limit);
  return { page, next: encodeCursor(keyOf(page[page.length - 1]!)) };
}
