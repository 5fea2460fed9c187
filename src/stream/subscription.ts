import type { SubscriptionRequest } from './hub';

/**
 * How the Worker hands an authorized subscription to the environment's
 * Durable Object: one JSON header, dates as ISO strings, the scope as a list.
 */

export const SUBSCRIPTION_HEADER = 'x-cellplane-subscription';

/** A subscription crosses to the object as JSON: dates as ISO strings, the scope as a list. */
export function encodeSubscription(request: SubscriptionRequest): string {
  return JSON.stringify({
    ...request,
    filter: { ...request.filter, scopeCells: request.filter.scopeCells ? [...request.filter.scopeCells] : null },
    token: request.token ? { id: request.token.id, expiresAt: request.token.expiresAt?.toISOString() ?? null } : null,
  });
}

export function decodeSubscription(header: string): SubscriptionRequest {
  const raw = JSON.parse(header) as Omit<SubscriptionRequest, 'filter' | 'token'> & {
    filter: { entityType?: string; cell?: string; scopeCells: string[] | null };
    token: { id: string; expiresAt: string | null } | null;
  };
  return {
    ...raw,
    filter: { ...raw.filter, scopeCells: raw.filter.scopeCells ? new Set(raw.filter.scopeCells) : null },
    token: raw.token ? { id: raw.token.id, expiresAt: raw.token.expiresAt ? new Date(raw.token.expiresAt) : null } : null,
  };
}
