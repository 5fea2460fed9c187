import type { Context } from 'hono';
import ipaddr from 'ipaddr.js';
import { bearerCredential } from '../auth/caller';
import { hashServiceToken, isWellFormedServiceToken, TOKEN_PREFIX } from '../auth/service-token';
import { sessionCookieToken } from '../auth/session-cookie';
import type { AppEnv } from '../context';
import type { Platform, RateLimits, RateLimitStanding } from '../platform';
import { ApiError } from './errors';

/**
 * Rate limits (DECISIONS §7 and §8; docs/decisions.md, Rate limits):
 * RATE_LIMIT_PER_MINUTE requests per key in a fixed window of 60 s, counted
 * before anything else of the request runs, so a refused request costs no
 * database lookup. Every response carries the policy and the key's standing
 * in the syntax of draft-ietf-httpapi-ratelimit-headers-11 (May 2026):
 *
 *   RateLimit-Policy: "default";q=600;w=60
 *   RateLimit: "default";r=599;t=42
 *
 * and a refusal is `429 rate_limited` with `Retry-After` = `t` (the end of the
 * window: the draft's §6 has Retry-After never point earlier than that).
 */

export const RATE_LIMIT_WINDOW_MS = 60_000;
const POLICY = 'default';

/**
 * The window of `key` that holds `nowMs`. Windows are fixed, but each key's
 * start is offset by a hash of the key, so throttled clients do not all come
 * back at the same second (the draft's §8.5). Every host and instance
 * computes the same window for a key from its clock alone.
 */
export function rateLimitWindow(key: string, nowMs: number): { start: number; end: number } {
  const offset = fnv1a(key) % RATE_LIMIT_WINDOW_MS;
  const start = Math.floor((nowMs - offset) / RATE_LIMIT_WINDOW_MS) * RATE_LIMIT_WINDOW_MS + offset;
  return { start, end: start + RATE_LIMIT_WINDOW_MS };
}

function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/**
 * The part of a client address a budget belongs to: an IPv4 address, or the
 * /64 of an IPv6 one (a single host is routinely handed a whole /64, so one
 * address per budget would be no limit at all). `unknown` when the host
 * cannot tell (no socket: an in-process request; no CF-Connecting-IP).
 */
export function addressPartition(address: string | undefined): string {
  if (!address) return 'unknown';
  let partition = partitions.get(address);
  if (partition === undefined) {
    partition = partitionOf(address);
    // bounded: a client rotating addresses empties it now and then, and pays what it did before
    if (partitions.size >= PARTITIONS_KEPT) partitions.clear();
    partitions.set(address, partition);
  }
  return partition;
}

/** The partitions of the addresses seen lately: parsing one (ipaddr.js) costs more than the rest of the limiter's bookkeeping. */
const partitions = new Map<string, string>();
const PARTITIONS_KEPT = 4096;

