import type { Server } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * Requests Node's HTTP parser refuses before the app sees them (a request
 * head over 16 KiB, a malformed request line or header) are answered in the
 * API's error shape, `{ error, code }`, instead of Node's bare status line,
 * and the connection is closed: whatever follows on it cannot be trusted to
 * start a request. No request id: the request never became one.
 */
export function answerClientErrors(server: Server): void {
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    // a client that went away, or a response already under way: nothing to answer
    if (error.code === 'ECONNRESET' || !socket.writable || (socket as { _httpMessage?: unknown })._httpMessage) {
      socket.destroy();
      return;
    }
    const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
    const status = tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request';
    const body = JSON.stringify(
      tooLarge
        ? { error: 'request head exceeds 16 KiB (request line and headers)', code: 'headers_too_large' }
        : { error: 'malformed HTTP request', code: 'malformed_request' },
    );
    socket.end(
      `HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
}
