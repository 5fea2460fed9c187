import { ApiError } from '../http/errors';
import { ChangeHub, StreamLimitError, type SubscriptionRequest } from './hub';

/**
 * A client that has stopped reading (its connection stalled) must not have
 * every change of its environment buffered for it without end. One that has
 * had more than UNSENT_HIGH_WATER_BYTES waiting for STALLED_CLIENT_MS is
 * dropped: its stream closes after what is waiting, and it resumes with
 * Last-Event-ID from the log, losing nothing. A burst larger than the mark
 * alone drops no one: a reading client is back under it long before.
 */
export const UNSENT_HIGH_WATER_BYTES = 1024 * 1024;
export const STALLED_CLIENT_MS = 30_000;

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
};

/** The first bytes of every stream, sent at once so clients and proxies see it open. */
export const STREAM_PREAMBLE = ': stream open\nretry: 2000\n\n';

/**
 * An SSE response fed by a hub subscription, the same on both hosts (the
 * Node hub, the Worker's Durable Object). The subscription ends when the
 * client goes away (the stream is cancelled), stalls, or the hub ends it.
 */
export function openSseResponse(hub: ChangeHub, request: SubscriptionRequest, headers: Record<string, string> = {}): Response {
  const encoder = new TextEncoder();
  let unsubscribe: (() => void) | undefined;
  let open = true;
  /** When the client last had less than the high-water mark waiting. */
  let caughtUpAt = Date.now();
  const source: UnderlyingDefaultSource<Uint8Array> = {
    start(controller) {
      controller.enqueue(encoder.encode(STREAM_PREAMBLE));
      try {
        unsubscribe = hub.subscribe(request, {
          write(chunk) {
            if (!open) return false;
            const now = Date.now();
            // desiredSize below zero: more than the mark waits for the client
            if ((controller.desiredSize ?? 0) >= 0) caughtUpAt = now;
            else if (now - caughtUpAt > STALLED_CLIENT_MS) return false;
            controller.enqueue(chunk);
            return true;
          },
          close() {
            if (!open) return;
            open = false;
            controller.close();
          },
        });
      } catch (error) {
        open = false;
        if (error instanceof StreamLimitError) throw new ApiError('stream_limit_reached', error.message);
        throw error;
      }
    },
    cancel() {
      open = false;
      unsubscribe?.();
    },
  };
  const body = new ReadableStream<Uint8Array>(source, new ByteLengthQueuingStrategy({ highWaterMark: UNSENT_HIGH_WATER_BYTES }));
  // the request's own (X-Request-Id, the rate limit's), as openSseOnSocket sends them: a returned Response skips the context's
  return new Response(body, { headers: { ...SSE_HEADERS, ...headers } });
}
