import type { Secret } from './secret';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Field names whose values are dropped whatever they hold (`tokenId` is fine, `token` is not). */
const SENSITIVE_KEY_ENDINGS = ['authorization', 'cookie', 'password', 'secret', 'token', 'privatekey', 'databaseurl', 'encryptionkey'];
/** Field names are few and repeat on every line: each is judged once. */
const sensitiveKeys = new Map<string, boolean>();
const isSensitiveKey = (key: string) => {
  let sensitive = sensitiveKeys.get(key);
  if (sensitive === undefined) {
    const normalized = key.toLowerCase().replace(/[^a-z]/g, '');
    sensitive = SENSITIVE_KEY_ENDINGS.some((ending) => normalized.endsWith(ending));
    // a bounded memo: field names come from code, but a caller could build them from data
    if (sensitiveKeys.size < 1000) sensitiveKeys.set(key, sensitive);
  }
  return sensitive;
};

export type LogSink = ((line: string, level: LogLevel) => void) & {
  /**
   * Takes an info or debug line to render later, before it is written (the
   * Node host's sink writes a turn's lines after the responses that logged
   * them): its JSON is then built off the request's path. Lines whose fields
   * are all primitives only, so nothing they hold can change meanwhile.
   */
  later?: (render: () => string) => void;
};

const consoleSink: LogSink = (line, level) => {
  if (level === 'error' || level === 'warn') console.error(line);
  else console.log(line);
};

/**
 * A JSON-lines logger that cannot print a secret: sensitive field names are
 * replaced wholesale, and every known secret value (the configured ones) is
 * scrubbed from whatever text remains, including error messages and stacks.
 */
export function createLogger(options: {
  level?: LogLevel;
  secrets?: (Secret | undefined)[];
  sink?: LogSink;
}): Logger {
  const threshold = LEVELS[options.level ?? 'info'];
  const sink = options.sink ?? consoleSink;
  const secretValues = (options.secrets ?? [])
    .map((secret) => secret?.reveal())
    .filter((value): value is string => typeof value === 'string' && value.length >= 4)
    // longest first, so a secret containing another is scrubbed whole
    .sort((a, b) => b.length - a.length);

  // most lines hold no secret: each rewrite runs only when its search finds something
  const scrub = (text: string): string => {
    let out = text;
    for (const value of secretValues) if (out.includes(value)) out = out.split(value).join('[redacted]');
    // a connection string's password, whether or not it is a configured secret
    return out.includes('://') ? out.replace(/(postgres(?:ql)?:\/\/[^:/@\s]+:)[^@\s]+@/g, '$1[redacted]@') : out;
  };

  const write = (level: LogLevel, message: string, fields?: LogFields) => {
    if (LEVELS[level] < threshold) return;
    // a replacer takes JSON.stringify off its fast path; a flat record of safe names (the request line) needs none
    const replacer = needsReplacer(fields) ? logReplacer : undefined;
    const time = Date.now();
    const render = () => scrub(JSON.stringify({ level, time: isoTime(time), msg: message, ...fields }, replacer));
    if (!replacer && sink.later && (level === 'info' || level === 'debug')) sink.later(render);
    else sink(render(), level);
  };

  return {
    debug: (message, fields) => write('debug', message, fields),
    info: (message, fields) => write('info', message, fields),
    warn: (message, fields) => write('warn', message, fields),
    error: (message, fields) => write('error', message, fields),
  };
}

/**
 * A line's time as ISO text. Lines come many to a millisecond under load (a
 * turn's lines are rendered together, src/node/log-sink.ts), and the text of
 * the last millisecond is kept: a Date and its toISOString were a third of a
 * request line's rendering.
 */
let lastTimeMs = Number.NaN;
let lastTimeText = '';
function isoTime(ms: number): string {
  if (ms !== lastTimeMs) {
    lastTimeText = new Date(ms).toISOString();
    lastTimeMs = ms;
  }
  return lastTimeText;
}

/** Whether a record's fields hold anything logReplacer would change: a nested value (an error, a sensitive name inside) or a sensitive name. */
function needsReplacer(fields: LogFields | undefined): boolean {
  if (!fields) return false;
  for (const key in fields) {
    const value = fields[key];
    if ((typeof value === 'object' && value !== null) || isSensitiveKey(key)) return true;
  }
  return false;
}

