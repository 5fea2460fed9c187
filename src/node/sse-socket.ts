import type { ServerResponse } from 'node:http';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { ApiError } from '../http/errors';
import { StreamLimitError, type ChangeHub, type SubscriptionRequest } from '../stream/hub';
import { SSE_HEADERS, STALLED_CLIENT_MS, STREAM_PREAMBLE, UNSENT_HIGH_WATER_BYTES } from '../stream/sse-response';

/**
 * The Node host's SSE path: the hub writes each frame straight to the
 * client's socket. Through a web ReadableStream every frame also costs a
 * read promise and its own hop before the write, per subscriber; with a
 * thousand subscribers that is most of the fan-out's time (bench/README.md,
 * stream). Same rules as openSseResponse: the same preamble and headers, a
 * client with more than the high-water mark unsent for too long is dropped,
 * a closed connection unsubscribes.
 */
export function openSseOnSocket(
  hub: ChangeHub,
  request: SubscriptionRequest,
  outgoing: ServerResponse,
  headers: Record<string, string>,
): Response {
  let open = true;
  let caughtUpAt = Date.now();
  let unsubscribe: () => void;
  try {
    unsubscribe = hub.subscribe(request, {
      write(chunk) {
        if (!open) return false;
        const now = Date.now();
        if (outgoing.writableLength <= UNSENT_HIGH_WATER_BYTES) caughtUpAt = now;
        else if (now - caughtUpAt > STALLED_CLIENT_MS) return false;
        outgoing.write(chunk);
        return true;
      },
      close() {
        if (!open) return;
        open = false;
        outgoing.end();
      },
    });
  } catch (error) {
    // nothing is written yet: the caller answers with the error
    if (error instanceof StreamLimitError) throw new ApiError('stream_limit_reached', error.message);
    throw error;
  }
  // the hub writes only after its first read, so the head goes out first
  outgoing.writeHead(200, { ...SSE_HEADERS, ...headers });
  outgoing.write(STREAM_PREAMBLE);
  outgoing.on('close', () => {
    open = false;
    unsubscribe();
  });
  return RESPONSE_ALREADY_SENT;
}
