import { sql } from 'drizzle-orm';
import { runInNewContext } from 'node:vm';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Db } from '../../src/db/client';
import { createLogger, ERROR_LOG_LIMITS } from '../../src/logger';
import { Secret } from '../../src/secret';
import { createTestDatabase, type TestDatabase } from '../support/node-database';

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

  it("stamps each line with the time it was logged, in ISO text, however many lines share a millisecond", () => {
    vi.useFakeTimers();
    try {
      const { lines, logger } = capture();
      vi.setSystemTime(new Date('2026-11-28T10:00:00.001Z'));
      logger.info('a');
      logger.info('b');
      vi.setSystemTime(new Date('2026-11-28T10:00:00.002Z'));
      logger.info('c');
      vi.setSystemTime(new Date('2026-11-28T10:00:00.001Z'));
      logger.warn('d');
      expect(lines.map((line) => JSON.parse(line).time)).toEqual([
        '2026-11-28T10:00:00.001Z',
        '2026-11-28T10:00:00.001Z',
        '2026-11-28T10:00:00.002Z',
        '2026-11-28T10:00:00.001Z',
      ]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("never walks an `error` field that is no Error of this realm: a driver's event with its connection attached keeps only its class and message", () => {
    const { lines, logger } = capture();
    const connection = { processID: 31606, secretKey: -1692357003, config: { host: '127.0.0.1', user: 'app' } };
    logger.warn('lost', { error: Object.assign(new Event('error'), { client: connection }) });
    logger.warn('lost', { error: runInNewContext('new Error("connection reset")') as object, note: 'another realm' });
    logger.warn('lost', { error: { message: 'socket hang up', client: connection } });
    const records = lines.map((line) => JSON.parse(line));
    expect(records[0].error).toEqual({ name: 'Event' });
    expect(records[1].error).toMatchObject({ name: 'Error', message: 'connection reset' });
    expect(records[1].error.stack).toEqual(expect.any(String));
    expect(records[2].error).toEqual({ name: 'Object', message: 'socket hang up' });
    for (const line of lines) for (const leak of ['secretKey', '1692357003', 'processID', '31606', 'client']) expect(line).not.toContain(leak);
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

/**
 * A log line may carry a failed statement's shape, never its parameters: real
 * statements fail on the test database (PGlite, or the Postgres of
 * TEST_DATABASE_URL) with a secret among their parameters, and the logged
 * error must keep what helps (SQLSTATE, constraint, table, statement text)
 * and lose every value (drizzle's `params`, pg's `detail` and `where`, a
 * value quoted in the message).
 */
describe('logger: database errors', () => {
  const SECRET = 'hunter2-literal-7c1d';
  let testDatabase: TestDatabase;
  let db: Db;

  beforeAll(async () => {
    testDatabase = await createTestDatabase();
    db = testDatabase.database.db;
    await db.execute(sql`create table logger_probe (
      name text constraint logger_probe_name_key unique,
      note text constraint logger_probe_note_check check (note is distinct from 'refused'),
      doc jsonb
    )`);
    // raises with the value quoted, and with a part of it (no parameter verbatim, so only the quoting gives it away)
    await db.execute(sql`create function logger_probe_raise(value text, whole boolean) returns text language plpgsql as $$
      begin
        if whole then raise exception 'refused value %', value; end if;
        raise exception 'refused value "%"', substr(value, 2);
      end $$`);
  });
  afterAll(async () => {
    await testDatabase?.drop();
  });

  /** Runs a statement that must fail and returns the error line the logger wrote about it, parsed, and the raw line. */
  const logFailure = async (statement: () => Promise<unknown>) => {
    const error = await statement().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(DrizzleQueryError);
    // the leak being guarded: the error itself does carry the secret
    expect(`${(error as Error).message} ${JSON.stringify((error as DrizzleQueryError).params)}`).toContain(SECRET);
    const lines: string[] = [];
    createLogger({ sink: (line) => lines.push(line) }).error('unhandled error', { requestId: 'r1', error });
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain(SECRET);
    expect(lines[0]).not.toMatch(/params:|"params"|"detail"|"where"|Key \(|Failing row|portal parameter/);
    return { line: lines[0]!, record: JSON.parse(lines[0]!) };
  };

  it('a unique violation keeps the constraint and the statement, not the key (pg detail)', async () => {
    await db.execute(sql`insert into logger_probe (name) values (${SECRET})`);
    const { record } = await logFailure(() => db.execute(sql`insert into logger_probe (name, note) values (${SECRET}, ${'x'})`));
    expect(record.error).toMatchObject({
      name: 'DrizzleQueryError',
      message: 'Failed query: [statement]',
      statement: 'insert into logger_probe (name, note) values ($1, $2)',
      cause: { code: '23505', constraint: 'logger_probe_name_key', message: 'duplicate key value violates unique constraint "logger_probe_name_key"' },
    });
    expect(record.error.stack).toMatch(/^at /);
  });

  it('a check violation keeps the constraint, not the failing row', async () => {
    const { record } = await logFailure(() => db.execute(sql`insert into logger_probe (name, note) values (${`${SECRET}-row`}, ${'refused'})`));
    expect(record.error.cause).toMatchObject({ code: '23514', constraint: 'logger_probe_note_check', table: 'logger_probe' });
  });

  it('a data exception masks the value Postgres quotes in its message', async () => {
    const { record } = await logFailure(() => db.execute(sql`select ${SECRET}::uuid`));
    expect(record.error.statement).toBe('select $1::uuid');
    expect(record.error.cause).toMatchObject({ code: '22P02', message: 'invalid input syntax for type uuid: "[value]"' });
  });

  it('a NUL in JSON: the message stays, the JSON data Postgres quotes in `where` goes', async () => {
    const { record } = await logFailure(() => db.execute(sql`insert into logger_probe (doc) values (${JSON.stringify({ password: SECRET, note: 'a\u0000b' })}::jsonb)`));
    expect(record.error.cause).toMatchObject({ code: '22P05', message: 'unsupported Unicode escape sequence' });
  });

  it('a NUL in text and a value a function raises: neither message carries a parameter', async () => {
    const nul = await logFailure(() => db.execute(sql`insert into logger_probe (name, note) values (${'a\u0000b'}, ${SECRET})`));
    expect(nul.record.error.cause).toMatchObject({ code: '22021' });
    const whole = await logFailure(() => db.execute(sql`select logger_probe_raise(${SECRET}, true)`));
    expect(whole.record.error.cause).toMatchObject({ code: 'P0001', message: 'refused value [param]' });
    const part = await logFailure(() => db.execute(sql`select logger_probe_raise(${SECRET}, false)`));
    expect(part.line).not.toContain(SECRET.slice(1));
    expect(part.record.error.cause).toMatchObject({ code: 'P0001', message: 'refused value "[value]"' });
  });
});

describe('logger: error size and nested fields', () => {
  it('bounds an error line however long its messages, statements, stacks and causes', () => {
    let error: Error | undefined;
    for (let depth = 0; depth < 50; depth += 1) {
      const next: Error & { query?: string } = new Error(`level ${depth} ${'m'.repeat(20_000)}`, { cause: error });
      next.query = `select ${depth} ${'q'.repeat(20_000)}`;
      next.stack = `Error: ${next.message}\n${Array.from({ length: 200 }, (_, i) => `    at frame${i} (${'f'.repeat(500)}.ts:1:1)`).join('\n')}`;
      error = next;
    }
    const lines: string[] = [];
    createLogger({ sink: (line) => lines.push(line) }).error('boom', { error });
    expect(lines[0]!.length).toBeLessThan(ERROR_LOG_LIMITS.totalChars + 2_000);
    const record = JSON.parse(lines[0]!);
    // the outermost error comes first and whole in its kind: name, a message, a statement, frames
    expect(record.error).toMatchObject({ name: 'Error', message: expect.stringMatching(/^level 49 m+…\[\d+ more chars\]$/) });
    expect(record.error.stack.split('\n')).toHaveLength(ERROR_LOG_LIMITS.frames);
    let causes = 0;
    for (let cause = record.error.cause; cause; cause = cause.cause) causes += 1;
    expect(causes).toBe(ERROR_LOG_LIMITS.errors - 1);
  });

  it('keeps a short cause chain whole, with each code', () => {
    const inner = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED', syscall: 'connect', port: 5432 });
    const lines: string[] = [];
    createLogger({ sink: (line) => lines.push(line) }).error('boom', { error: new Error('delivery failed', { cause: inner }) });
    expect(JSON.parse(lines[0]!).error).toMatchObject({
      message: 'delivery failed',
      cause: { message: 'connect ECONNREFUSED 127.0.0.1:5432', code: 'ECONNREFUSED', syscall: 'connect', port: 5432 },
    });
  });

  it('drops sensitive field names at any depth', () => {
    const lines: string[] = [];
    createLogger({ sink: (line) => lines.push(line) }).info('x', {
      trigger: { auth: { type: 'basic', username: 'u', password: 'nested-pa55word' }, headers: [{ authorization: 'Bearer nested-t0ken' }] },
    });
    expect(lines[0]).not.toMatch(/nested-pa55word|nested-t0ken/);
    expect(JSON.parse(lines[0]!).trigger.auth).toEqual({ type: 'basic', username: 'u', password: '[redacted]' });
  });
});
