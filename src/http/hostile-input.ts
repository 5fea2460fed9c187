import type { MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import type { AppEnv } from '../context';
import { ApiError, type ErrorDetail } from './errors';

/**
 * Input no route could store or mean is refused here, at the edge, before a
 * handler runs or the database is leased (STYLE 13): text carrying NUL (Postgres
 * text and jsonb cannot hold U+0000) or a lone UTF-16 surrogate (not Unicode,
 * so not UTF-8: the driver would mangle it or the server refuse it), numbers
 * that are not finite (`1e999` parses to Infinity, which JSON cannot write
 * back), malformed percent-encoding in the URL, and JSON nested deeper than
 * MAX_JSON_DEPTH. Each is `400 validation_failed` with one detail per place.
 */

/**
 * How deep a JSON body may nest: the body itself is level 1, each object or
 * array inside another one level more. Real definitions (an action's trigger
 * payload template, an entity's properties) use a handful of levels; 64 leaves
 * room for any of them while keeping every recursive consumer further down
 * (zod, JSON.stringify, jsonb) far from its stack limit.
 */
export const MAX_JSON_DEPTH = 64;

/** At most this many details are reported: a 1 MiB body of NULs must not become a 10 MiB answer. */
const MAX_DETAILS = 20;

/** One scan for the common case: text with neither NUL nor any surrogate (every BMP-only string). */
const SUSPECT = /[\u0000\uD800-\uDFFF]/;
const NUL = /\u0000/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `text` cannot be taken as text, or undefined when it can. */
export function hostileText(text: string): string | undefined {
  if (!SUSPECT.test(text)) return undefined;
  if (NUL.test(text)) return 'contains a NUL character (U+0000)';
  if (LONE_SURROGATE.test(text)) return 'contains a lone UTF-16 surrogate (not valid Unicode)';
  return undefined;
}

const UNPRINTABLE = /[\u0000-\u001f]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** A detail path shows a key escaped (never a raw NUL or surrogate) and cut short. */
const printable = (key: string): string => {
  const escaped = key.replace(UNPRINTABLE, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return escaped.length > 80 ? `${escaped.slice(0, 80)}…` : escaped;
};

const join = (path: string, key: string | number): string => (path ? `${path}.${key}` : String(key));

/**
 * Every place in a parsed JSON value that carries hostile text or a non-finite
 * number, or nests deeper than MAX_JSON_DEPTH. The walk keeps its own stack
 * instead of recursing, so a body nested 100,000 deep is reported, not a
 * RangeError; it does not descend past the bound.
 */
export function findHostileJson(root: unknown): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  // depth counts the containers enclosing a value; the root container is level 1
  const stack: { value: unknown; path: string; depth: number }[] = [{ value: root, path: '', depth: 0 }];
  while (stack.length > 0 && details.length < MAX_DETAILS) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === 'string') {
      const reason = hostileText(value);
      if (reason) details.push({ path: path || '(root)', message: reason });
    } else if (typeof value === 'number') {
      if (!Number.isFinite(value)) details.push({ path: path || '(root)', message: 'is not a finite number' });
    } else if (value !== null && typeof value === 'object') {
      if (depth + 1 > MAX_JSON_DEPTH) {
        details.push({ path: path || '(root)', message: `nests deeper than ${MAX_JSON_DEPTH} levels` });
        continue;
      }
      // children are pushed last-first, so they are reported in document order
      if (Array.isArray(value)) {
        for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: join(path, i), depth: depth + 1 });
      } else {
        const keys = Object.keys(value);
        for (const key of keys) {
          const reason = hostileText(key);
          if (reason) details.push({ path: join(path, printable(key)), message: `key ${reason}` });
        }
        for (let i = keys.length - 1; i >= 0; i--) {
          const key = keys[i]!;
          stack.push({ value: (value as Record<string, unknown>)[key], path: join(path, printable(key)), depth: depth + 1 });
        }
      }
    }
  }
  if (details.length > MAX_DETAILS) details.length = MAX_DETAILS;
  return details;
}

/** Throws 400 validation_failed when the parsed body `value` has anything findHostileJson reports. */
export function refuseHostileJson(value: unknown): void {
  const details = findHostileJson(value);
  if (details.length === 0) return;
  throw new ApiError(
    'validation_failed',
    `invalid request body: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`,
    details,
  );
}

/** `decodeURIComponent` that answers undefined for malformed percent-encoding (a cut `%E0%A4%A`, an encoded surrogate `%ED%A0%80`). */
function decodeStrictly(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

function refuseComponent(details: ErrorDetail[], where: string, raw: string): void {
  const decoded = decodeStrictly(raw);
  if (decoded === undefined) {
    details.push({ path: where, message: 'is not valid percent-encoded UTF-8' });
    return;
  }
  const reason = hostileText(decoded);
  if (reason) details.push({ path: where, message: reason });
}

/** The names of the matched route's path segments (`path.o`, `path.id`), `path` for literal ones. */
function segmentNames(c: Parameters<MiddlewareHandler<AppEnv>>[0], count: number): string[] {
  const route = matchedRoutes(c).find((r) => r.method !== 'ALL');
  const pattern = route ? route.path.split('/').slice(1) : [];
  return Array.from({ length: count }, (_, i) => {
    const segment = pattern.length === count ? pattern[i]! : '';
    return segment.startsWith(':') ? `path.${segment.slice(1).replace(/[{?].*$/, '')}` : 'path';
  });
}

/**
 * Refuses a request whose path segments or query keys and values, decoded,
 * are not text a route could take: malformed percent-encoding, NUL, a lone
 * surrogate. Hono decodes leniently (a malformed escape stays as typed), so
 * the check reads the raw URL and decodes each part strictly itself. Not an
 * async function: it refuses by throwing, before it calls next(), and hands
 * next()'s promise on, so a request costs no promise of its own here.
 */
export const refuseHostileUrl = (): MiddlewareHandler<AppEnv> => (c, next) => {
  const url = c.req.url;
  // a request URL is serialized by the URL parser, which percent-encodes every
  // control character and every non-ASCII one: without a `%`, nothing to decode
  if (!url.includes('%')) return next();
  const pathStart = url.indexOf('/', url.indexOf('://') + 3);
  const queryStart = url.indexOf('?', pathStart);
  const hashStart = url.indexOf('#', pathStart);
  const pathEnd = queryStart !== -1 ? queryStart : hashStart !== -1 ? hashStart : url.length;
  const details: ErrorDetail[] = [];
  const segments = url.slice(pathStart + 1, pathEnd).split('/');
  const names = segmentNames(c, segments.length);
  segments.forEach((segment, i) => refuseComponent(details, names[i]!, segment));
  if (queryStart !== -1) {
    const query = url.slice(queryStart + 1, hashStart > queryStart ? hashStart : url.length);
    for (const pair of query.split('&')) {
      if (!pair) continue;
      const eq = pair.indexOf('=');
      const rawKey = (eq === -1 ? pair : pair.slice(0, eq)).replace(/\+/g, ' ');
      const key = decodeStrictly(rawKey);
      const where = `query.${printable(key ?? rawKey)}`;
      refuseComponent(details, where, rawKey);
      if (eq !== -1) refuseComponent(details, where, pair.slice(eq + 1).replace(/\+/g, ' '));
    }
  }
  if (details.length > 0) {
    const shown = details.slice(0, MAX_DETAILS);
    throw new ApiError('validation_failed', `invalid request URL: ${shown.map((d) => `${d.path} ${d.message}`).join('; ')}`, shown);
  }
  return next();
};
