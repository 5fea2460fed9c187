import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A real HTTP receiver on 127.0.0.1 for outbound webhook tests. Each request
 * takes the next scripted reply (the last one repeats): a status with
 * headers, `hang` (never answers), `drop` (closes the connection without
 * a response), or `hold` (kept open until the test calls `release`). Every
 * request is recorded as received. A `route` gives the requests under a path
 * prefix a script of their own, so tests sharing one receiver do not take
 * each other's replies.
 */

export type Reply =
  | { status: number; headers?: Record<string, string>; body?: string }
  | { hang: true }
  | { drop: true }
  /** Kept open until `release` answers it. */
  | { hold: true };

/** How `release` answers a held request. */
export type Release = { status: number; headers?: Record<string, string>; body?: string } | { drop: true };

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
  /** Gives the requests whose URL starts with `prefix` a script of their own (the next one takes its first reply); the others keep the main script. */
  route(prefix: string, ...replies: Reply[]): void;
  /** Resolves when `count` requests have arrived. */
  waitForRequests(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  /** How many requests are held open now (`hold` replies not yet released), of those under `prefix` if given. */
  held(prefix?: string): number;
  /** Resolves when `count` requests are held open at once. */
  waitForHeld(count: number, timeoutMs?: number): Promise<void>;
  /** Answers up to `count` held requests (all by default; under `prefix` if given), oldest first, with `reply` (200 by default); returns how many. */
  release(reply?: Release, count?: number, prefix?: string): number;
  close(): Promise<void>;
}

export async function startReceiver(...replies: Reply[]): Promise<Receiver> {
  let script: Reply[] = replies.length > 0 ? replies : [{ status: 200 }];
  let next = 0;
  const requests: ReceivedRequest[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  const sockets = new Set<Socket>();
  const routes = new Map<string, { script: Reply[]; next: number }>();
  const held: { url: string; answer: (reply: Release) => void }[] = [];
  const heldUnder = (prefix = '') => held.filter((request) => request.url.startsWith(prefix));
  const heldWaiters: { count: number; resolve: () => void }[] = [];
  const answer = (req: IncomingMessage, res: ServerResponse, reply: Release) => {
    if ('drop' in reply) {
      req.socket.destroy();
      return;
    }
    res.writeHead(reply.status, reply.headers ?? {});
    res.end(reply.body ?? '');
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      for (const waiter of waiters.filter((w) => requests.length >= w.count)) waiter.resolve();
      const route = [...routes].find(([prefix]) => req.url!.startsWith(prefix))?.[1];
      let reply: Reply;
      if (route) {
        reply = route.script[Math.min(route.next, route.script.length - 1)]!;
        route.next += 1;
      } else {
        reply = script[Math.min(next, script.length - 1)]!;
        next += 1;
      }
      if ('hang' in reply) return;
      if ('hold' in reply) {
        held.push({ url: req.url!, answer: (release) => answer(req, res, release) });
        for (const waiter of heldWaiters.filter((w) => held.length >= w.count)) waiter.resolve();
        return;
      }
      answer(req, res, reply);
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
    route(prefix, ...replies) {
      routes.set(prefix, { script: replies.length > 0 ? replies : [{ status: 200 }], next: 0 });
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
    held: (prefix) => heldUnder(prefix).length,
    waitForHeld(count, timeoutMs = 10_000) {
      if (held.length >= count) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`receiver: ${held.length} of ${count} requests held after ${timeoutMs} ms`)), timeoutMs);
        heldWaiters.push({
          count,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
    },
    release(reply = { status: 200 }, count = Number.POSITIVE_INFINITY, prefix = '') {
      const released = heldUnder(prefix).slice(0, count);
      for (const request of released) {
        held.splice(held.indexOf(request), 1);
        request.answer(reply);
      }
      return released.length;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
