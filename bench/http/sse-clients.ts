/**
 * The subscribers of bench/http/stream-cost.ts, in a process of their own so
 * that their reading is not counted as a server's CPU. Started with `fork`;
 * told `{ url, token, count }`; opens `count` streams with node:http and
 * answers `{ ready: true }` once every one has its response head. Then
 * `{ reach: n }` is answered with `{ reached: n }` once every stream has read
 * n events in all; `{ stop: true }` ends it.
 *
 * The same client reads the app and the bare `node:net` baseline, so what
 * the two servers are compared on is only their side of the sockets.
 */
import { get, type IncomingMessage } from 'node:http';

interface Start {
  url: string;
  token?: string;
  count: number;
}

type Command = { reach: number } | { stop: true };

/**
 * Every event starts a line after the blank line that ends what came before
 * (the preamble, a heartbeat or the previous event), so its start is this.
 * Counting it, rather than reads, holds even when one read carries two frames.
 */
const EVENT_START = Buffer.from('\n\nid: ');

/** Events seen on one stream, counted across read boundaries. */
function eventCounter(onEvent: () => void) {
  let carry: Buffer = Buffer.alloc(0);
  return (chunk: Buffer) => {
    const text = carry.length ? Buffer.concat([carry, chunk]) : chunk;
    for (let at = text.indexOf(EVENT_START); at !== -1; at = text.indexOf(EVENT_START, at + EVENT_START.length)) onEvent();
    carry = text.subarray(Math.max(0, text.length - (EVENT_START.length - 1)));
  };
}

function open(start: Start, onEvent: () => void): Promise<IncomingMessage> {
  const headers: Record<string, string> = { accept: 'text/event-stream' };
  if (start.token) headers.authorization = `Bearer ${start.token}`;
  return new Promise((resolve, reject) => {
    const request = get(start.url, { headers }, (response) => {
      if (response.statusCode !== 200) {
        reject(new Error(`stream answered ${response.statusCode}`));
        return;
      }
      response.on('data', eventCounter(onEvent));
      resolve(response);
    });
    request.on('error', reject);
  });
}

process.once('message', async (start: Start) => {
  /** For each n, how many streams have read n events. */
  const streamsAt = new Map<number, number>();
  let awaited: number | undefined;
  const subscribe = () => {
    let seen = 0;
    return open(start, () => {
      const streams = (streamsAt.get(++seen) ?? 0) + 1;
      streamsAt.set(seen, streams);
      if (seen === awaited && streams === start.count) {
        awaited = undefined;
        process.send!({ reached: seen });
      }
    });
  };
  const streams: IncomingMessage[] = [];
  // in batches, so the server's accept queue is never what is waited on
  for (let i = 0; i < start.count; i += 100) {
    streams.push(...(await Promise.all(Array.from({ length: Math.min(100, start.count - i) }, subscribe))));
  }
  process.on('message', (command: Command) => {
    if ('stop' in command) {
      for (const stream of streams) stream.destroy();
      process.exit(0);
    }
    if (streamsAt.get(command.reach) === start.count) process.send!({ reached: command.reach });
    else awaited = command.reach;
  });
  process.send!({ ready: true });
});
