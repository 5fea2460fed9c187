import type { Output } from '../output';

/**
 * Asks for a secret on the terminal without echoing it: stdin in raw mode,
 * the question on stderr. Enter ends it, Backspace deletes, Ctrl-C or
 * Ctrl-D gives up (an empty answer).
 */
export function readHidden(question: string, out: Output): Promise<string> {
  const stdin = process.stdin;
  out.info(question.trimEnd());
  return new Promise((resolve) => {
    let answer = '';
    const finish = (value: string) => {
      stdin.setRawMode(false);
      stdin.pause();
      stdin.off('data', onData);
      process.stderr.write('\n');
      resolve(value);
    };
    const onData = (chunk: Buffer) => {
      for (const char of chunk.toString('utf8')) {
        if (char === '\r' || char === '\n') return finish(answer);
        if (char === '\u0003' || char === '\u0004') return finish('');
        if (char === '\u007f' || char === '\b') answer = answer.slice(0, -1);
        else answer += char;
      }
    };
    stdin.setRawMode(true);
    stdin.resume();
    stdin.on('data', onData);
  });
}
