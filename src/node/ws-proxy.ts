import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { WebSocketServer } from 'ws';

/**
 * The local stand-in for Neon's WebSocket proxy: accepts a WebSocket at
 * `/v2?address=host:port` and pipes it, byte for byte, to that TCP address.
 * It lets the Worker's Neon driver reach a plain Postgres or PGlite in
 * `npm run dev` and the workers tests. Development only: it listens on
 * loopback and forwards to the addresses in `allow` and nowhere else.
 *
 * `oneSessionAtATime` is for PGlite behind pglite-socket. PGlite is a single
 * session, and pglite-socket interleaves its connections between protocol
 * messages, so two requests' Parse/Bind/Execute/Sync sequences get mixed
 * (`portal "" does not exist`, or one request reading another's rows). With
 * it, the proxy gives the server to one connection at a time, from its first
 * message until the server is idle again (the sequence closed by Sync, and
 * ReadyForQuery 'I' for every Query or Sync sent, so a transaction keeps it);
 * the others wait their turn.
 */
export interface WsProxy {
  /** `host:port`, the value for NEON_LOCAL_WS_PROXY. */
  address: string;
  close(): Promise<void>;
}

export async function startWsProxy(options: {
  allow: string[];
  host?: string;
  port?: number;
  oneSessionAtATime?: boolean;
}): Promise<WsProxy> {
  const allowed = new Set(options.allow);
  const turns = options.oneSessionAtATime ? new Turns() : undefined;
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
      const session = turns ? new Session(turns, tcp) : undefined;
      // writes before the TCP connection is up are buffered by the socket
      ws.on('message', (data: Buffer) => (session ? session.fromClient(data) : tcp.write(data)));
      tcp.on('data', (chunk: Buffer) => {
        session?.fromServer(chunk);
        ws.send(chunk);
      });
      // each side's end closes the other cleanly, so neither logs a dropped peer
      ws.on('close', () => {
        session?.end();
        tcp.end();
      });
      ws.on('error', () => tcp.destroy());
      tcp.on('error', () => {});
      tcp.on('close', () => {
        session?.end();
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

/** Who has the server now, and who waits for it, in arrival order. */
class Turns {
  #current: Session | undefined;
  #waiting: Session[] = [];

  request(session: Session): void {
    if (this.#current === undefined) {
      this.#current = session;
      session.start();
    } else if (this.#current !== session && !this.#waiting.includes(session)) {
      this.#waiting.push(session);
    }
  }

  done(session: Session): void {
    this.#waiting = this.#waiting.filter((waiting) => waiting !== session);
    if (this.#current !== session) return;
    this.#current = this.#waiting.shift();
    this.#current?.start();
  }
}

const SSL_REQUEST = 80_877_103;
const GSSENC_REQUEST = 80_877_104;
const CANCEL_REQUEST = 80_877_102;

/**
 * One connection under `oneSessionAtATime`: its bytes wait until it has the
 * turn. Just enough of the Postgres wire protocol is read (message framing,
 * the startup packet, Query/Sync/Terminate, ReadyForQuery's status) to know
 * when the server is idle again.
 */
class Session {
  #pending: Buffer[] = [];
  #hasTurn = false;
  #ended = false;
  #client = Buffer.alloc(0);
  #server = Buffer.alloc(0);
  #startupSent = false;
  /** Single-byte answers (to SSLRequest / GSSENCRequest) still due, unframed. */
  #rawBytesDue = 0;
  /** ReadyForQuery messages still due: one per startup, Query and Sync. */
  #readyDue = 0;
  #status = 'I';
  /** Extended-protocol messages sent since the last Sync: the unnamed statement and portal are in use. */
  #midSequence = false;
  #terminated = false;

  constructor(
    private readonly turns: Turns,
    private readonly tcp: Socket,
  ) {}

  fromClient(data: Buffer): void {
    this.#pending.push(data);
    if (this.#hasTurn) this.#flush();
    else this.turns.request(this);
  }

  start(): void {
    if (this.#ended) return this.turns.done(this);
    this.#hasTurn = true;
    this.#flush();
  }

  fromServer(chunk: Buffer): void {
    let data = chunk;
    if (this.#rawBytesDue > 0) {
      const skipped = Math.min(this.#rawBytesDue, data.length);
      this.#rawBytesDue -= skipped;
      data = data.subarray(skipped);
    }
    this.#server = Buffer.concat([this.#server, data]);
    while (this.#server.length >= 5) {
      const length = this.#server.readInt32BE(1);
      if (this.#server.length < 1 + length) break;
      if (this.#server[0] === 0x5a /* Z */) {
        this.#readyDue = Math.max(0, this.#readyDue - 1);
        this.#status = String.fromCharCode(this.#server[5]!);
      }
      this.#server = this.#server.subarray(1 + length);
    }
    this.#releaseIfIdle();
  }

  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#pending = [];
    this.#hasTurn = false;
    this.turns.done(this);
  }

  #flush(): void {
    for (const data of this.#pending) {
      this.#readClient(data);
      this.tcp.write(data);
    }
    this.#pending = [];
    this.#releaseIfIdle();
  }

  #readClient(data: Buffer): void {
    this.#client = Buffer.concat([this.#client, data]);
    for (;;) {
      if (!this.#startupSent) {
        if (this.#client.length < 8) return;
        const length = this.#client.readInt32BE(0);
        if (this.#client.length < length) return;
        const code = this.#client.readInt32BE(4);
        if (code === SSL_REQUEST || code === GSSENC_REQUEST) this.#rawBytesDue += 1;
        else if (code === CANCEL_REQUEST) this.#terminated = true;
        else {
          this.#startupSent = true;
          this.#readyDue += 1;
        }
        this.#client = this.#client.subarray(length);
        continue;
      }
      if (this.#client.length < 5) return;
      const length = this.#client.readInt32BE(1);
      if (this.#client.length < 1 + length) return;
      const type = this.#client[0];
      if (type === 0x51 /* Q */ || type === 0x53 /* S */) {
        this.#readyDue += 1;
        this.#midSequence = false;
      } else if (type === 0x58 /* X */) this.#terminated = true;
      // Parse, Bind, Describe, Execute, Flush...: a sequence that only Sync ends
      else this.#midSequence = true;
      this.#client = this.#client.subarray(1 + length);
    }
  }

  #releaseIfIdle(): void {
    if (!this.#hasTurn || this.#pending.length > 0 || this.#client.length > 0) return;
    const idle = !this.#midSequence && this.#readyDue === 0 && this.#rawBytesDue === 0 && this.#status === 'I';
    if (this.#terminated || idle) {
      this.#hasTurn = false;
      this.turns.done(this);
    }
  }
}
