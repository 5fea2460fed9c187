/**
 * The least form of the app's request log, for the bench's least-work
 * servers: one JSON line per request, rendered and written after the
 * response, all of a turn's lines in one `write`, as the app's sink writes
 * its info lines (src/logger.ts, `later`).
 */
export function requestLog(write: (text: string) => void): (fields: Record<string, unknown>) => void {
  let lines: Record<string, unknown>[] = [];
  const flush = () => {
    write(`${lines.map((fields) => JSON.stringify({ level: 'info', time: new Date().toISOString(), msg: 'request', ...fields })).join('\n')}\n`);
    lines = [];
  };
  return (fields) => {
    if (lines.length === 0) setImmediate(flush);
    lines.push(fields);
  };
}
