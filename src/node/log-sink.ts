import type { Writable } from 'node:stream';
import type { LogSink } from '../logger';

/**
 * The Node host's log destination: the lines of one turn of the event loop
 * go to stdout in one write, after the responses that logged them (lines
 * given to render later are rendered then: LogSink.later), rather
 * than one console.log per line inside each request (on Linux a write to a
 * file or a pipe blocks either way; this makes it one per turn, not one per
 * line). Warnings and errors go to stderr at once, after whatever info lines
 * came before them, so nothing is reordered and the line that explains a
 * crash is out before it. Lines still held when the process exits are
 * written then (process 'exit' runs on an uncaught error too), or by
 * `flush()` for a host that ends without that event (Deno.exit); only a
 * SIGKILL can lose the lines of the last turn.
 */
export function createStdoutSink(streams: { stdout: Writable; stderr: Writable } = process): LogSink & { flush(): void } {
  // a closed stdout (EPIPE) must not become an uncaught error: console.log ignores it too
  for (const stream of [streams.stdout, streams.stderr]) if (stream.listenerCount('error') === 0) stream.on('error', () => {});
  // lines of this turn, in order: a line, or one to render (LogSink.later)
  let pending: (string | (() => string))[] = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const lines = pending;
    pending = [];
    let text = '';
    for (const line of lines) text += `${typeof line === 'string' ? line : line()}\n`;
    streams.stdout.write(text);
  };
  process.on('exit', flush);
  const hold = (line: string | (() => string)) => {
    pending.push(line);
    if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
  const sink: LogSink = (line, level) => {
    if (level === 'warn' || level === 'error') {
      flush();
      streams.stderr.write(`${line}\n`);
      return;
    }
    hold(line);
  };
  sink.later = hold;
  return Object.assign(sink, { flush });
}
