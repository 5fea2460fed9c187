/**
 * The subscribers of bench/stream.ts, in a process of their own so that
 * reading 1,000 streams does not queue behind the server's work on one event
 * loop. Started with `fork`; told `{ url, token, count }`; opens `count`
 * SSE streams with node:http.
 *
 * What is timed is the server's fan-out, so a subscriber here does as little
 * as a socket read: the server writes each event in one chunk, and one
 * change is in flight at a time (the bench waits for every subscriber before
 * the next write), so the n-th chunk that starts with `id:` on a stream is
 * the n-th change. (The tests check event contents with a real SSE parser.)
 * When every stream has its n-th change, the process sends back
 * `{ change: n, times }`: each stream's receive time on the clock both
 * processes share (performance.timeOrigin + performance.now()).
 */
import { get, type IncomingMessage } from 'node:http';

interface Start {
  url: string;
  token: string;
  count: number;
}

const now = () => performance.timeOrigin + performance.now();
/** "id:" */
const isEvent = (chunk: Buffer) => chunk[0] === 0x69 && chunk[1] === 0x64 && chunk[2] === 0x3a;

function open(url: string, token: string, onChange: (at: number) => void): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = get(url, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } }, (response) => {
      if (response.statusCode !== 200) {
        reject(new Error(`stream answered ${response.statusCode}`));
        return;
      }
      response.on('data', (chunk: Buffer) => {
        if (isEvent(chunk)) onChange(now());
      });
      resolve(response);
    });
    request.on('error', reject);
  });
}

process.once('message', async (start: Start) => {
  const byChange = new Map<number, number[]>();
  const streams: IncomingMessage[] = [];
  const subscribe = () => {
    let seen = 0;
    return open(start.url, start.token, (at) => {
      const change = ++seen;
      let times = byChange.get(change);
      if (!times) byChange.set(change, (times = []));
      times.push(at);
      if (times.length === start.count) {
        byChange.delete(change);
        process.send!({ change, times });
      }
    });
  };
  // in batches, so the server's accept queue is never the thing measured
  for (let i = 0; i < start.count; i += 100) {
    streams.push(...(await Promise.all(Array.from({ length: Math.min(100, start.count - i) }, subscribe))));
  }
  process.send!({ ready: true });
  process.once('message', () => {
    for (const stream of streams) stream.destroy();
    process.exit(0);
  });
});
