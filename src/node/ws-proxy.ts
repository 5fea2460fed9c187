import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { WebSocketServer } from 'ws';

/**
 * The local stand-in for Neon's WebSocket proxy: accepts a WebSocket at
 * `/v2?address=host:port` and pipes it, byte for byte, to that TCP address.
 * It lets the Worker's Neon driver reach a plain Postgres or PGlite in
 * `npm run dev` and the workers tests. Development only: it listens on
 * loopback and forwards to the addresses in `allow` and nowhere else.
 */
export interface WsProxy {
  /** `host:port`, the value for NEON_LOCAL_WS_PROXY. */
  address: string;
  close(): Promise<void>;
}

export async function startWsProxy(options: { allow: string[]; host?: string; port?: number }): Promise<WsProxy> {
  const allowed = new Set(options.allow);
  const sockets = new Set<Socket>();
  const wss = new WebSocketServer({ noServer: true });
  const server = createServer((_req, res) => res.writeHead(426).end('WebSocket upgrade required\n'));

  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const address = url.searchParams.get('address') ?? '';
    const target = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(address);
    if (url.pathname !== '/v2' || !target || !allowed.has(address)) {
      socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const tcp = connect({ host: target[1]!, port: Number(target[2]) });
      tcp.setNoDelay(true);
      sockets.add(tcp);
      // writes before the TCP connection is up are buffered by the socket
      ws.on('message', (data: Buffer) => tcp.write(data));
      tcp.on('data', (chunk) => ws.send(chunk));
      // each side's end closes the other cleanly, so neither logs a dropped peer
      ws.on('close', () => tcp.end());
      ws.on('error', () => tcp.destroy());
      tcp.on('error', () => {});
      tcp.on('close', () => {
        sockets.delete(tcp);
        if (ws.readyState === ws.OPEN) ws.close(1000);
        else if (ws.readyState === ws.CONNECTING) ws.terminate();
      });
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  return {
    address: `${address.includes(':') ? `[${address}]` : address}:${port}`,
    close: async () => {
      for (const client of wss.clients) client.terminate();
      for (const socket of sockets) socket.destroy();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}