/**
 * Every value of the record passes here: a sensitive field name is redacted
 * at any depth (`{ trigger: { auth: { password } } }` too), and an error
 * becomes the bounded, parameter-free shape of `serializeError`.
 */
function logReplacer(key: string, value: unknown): unknown {
  if (key !== '' && isSensitiveKey(key)) return '[redacted]';
  if (value instanceof Error) return serializeError(value);
  // an `error` that is no Error of this realm is never walked field by field: a driver's error
  // event can carry its connection (pg-pool attaches the client, with its config and cancel key)
  if (key === 'error' && typeof value === 'object' && value !== null) return errorLikeShape(value);
  return value;
}

/**
 * What a log line keeps of an `error` field that is not an Error instance:
 * an Error of another realm (it has a message and a stack) as serializeError
 * shapes any, anything else (an Event, a plain object) by its class and
 * message only.
 */
function errorLikeShape(value: object): SerializedError {
  const { message, stack } = value as { message?: unknown; stack?: unknown };
  if (typeof message === 'string' && typeof stack === 'string') return serializeError(value as Error);
  const type = value.constructor?.name;
  const shape: SerializedError = { name: typeof type === 'string' && type !== '' ? bound(type, 100) : 'Object' };
  if (typeof message === 'string') shape.message = bound(message, ERROR_LOG_LIMITS.messageChars);
  return shape;
}

/** How much of an error a log line keeps: the whole line stays within a few KiB however deep the chain. */
export const ERROR_LOG_LIMITS = {
  /** Errors per line: the error, its causes and aggregated errors together. */
  errors: 5,
  /** Characters of text (messages, statements, frames, names) per line, shared by the whole chain, outermost first. */
  totalChars: 8000,
  messageChars: 500,
  statementChars: 2000,
  /** Stack frames of the outermost error; each cause keeps fewer (its frames are mostly driver internals). */
  frames: 8,
  causeFrames: 3,
  frameChars: 200,
} as const;

/**
 * Fields of a database error (pg's and PGlite's `DatabaseError`, Neon's) or a
 * system error that name things, never hold row values. Everything else is
 * dropped: `params`, and pg's `detail` (`Key (name)=(value) already exists`),
 * `where` (`unnamed portal parameter $1 = '…'`, `JSON data, line 1: …`),
 * `hint`, `internalQuery`, and any field a library adds later.
 */
const SHAPE_FIELDS = ['code', 'severity', 'constraint', 'table', 'column', 'schema', 'dataType', 'routine', 'syscall', 'errno', 'address', 'port'] as const;

/**
 * SQLSTATE classes whose messages name only things (constraints, relations,
 * columns, statement tokens). Every other class, above all 22 (data exception:
 * `invalid input syntax for type uuid: "<the value>"`) and P0 (raised by a
 * function), may quote a row value, so their quoted text is masked.
 */
const SHAPE_ONLY_CLASSES = new Set(['08', '0A', '23', '25', '28', '3D', '3F', '40', '42', '53', '54', '55', '57', '58', 'XX']);

type SerializedError = Record<string, unknown>;

/**
 * An error as a log line may carry it: the shape of what failed, never the
 * values it failed on. A failed statement keeps its SQLSTATE, the names of
 * the constraint, table and column, and its text with `$1` placeholders;
 * drizzle's `params: …` tail, PGlite's `.params` and pg's `detail`/`where`
 * are gone. Causes are walked (bounded), stacks keep their first frames.
 */
