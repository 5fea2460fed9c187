import { spawn } from 'node:child_process';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createStdoutSink } from '../../src/node/log-sink';

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

describe('the Node host log sink', () => {
  it('writes the info lines of one turn in one write, after the turn', async () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ stdout: recorder(writes, 'out'), stderr: recorder(writes, 'err') });
    sink('{"a":1}', 'info');
    sink('{"a":2}', 'debug');
    expect(writes).toEqual([]);
    await nextTurn();
    await nextTurn();
    expect(writes).toEqual(['out:{"a":1}\n{"a":2}\n']);
  });

  it('writes a warning or error at once, to stderr, after the info lines before it', () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ stdout: recorder(writes, 'out'), stderr: recorder(writes, 'err') });
    sink('{"before":1}', 'info');
    sink('{"bad":1}', 'error');
    sink('{"careful":1}', 'warn');
    expect(writes).toEqual(['out:{"before":1}\n', 'err:{"bad":1}\n', 'err:{"careful":1}\n']);
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
