import { spawn } from 'node:child_process';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger';
import { createStdoutSink, LOG_HOLD_LINES, LOG_HOLD_MS } from '../../src/node/log-sink';
import { Secret } from '../../src/secret';

/** A stream that records each write it receives, as one string. */
function recorder(writes: string[], name: string): Writable {
  return new Writable({
    write(chunk, _encoding, done) {
      writes.push(`${name}:${String(chunk)}`);
      done();
    },
  });
}

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the Node host log sink', () => {
  it('writes the info lines of several turns in one write, within LOG_HOLD_MS', async () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ stdout: recorder(writes, 'out'), stderr: recorder(writes, 'err') });
    sink('{"a":1}', 'info');
    sink('{"a":2}', 'debug');
    await nextTurn();
    await nextTurn();
    // a later turn's line joins the same write
    sink('{"a":3}', 'info');
    expect(writes).toEqual([]);
    await sleep(LOG_HOLD_MS + 20);
    expect(writes).toEqual(['out:{"a":1}\n{"a":2}\n{"a":3}\n']);
    // and the next line starts a hold of its own
    sink('{"a":4}', 'info');
    await sleep(LOG_HOLD_MS + 20);
    expect(writes).toEqual(['out:{"a":1}\n{"a":2}\n{"a":3}\n', 'out:{"a":4}\n']);
  });

  it('writes at once when LOG_HOLD_LINES lines are held', () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ stdout: recorder(writes, 'out'), stderr: recorder(writes, 'err') });
    for (let i = 1; i < LOG_HOLD_LINES; i++) sink(`{"n":${i}}`, 'info');
    expect(writes).toEqual([]);
    sink(`{"n":${LOG_HOLD_LINES}}`, 'info');
    expect(writes).toHaveLength(1);
    expect(writes[0]!.trimEnd().split('\n')).toHaveLength(LOG_HOLD_LINES);
  });

  it('writes a warning or error at once, to stderr, after the info lines before it', () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ stdout: recorder(writes, 'out'), stderr: recorder(writes, 'err') });
    sink('{"before":1}', 'info');
    sink('{"bad":1}', 'error');
    sink('{"careful":1}', 'warn');
    expect(writes).toEqual(['out:{"before":1}\n', 'err:{"bad":1}\n', 'err:{"careful":1}\n']);
  });

  it("renders a logger's flat info lines when it writes them, scrubbed, in order with the rest", async () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ stdout: recorder(writes, 'out'), stderr: recorder(writes, 'err') });
    const secret = 's3cr3t-value-of-the-test';
    const logger = createLogger({ secrets: [new Secret(secret)], sink });
    const rendered: string[] = [];
    const later = sink.later!;
    sink.later = (render) => later(() => {
      const line = render();
      rendered.push(line);
      return line;
    });
    logger.info('request', { path: `/x/${secret}`, status: 200 });
    logger.info('nested', { error: new Error(`boom ${secret}`) });
    // a flat line waits to be rendered; one with an object in it is rendered at once, by the replacer
    expect(rendered).toEqual([]);
    logger.error('failed', { status: 500 });
    expect(rendered).toHaveLength(1);
    const [out, err] = writes;
    const lines = out!.slice('out:'.length).trimEnd().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.map((line) => line.msg)).toEqual(['request', 'nested']);
    expect(lines[0]).toMatchObject({ level: 'info', path: '/x/[redacted]', status: 200 });
    expect(new Date(lines[0]!.time as string).toISOString()).toBe(lines[0]!.time);
    expect(out).not.toContain(secret);
    expect(JSON.parse(err!.slice('err:'.length))).toMatchObject({ level: 'error', msg: 'failed', status: 500 });
  });

  it('writes what it holds when the process ends of itself', async () => {
    const script = `
      import { createStdoutSink } from './src/node/log-sink.ts';
      const sink = createStdoutSink();
      sink('{"last":"words"}', 'info');
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: process.cwd() });
    let stdout = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(code).toBe(0);
    expect(stdout).toBe('{"last":"words"}\n');
  });

  it('writes what it still holds when the process dies of an uncaught error', async () => {
    const script = `
      import { createStdoutSink } from './src/node/log-sink.ts';
      const sink = createStdoutSink();
      sink('{"last":"words"}', 'info');
      throw new Error('boom');
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: process.cwd() });
    let stdout = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(code).toBe(1);
    expect(stdout).toBe('{"last":"words"}\n');
  });
});
