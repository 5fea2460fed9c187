import { createParser, type EventSourceMessage } from 'eventsource-parser';

/**
 * A real SSE client for tests: fetch over HTTP, the stream parsed by
 * eventsource-parser. Comments (heartbeats) are counted; `close()` drops
 * the connection as a client going away would.
 */

export interface SseEvent {
  id: string | undefined;
  event: string | undefined;
  data: any;
}

export interface SseClient {
  status: number;
  events: SseEvent[];
  comments: number;
  /** Resolves when `count` events have arrived (or rejects after `timeoutMs`). */
  waitForEvents(count: number, timeoutMs?: number): Promise<SseEvent[]>;
  /** Resolves when the server ends the stream. */
  ended: Promise<void>;
  close(): void;
}

export async function openSse(url: string, options: { token?: string; lastEventId?: string } = {}): Promise<SseClient> {
  const controller = new AbortController();
  const headers: Record<string, string> = { accept: 'text/event-stream' };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.lastEventId !== undefined) headers['last-event-id'] = options.lastEventId;
  const response = await fetch(url, { headers, signal: controller.signal });
  const events: SseEvent[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  const client: SseClient = {
    status: response.status,
    events,
    comments: 0,
    waitForEvents(count, timeoutMs = 10_000) {
      if (events.length >= count) return Promise.resolve(events.slice());
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`sse: ${events.length} of ${count} events after ${timeoutMs} ms`)), timeoutMs);
        waiters.push({
          count,
          resolve: () => {
            clearTimeout(timer);
            resolve(events.slice());
          },
        });
      });
    },
    ended: Promise.resolve(),
    close: () => controller.abort(),
  };
  if (!response.ok || !response.body) return client;
  const parser = createParser({
    onEvent(message: EventSourceMessage) {
      let data: unknown = message.data;
      try {
        data = JSON.parse(message.data);
      } catch {
        // not JSON: keep the text
      }
      events.push({ id: message.id, event: message.event, data });
      for (const waiter of waiters.filter((w) => events.length >= w.count)) waiter.resolve();
    },
    onComment() {
      client.comments += 1;
    },
  });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  client.ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        parser.feed(value);
      }
    } catch {
      // aborted by close(): the end of this client
    }
  })();
  return client;
}