function partitionOf(address: string): string {
  if (!ipaddr.isValid(address)) return 'unknown';
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  if (parsed.kind() === 'ipv4') return parsed.toString();
  const prefix = (parsed as ipaddr.IPv6).parts.slice(0, 4);
  return `${new ipaddr.IPv6([...prefix, 0, 0, 0, 0]).toString()}/64`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** The run callback (CALLBACK_PATH in src/modules/action-runs/routes.ts). */
const CALLBACK = /^\/[^/]+\/[^/]+\/envs\/[^/]+\/action-runs\/([^/]+)\/callback$/;

/**
 * What a request counts against. Never a raw credential: a key may be logged
 * and, on Node, is stored in `rate_limit_counters`.
 *
 * - the run callback: `run:<run id>`, whoever calls it;
 * - a service token of valid shape and checksum: `tok:` + the first 32 hex
 *   digits of its SHA-256 (a prefix of `service_tokens.token_hash`, so an
 *   operator can find the token), known without a query;
 * - a user session (a Bearer value without the token prefix, or the session
 *   cookie): `ses:` + the first 32 hex digits of the SHA-256 of its value;
 * - anything else (no credentials, a malformed or forged-checksum token):
 *   `ip:<address partition>`.
 *
 * A credential-keyed request also names `failureKey`, `fail:<address
 * partition>`: a checksum-valid token costs nothing to forge, so each one the
 * database turns away (401) is counted against the caller's address there,
 * and an address whose failures fill that budget is refused before its next
 * token is looked up.
 */
export function rateLimitSubject(
  c: Context,
  rateLimits: RateLimits,
  /** Platform.sha256Hex where the host has one: the same digest as hashServiceToken. */
  sha256Hex: (text: string) => string = hashServiceToken,
): { key: string; failureKey?: string; tokenHash?: string } {
  const address = addressPartition(rateLimits.clientAddress(c));
  const callback = c.req.method === 'POST' ? CALLBACK.exec(c.req.path) : null;
  if (callback && UUID.test(callback[1]!)) return { key: `run:${callback[1]!.toLowerCase()}`, failureKey: `fail:${address}` };
  const token = bearerCredential(c.req.header('authorization'));
  if (token !== undefined && isWellFormedServiceToken(token)) {
    const tokenHash = sha256Hex(token);
    return { key: `tok:${tokenHash.slice(0, 32)}`, failureKey: `fail:${address}`, tokenHash };
  }
  // a user session, as a Bearer value (the CLI) or the cookie (browsers)
  const session = token !== undefined && !token.startsWith(TOKEN_PREFIX) ? token : sessionCookieToken(c.req.header('cookie'));
  if (session !== undefined) return { key: `ses:${sha256Hex(session).slice(0, 32)}`, failureKey: `fail:${address}` };
  return { key: `ip:${address}` };
}

/**
 * The rate limit's part of a request (./request-envelope.ts runs it before
 * anything else): `admit` counts the request against its key and writes its
 * standing into the response's headers, or throws 429 `rate_limited`; it
 * answers the key a failed credential is counted against afterwards, if the
 * request has one. Undefined when the host limits nothing.
 */
export interface RequestLimiter {
  admit(c: Context<AppEnv>, headers: Record<string, string>): string | undefined | Promise<string | undefined>;
  /** After a 401 to a credential: one failure counted against the caller's address. */
  countFailure(failureKey: string): Promise<void>;
}

export function requestLimiter(platform: Platform): RequestLimiter | undefined {
  const { rateLimits, clock } = platform;
  if (!rateLimits) return undefined;
  const sha256Hex = platform.sha256Hex ?? hashServiceToken;
  const limit = platform.config.rateLimitPerMinute;
  const policy = `"${POLICY}";q=${limit};w=${RATE_LIMIT_WINDOW_MS / 1000}`;

  /** A store that cannot count (a Durable Object unreachable) admits the request: the API stays up, unlimited meanwhile. */
  const admitUncounted = (key: string, error: unknown): RateLimitStanding => {
    platform.logger.warn('rate limit store unavailable; request admitted uncounted', { error });
    return { allowed: true, remaining: limit, resetAt: rateLimitWindow(key, clock.now().getTime()).end };
  };
  /** The store's answer; a store that counts in memory (the Node host's) answers at once, with no turn through a promise. */
  const countOrAdmit = (key: string): RateLimitStanding | Promise<RateLimitStanding> => {
    let counted: RateLimitStanding | Promise<RateLimitStanding>;
    try {
      counted = rateLimits.hit(key, limit);
    } catch (error) {
      return admitUncounted(key, error);
    }
    return counted instanceof Promise ? counted.catch((error: unknown) => admitUncounted(key, error)) : counted;
  };
  const judge = (standing: RateLimitStanding, headers: Record<string, string>, failureKey: string | undefined) => {
    const seconds = Math.max(1, Math.ceil((standing.resetAt - clock.now().getTime()) / 1000));
    headers['RateLimit-Policy'] = policy;
    headers.RateLimit = `"${POLICY}";r=${standing.remaining};t=${seconds}`;
    if (standing.allowed) return failureKey;
    headers['Retry-After'] = String(seconds);
    throw new ApiError('rate_limited', `rate limit of ${limit} requests per minute reached; retry in ${seconds} s`);
  };

  return {
    admit(c, headers) {
      const { key, failureKey, tokenHash } = rateLimitSubject(c, rateLimits, sha256Hex);
      // authentication reads the same header later: it reuses the hash
      if (tokenHash) c.set('serviceTokenHash', tokenHash);
      // an address whose failed credentials spent its budget is refused before its next token is looked up: no I/O
      const failures = failureKey === undefined ? undefined : rateLimits.peek(failureKey, limit);
      const standing = failures && !failures.allowed ? failures : countOrAdmit(key);
      return standing instanceof Promise ? standing.then((s) => judge(s, headers, failureKey)) : judge(standing, headers, failureKey);
    },
    async countFailure(failureKey) {
      try {
        await rateLimits.hit(failureKey, limit);
      } catch (error) {
        platform.logger.warn('could not count a failed credential against its address', { error });
      }
    },
  };
}