export function serializeError(error: Error): SerializedError {
  const params = new Set<string>();
  let budget: number = ERROR_LOG_LIMITS.errors;
  let chars: number = ERROR_LOG_LIMITS.totalChars;
  const take = (text: string, limit: number) => {
    const kept = bound(text, Math.max(0, Math.min(limit, chars)));
    chars -= Math.min(text.length, limit);
    return kept;
  };
  // a parameter may be quoted by any error of the chain, whichever error carries `.params`
  const collectParams = (value: unknown, depth: number) => {
    if (!(value instanceof Error) || depth >= ERROR_LOG_LIMITS.errors) return;
    const carried = (value as { params?: unknown }).params;
    if (Array.isArray(carried)) for (const param of carried) if (typeof param === 'string' && param.length >= 6) params.add(param);
    collectParams(value.cause, depth + 1);
  };
  collectParams(error, 0);

  const serialize = (value: Error, frames: number, parentStatement?: string): SerializedError => {
    budget -= 1;
    const fields = value as unknown as Record<string, unknown>;
    const out: SerializedError = { name: take(errorName(value), 100) };
    const sqlState = typeof fields.code === 'string' && typeof fields.severity === 'string' ? fields.code : undefined;
    const statement = typeof fields.query === 'string' ? fields.query : undefined;
    let message = shapeOfMessage(String(value.message), sqlState, params);
    // drizzle repeats the statement in its message: it is kept once, below
    if (statement && message.includes(statement)) message = message.split(statement).join('[statement]');
    out.message = take(message, ERROR_LOG_LIMITS.messageChars);
    for (const field of SHAPE_FIELDS) {
      const shape = fields[field];
      if (typeof shape === 'string' || typeof shape === 'number') out[field] = typeof shape === 'string' ? take(shape, 100) : shape;
    }
    if (statement !== undefined && statement !== parentStatement) out.statement = take(statement, ERROR_LOG_LIMITS.statementChars);
    const stack = stackFrames(value.stack, frames);
    if (stack && chars > 0) out.stack = take(stack, ERROR_LOG_LIMITS.frames * ERROR_LOG_LIMITS.frameChars);
    if (value.cause instanceof Error && budget > 0) out.cause = serialize(value.cause, ERROR_LOG_LIMITS.causeFrames, statement ?? parentStatement);
    else if (value.cause !== undefined && !(value.cause instanceof Error)) out.cause = `[${typeof value.cause}]`;
    const aggregated = (fields as { errors?: unknown }).errors;
    if (Array.isArray(aggregated)) {
      const errors = aggregated.filter((item): item is Error => item instanceof Error);
      const kept: SerializedError[] = [];
      for (const item of errors) {
        if (budget <= 0) break;
        kept.push(serialize(item, ERROR_LOG_LIMITS.causeFrames, statement ?? parentStatement));
      }
      if (kept.length > 0) out.errors = kept;
      if (errors.length > kept.length) out.errorsOmitted = errors.length - kept.length;
    }
    return out;
  };
  return serialize(error, ERROR_LOG_LIMITS.frames);
}

/** drizzle's `DrizzleQueryError` keeps the name `Error`, pg's `DatabaseError` the protocol's `error`: the class says more. */
function errorName(error: Error): string {
  const type = error.constructor?.name;
  const generic = error.name === 'Error' || error.name === 'error';
  return generic && typeof type === 'string' && type.length > 3 ? type : error.name;
}

function shapeOfMessage(message: string, sqlState: string | undefined, params: Set<string>): string {
  // drizzle: `Failed query: <sql>\nparams: <every parameter>`; a wrapper may have copied it into its own message
  let shape = message.replace(/\nparams: [\s\S]*$/, '');
  for (const param of params) if (shape.includes(param)) shape = shape.split(param).join('[param]');
  // a quoted row value, however many quotes the value itself holds
  if (sqlState !== undefined && !SHAPE_ONLY_CLASSES.has(sqlState.slice(0, 2))) shape = shape.replace(/"[\s\S]*"/, '"[value]"');
  return shape;
}

/** The frames only: a stack's first lines repeat the message, which is already shaped. */
function stackFrames(stack: string | undefined, count: number): string | undefined {
  if (!stack) return undefined;
  const frames = stack
    .split('\n')
    .filter((line) => /^\s+at /.test(line))
    .slice(0, count)
    .map((line) => bound(line.trim(), ERROR_LOG_LIMITS.frameChars));
  return frames.length > 0 ? frames.join('\n') : undefined;
}

function bound(text: string, limit: number): string {
  return text.length <= limit ? text : `${text.slice(0, limit)}…[${text.length - limit} more chars]`;
}
