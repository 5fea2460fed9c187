import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger';
import { Secret } from '../../src/secret';

describe('logger', () => {
  const capture = (secrets: Secret[] = []) => {
    const lines: string[] = [];
    return { lines, logger: createLogger({ level: 'debug', secrets, sink: (line) => lines.push(line) }) };
  };

  it('writes one JSON line per record', () => {
    const { lines, logger } = capture();
    logger.info('hello', { requestId: 'r1' });
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'info', msg: 'hello', requestId: 'r1' });
  });

  it('scrubs configured secret values wherever they appear, including error messages', () => {
    const secret = 'sk-very-secret-value-123';
    const { lines, logger } = capture([new Secret(secret)]);
    logger.error('boom', { error: new Error(`failed with ${secret}`), note: `x${secret}x` });
    expect(lines.join('\n')).not.toContain(secret);
    expect(lines.join('\n')).toContain('[redacted]');
  });

  it('drops the values of sensitive field names but keeps ids', () => {
    const { lines, logger } = capture();
    logger.info('req', { authorization: 'Bearer abc', token: 'cpl_x', password: 'p', tokenId: 'id-1' });
    const record = JSON.parse(lines[0]!);
    expect(record).toMatchObject({ authorization: '[redacted]', token: '[redacted]', password: '[redacted]', tokenId: 'id-1' });
  });

  it('masks the password of any postgres URL', () => {
    const { lines, logger } = capture();
    logger.warn('db', { note: 'postgres://user:pa55word@host:5432/db' });
    expect(lines[0]).not.toContain('pa55word');
  });

  it('honours the level', () => {
    const lines: string[] = [];
    const logger = createLogger({ level: 'warn', sink: (line) => lines.push(line) });
    logger.info('quiet');
    logger.warn('loud');
    expect(lines).toHaveLength(1);
  });
});
