import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A real HTTP receiver on 127.0.0.1 for outbound webhook tests. Each request
 * takes the next scripted reply (the last one repeats): a status with
 * headers, `hang` (never answers), or `drop` (closes the connection without
 * a response). Every request is recorded as received.
 */

export type Reply =
  | { status: number; headers?: Record<string, string>; body?: string }
  | { hang: true }
  | { drop: true };

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

export interface Receiver {
  url: string;
  /** host:port, for OUTBOUND_ALLOWED_HOSTS. */
  host: string;
  requests: ReceivedRequest[];
  /** Replaces the script; the next request takes its first reply. */
  script(...replies: Reply[]): void;
  /** Resolves when `count` requests have arrived. */
  waitForRequests(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

export async function startReceiver(...replies: Reply[]): Promise<Receiver> {
  let script: Reply[] = replies.length > 0 ? replies : [{ status: 200 }];
  let next = 0;
  const requests: ReceivedRequest[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      for (const waiter of waiters.filter((w) => requests.length >= w.count)) waiter.resolve();
      const reply = script[Math.min(next, script.length - 1)]!;
      next += 1;
      if ('hang' in reply) return;
      if ('drop' in reply) {
        req.socket.destroy();
        return;
      }
      res.writeHead(reply.status, reply.headers ?? {});
      res.end(reply.body ?? '');
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    requests,
    script(...replies) {
      script = replies;
      next = 0;
    },
    waitForRequests(count, timeoutMs = 10_000) {
      if (requests.length >= count) return Promise.resolve(requests.slice());
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`receiver: ${requests.length} of ${count} requests after ${timeoutMs} ms`)), timeoutMs);
        waiters.push({
          count,
          resolve: () => {
            clearTimeout(timer);
            resolve(requests.slice());
          },
        });
      });
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
