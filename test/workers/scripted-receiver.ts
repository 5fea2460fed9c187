import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startReceiver, type Release, type Reply } from '../support/receiver';

/**
 * Node side of the workers tests (global-setup.ts): the webhook receiver of
 * test/support/receiver.ts on 127.0.0.1, and beside it a control server the
 * tests in workerd reach by fetch, since they cannot hold the receiver
 * object itself:
 *
 * - `POST /__script` with a JSON array of replies: replaces the script
 *   (the next request takes the first reply; the last one repeats). With
 *   `?prefix=/path`, the script of the requests under that path only
 *   (receiver.ts `route`), leaving the main script to the other tests.
 * - `GET /__requests`: every request received so far, oldest first.
 * - `GET /__held?prefix=/path`: how many requests (under the path) are held
 *   open by a `hold` reply: `{ "held": n }`.
 * - `POST /__release?prefix=/path` with `{ "reply"?, "count"? }`: answers up
 *   to `count` held requests under the path, oldest first, with `reply`
 *   (200 by default): `{ "released": n }`.
 */

export interface ScriptedReceiver {
  /** The webhook target, e.g. http://127.0.0.1:PORT. */
  url: string;
  /** host:port, for OUTBOUND_ALLOWED_HOSTS. */
  host: string;
  /** The control server's base URL. */
  control: string;
}

export async function startScriptedReceiver(): Promise<ScriptedReceiver & { close(): Promise<void> }> {
  const receiver = await startReceiver();
  const control: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const reply = (status: number, body?: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body ?? {}));
      };
      const url = new URL(req.url!, 'http://control');
      const prefix = url.searchParams.get('prefix') ?? undefined;
      if (req.method === 'POST' && url.pathname === '/__script') {
        let replies: Reply[];
        try {
          replies = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Reply[];
        } catch {
          return reply(400, { error: 'expects a JSON array of replies' });
        }
        if (!Array.isArray(replies) || replies.length === 0) return reply(400, { error: 'expects a non-empty array of replies' });
        if (prefix === undefined) receiver.script(...replies);
        else receiver.route(prefix, ...replies);
        return reply(200, { scripted: replies.length });
      }
      if (req.method === 'GET' && url.pathname === '/__requests') return reply(200, receiver.requests);
      if (req.method === 'GET' && url.pathname === '/__held') return reply(200, { held: receiver.held(prefix) });
      if (req.method === 'POST' && url.pathname === '/__release') {
        let options: { reply?: Release; count?: number };
        try {
          options = chunks.length === 0 ? {} : (JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof options);
        } catch {
          return reply(400, { error: 'expects a JSON object { reply?, count? }' });
        }
        return reply(200, { released: receiver.release(options.reply, options.count, prefix) });
      }
      return reply(404, { error: 'POST /__script, GET /__requests, GET /__held or POST /__release' });
    });
  });
  await new Promise<void>((resolve) => control.listen(0, '127.0.0.1', resolve));
  const { port } = control.address() as AddressInfo;
  return {
    url: receiver.url,
    host: receiver.host,
    control: `http://127.0.0.1:${port}`,
    async close() {
      control.closeAllConnections();
      await new Promise<void>((resolve) => control.close(() => resolve()));
      await receiver.close();
    },
  };
}
