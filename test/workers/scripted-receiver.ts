import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startReceiver, type Reply } from '../support/receiver';

/**
 * Node side of the workers tests (global-setup.ts): the webhook receiver of
 * test/support/receiver.ts on 127.0.0.1, and beside it a control server the
 * tests in workerd reach by fetch, since they cannot hold the receiver
 * object itself:
 *
 * - `POST /__script` with a JSON array of replies: replaces the script
 *   (the next request takes the first reply; the last one repeats).
 * - `GET /__requests`: every request received so far, oldest first.
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
      if (req.method === 'POST' && req.url === '/__script') {
        let replies: Reply[];
        try {
          replies = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Reply[];
        } catch {
          return reply(400, { error: 'expects a JSON array of replies' });
        }
        if (!Array.isArray(replies) || replies.length === 0) return reply(400, { error: 'expects a non-empty array of replies' });
        receiver.script(...replies);
        return reply(200, { scripted: replies.length });
      }
      if (req.method === 'GET' && req.url === '/__requests') return reply(200, receiver.requests);
      return reply(404, { error: 'POST /__script or GET /__requests' });
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
