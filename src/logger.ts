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

export type LogSink = (line: string, level: LogLevel) => void;

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
    const record = { level, time: new Date().toISOString(), msg: message, ...redactFields(fields ?? {}) };
    sink(scrub(JSON.stringify(record, errorReplacer)), level);
  };

  return {
    debug: (message, fields) => write('debug', message, fields),
    info: (message, fields) => write('info', message, fields),
    warn: (message, fields) => write('warn', message, fields),
    error: (message, fields) => write('error', message, fields),
  };
}

function redactFields(fields: LogFields): LogFields {
  const out: LogFields = {};
  for (const [key, value] of Object.entries(fields)) {
    out[key] = isSensitiveKey(key) ? '[redacted]' : value;
  }
  return out;
}

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    return { name: value.name, message: value.message, stack: value.stack };
  }
  return value;
}
