import type { ServerResponse } from 'node:http';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { ApiError } from '../http/errors';
import { StreamLimitError, type ChangeHub, type SubscriptionRequest } from '../stream/hub';
import { SSE_HEADERS, STALLED_CLIENT_MS, STREAM_PREAMBLE, UNSENT_HIGH_WATER_BYTES } from '../stream/sse-response';

/**
 * Each frame as one HTTP/1.1 chunk, built once per frame, whatever the
 * number of sockets it goes to: the hub writes a change's frame, the same
 * Uint8Array, to each of its subscribers in one loop (hub.ts, #deliver), so
 * the last frame framed is the one asked for again until the next change.
 * A frame met out of turn (a catch-up's, a heartbeat) is framed anew.
 */
let lastFrame: Uint8Array | undefined;
let lastChunk: Buffer | undefined;
function framedAsChunk(frame: Uint8Array): Buffer {
  if (frame !== lastFrame || !lastChunk) {
    lastChunk = Buffer.concat([Buffer.from(`${frame.length.toString(16)}\r\n`), frame, Buffer.from('\r\n')]);
    lastFrame = frame;
  }
  return lastChunk;
}

/**
 * The Node host's SSE path: the hub writes each frame straight to the
 * client's socket. Through a web ReadableStream every frame also costs a
 * read promise and its own hop before the write, per subscriber; with a
 * thousand subscribers that is most of the fan-out's time (bench/README.md,
 * stream). Same rules as openSseResponse: the same preamble and headers, a
 * client with more than the high-water mark unsent for too long is dropped,
 * a closed connection unsubscribes.
 *
 * Once the head is out, a frame skips ServerResponse.write as well: with
 * chunked encoding that corks the socket, writes the chunk's size line, the
 * frame and its CRLF, and uncorks on the next tick, per subscriber. Here the
 * chunk is framed once per change (the same bytes ServerResponse writes)
 * and each subscriber's socket gets it in one write, at once: p50 at 1,000
 * subscribers from ~6.7 ms to ~5.3 ms (bench/README.md, stream). The
 * response still ends through ServerResponse, with its last chunk.
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
        // an empty chunk would be the last one, the end of the response
        if (chunk.length === 0) return true;
        const now = Date.now();
        if (outgoing.writableLength <= UNSENT_HIGH_WATER_BYTES) caughtUpAt = now;
        else if (now - caughtUpAt > STALLED_CLIENT_MS) return false;
        const socket = outgoing.socket;
        // chunked: HTTP/1.1 without a length; an HTTP/1.0 client gets the frames bare, through ServerResponse
        if (socket && outgoing.headersSent && (outgoing as { chunkedEncoding?: boolean }).chunkedEncoding === true) {
          socket.write(framedAsChunk(chunk));
        } else {
          outgoing.write(chunk);
        }
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
