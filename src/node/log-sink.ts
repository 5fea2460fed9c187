import type { Writable } from 'node:stream';
// node's timers on Deno too: its global setTimeout answers a number, with no unref()
import { clearTimeout, setTimeout } from 'node:timers';
import type { LogSink } from '../logger';

/** How long an info line may wait for others to share its write, and how many may wait. */
export const LOG_HOLD_MS = 10;
export const LOG_HOLD_LINES = 256;

/**
 * The Node host's log destination: info lines are held and written to stdout
 * together, after the responses that logged them (lines given to render later
 * are rendered then: LogSink.later), rather than one console.log per line
 * inside each request. A write to a file or a pipe is a blocking system call
 * either way; held for up to LOG_HOLD_MS (or LOG_HOLD_LINES lines), a busy
 * server's lines share one write each, tens of requests' worth, where one
 * write per turn of the event loop took one for every few requests
 * (bench/http-results.md, "2026-11-28, third"). Warnings and errors go to stderr at
 * once, after whatever info lines came before them, so nothing is reordered
 * and the line that explains a crash is out before it. Lines still held when
 * the process exits are written then (process 'exit' runs on an uncaught
 * error too), or by `flush()` for a host that ends without that event
 * (Deno.exit); only a SIGKILL can lose them, the last LOG_HOLD_MS of lines.
 */
export function createStdoutSink(streams: { stdout: Writable; stderr: Writable } = process): LogSink & { flush(): void } {
  // a closed stdout (EPIPE) must not become an uncaught error: console.log ignores it too
  for (const stream of [streams.stdout, streams.stderr]) if (stream.listenerCount('error') === 0) stream.on('error', () => {});
  // lines held, in order: a line, or one to render (LogSink.later)
  let pending: (string | (() => string))[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  const flush = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
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
    if (pending.length >= LOG_HOLD_LINES) flush();
    // held lines never keep a process alive: 'exit' writes them
    else if (timer === undefined) (timer = setTimeout(flush, LOG_HOLD_MS)).unref();
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
