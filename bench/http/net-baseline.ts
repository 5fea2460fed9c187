/**
 * The floor under the change stream's fan-out (bench/http/stream-cost.ts): a
 * bare `node:net` server, in a process of its own so its CPU time can be read
 * from /proc/<pid>/stat, that writes the bytes the app writes and nothing
 * else. Started with `fork`; told `{ head, frame, count }` (base64: the app's
 * response head with its preamble chunk, and one change as the app frames it,
 * an HTTP/1.1 chunk), it listens on 127.0.0.1 and answers `{ port }`. Each
 * connection gets `head` once its request arrives. `{ send: frames,
 * intervalMs }` writes `frame` to every connection `frames` times, one round
 * every `intervalMs` (the app's pace, so the clients read as they read the
 * app), then answers `{ sent: true }`. `{ stop: true }` ends it.
 *
 * No HTTP parsing, no routing, no authentication, no database: one
 * `socket.write` per frame per connection, as the app's hub does.
 */
import { createServer, type Socket } from 'node:net';

interface Start {
  head: string;
  frame: string;
  count: number;
}

type Command = { send: number; intervalMs: number } | { stop: true };

process.once('message', (start: Start) => {
  const head = Buffer.from(start.head, 'base64');
  const frame = Buffer.from(start.frame, 'base64');
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    socket.setNoDelay(true);
    socket.once('data', () => {
      socket.write(head);
      sockets.push(socket);
    });
    // the request's remaining bytes, if any, are read and dropped
    socket.on('data', () => {});
    socket.on('error', () => {});
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    process.send!({ port: typeof address === 'object' && address ? address.port : 0 });
  });
  process.on('message', (command: Command) => {
    if ('stop' in command) {
      for (const socket of sockets) socket.destroy();
      process.exit(0);
    }
    let round = 0;
    const write = () => {
      for (const socket of sockets) socket.write(frame);
      if (++round < command.send) setTimeout(write, command.intervalMs);
      else process.send!({ sent: true });
    };
    write();
  });
});
