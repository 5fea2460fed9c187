import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { CellplaneError } from './errors';

/** One event of the change stream: `entity.created|updated|deleted`, `resync`, or `end`. */
export interface StreamEvent {
  /** The environment's change sequence (absent on `resync` and `end`). */
  id: string | undefined;
  event: string;
  /** `data:` parsed as JSON (`{ type, entity, at }` for changes), or the raw text. */
  data: unknown;
}

export interface ChangeStreamOptions {
  /** Resume after this change sequence; without it the stream starts at the latest change. */
  lastEventId?: string | number;
  entityType?: string;
  cell?: string;
  /** Ends the stream (the iterator returns). */
  signal?: AbortSignal;
  /** Wait before reconnecting after a dropped connection; the server's `retry:` wins. Default 1000 ms. */
  retryMs?: number;
  /** Give up after this many reconnects in a row without an event (default: never). */
  maxReconnects?: number;
  /** Told about each reconnect, with the error that dropped the connection. */
  onReconnect?: (info: { attempt: number; lastEventId: string | undefined; error: unknown }) => void;
}

interface Transport {
  baseUrl: string;
  headers: Record<string, string>;
  fetch: (request: Request) => Promise<Response>;
}

/**
 * The change stream as an async iterator. A connection that ends or fails
 * is opened again with `Last-Event-ID` set to the last event seen, so the
 * server replays what was missed: no gap and no duplicate. An answer that is
 * not a stream (401, 403, 404) is thrown as CellplaneError and not retried;
 * `event: end` (the token was revoked or expired) ends the iteration.
 */
export async function* openChangeStream(
  transport: Transport,
  ref: { org: string; project: string; env: string },
  options: ChangeStreamOptions = {},
): AsyncGenerator<StreamEvent, void, undefined> {
  const path = `/${encodeURIComponent(ref.org)}/${encodeURIComponent(ref.project)}/envs/${encodeURIComponent(ref.env)}/entities/stream`;
  const query = new URLSearchParams();
  if (options.entityType) query.set('entityType', options.entityType);
  if (options.cell) query.set('cell', options.cell);
  const url = `${transport.baseUrl}${path}${query.size > 0 ? `?${query}` : ''}`;
  let lastEventId = options.lastEventId === undefined ? undefined : String(options.lastEventId);
  let retryMs = options.retryMs ?? 1000;
  let failures = 0;
  const signal = options.signal;

  while (!signal?.aborted) {
    const headers: Record<string, string> = { ...transport.headers, accept: 'text/event-stream' };
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
    let dropped: unknown;
    try {
      const response = await transport.fetch(new Request(url, { headers, signal }));
      if (!response.ok) throw await CellplaneError.fromResponse(response, { method: 'GET', url: path });
      if (!response.body) throw new Error('the stream answered without a body');
      const pending: EventSourceMessage[] = [];
      const parser = createParser({
        onEvent: (message) => pending.push(message),
        onRetry: (ms) => (retryMs = ms),
      });
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      // not every fetch ties the body to the request's signal (an embedded app's does not)
      const stop = () => void reader.cancel().catch(() => {});
      signal?.addEventListener('abort', stop, { once: true });
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parser.feed(value);
          for (const message of pending.splice(0)) {
            failures = 0;
            if (message.id !== undefined && message.id !== '') lastEventId = message.id;
            const event = { id: message.id || undefined, event: message.event ?? 'message', data: parseData(message.data) };
            yield event;
            if (event.event === 'end' || signal?.aborted) return;
          }
        }
      } finally {
        signal?.removeEventListener('abort', stop);
        reader.releaseLock();
        await response.body.cancel().catch(() => {});
      }
      dropped = new Error('the server closed the stream');
    } catch (error) {
      if (signal?.aborted) return;
      if (error instanceof CellplaneError) throw error;
      dropped = error;
    }
    failures += 1;
    if (options.maxReconnects !== undefined && failures > options.maxReconnects) {
      throw CellplaneError.network({ method: 'GET', url: path }, dropped);
    }
    options.onReconnect?.({ attempt: failures, lastEventId, error: dropped });
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, retryMs);
        signal?.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
      });
    } catch {
      return;
    }
  }
}

function parseData(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return data;
  }
}
