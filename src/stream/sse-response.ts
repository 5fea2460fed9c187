import { ApiError } from '../http/errors';
import { ChangeHub, StreamLimitError, type SubscriptionRequest } from './hub';

/**
 * An SSE response fed by a hub subscription, the same on both hosts (the
 * Node hub, the Worker's Durable Object). The subscription ends when the
 * client goes away (the stream is cancelled) or the hub ends it.
 */
export function openSseResponse(hub: ChangeHub, request: SubscriptionRequest): Response {
  const encoder = new TextEncoder();
  let unsubscribe: (() => void) | undefined;
  let open = true;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      // the first bytes go out at once, so clients and proxies see the stream open
      controller.enqueue(encoder.encode(': stream open\nretry: 2000\n\n'));
      try {
        unsubscribe = hub.subscribe(request, {
          write(text) {
            if (!open) return false;
            controller.enqueue(encoder.encode(text));
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
  });
  return new Response(body, {
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    },
  });
}
