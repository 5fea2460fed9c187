import http from 'node:http';
import fc from 'fast-check';
import { encodeCursor } from '../../src/http/pagination';

/**
 * Fuzzing from the OpenAPI document (STYLE 12): every operation the app
 * documents is enumerated from `getOpenAPI31Document`, so a new route is
 * fuzzed without anyone listing it. A case is the operation called with each
 * path parameter a real resource or a hostile segment, query parameters
 * omitted, plausible or hostile, and a body that is a schema-shaped example
 * with one mutation (a field dropped, an extra one, one replaced by a hostile
 * value at any depth), or garbage JSON.
 */

type JsonSchema = Record<string, any>;

export interface Operation {
  method: string;
  /** OpenAPI path, `{name}` parameters. */
  path: string;
  /** `GET /orgs/{id}` */
  name: string;
  pathParams: string[];
  queryParams: { name: string; schema: JsonSchema }[];
  headerParams: { name: string; schema: JsonSchema }[];
  body?: { schema: JsonSchema; required: boolean };
  /** The security schemes the operation names (`bearerAuth`, `callbackToken`). */
  security: string[];
}

export function listOperations(doc: { paths?: Record<string, any>; components?: Record<string, any> }): Operation[] {
  const operations: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const [method, op] of Object.entries(item as Record<string, any>)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      const parameters = (op.parameters ?? []) as { name: string; in: string; schema: JsonSchema }[];
      const jsonBody = op.requestBody?.content?.['application/json']?.schema as JsonSchema | undefined;
      operations.push({
        method: method.toUpperCase(),
        path,
        name: `${method.toUpperCase()} ${path}`,
        pathParams: [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!),
        queryParams: parameters.filter((p) => p.in === 'query').map(({ name, schema }) => ({ name, schema })),
        headerParams: parameters.filter((p) => p.in === 'header').map(({ name, schema }) => ({ name, schema })),
        body: jsonBody ? { schema: jsonBody, required: op.requestBody.required !== false } : undefined,
        security: ((op.security ?? []) as Record<string, unknown>[]).flatMap((s) => Object.keys(s)),
      });
    }
  }
  return operations;
}

// ---------------------------------------------------------------------------
// values that are not what JSON.stringify can write: spliced in as raw text

const RAW = '\u0001raw:';
/** A value serialised as the given JSON text (a number too large to be finite, nesting 10,000 deep). */
const raw = (text: string) => `${RAW}${text}\u0001`;

/** JSON.stringify, with `raw(...)` markers replaced by their text. */
export function serialize(value: unknown): string {
  return JSON.stringify(value).replace(/"\\u0001raw:((?:[^"\\]|\\.)*?)\\u0001"/g, (_, text: string) => JSON.parse(`"${text}"`));
}

const deepText = (depth: number, inner = '1') => '{"a":'.repeat(depth) + inner + '}'.repeat(depth);
const deepArrays = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

// ---------------------------------------------------------------------------
// arbitraries

/** Single units, most of them the ones a store cannot hold. */
const hostileUnit = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff', '\u202e', '\ufeff', '\uffff', '%', '/', '\\', "'", '"', '\n') },
  { weight: 5, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
);

export const hostileString: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '',
    ' ',
    '\u0000',
    'a\u0000b',
    '\ud800',
    'x\udfff',
    '\udc00\ud800',
    '%00',
    '../../etc/passwd',
    "' or 1=1 --",
    '{{ run.callbackToken }}',
    '{{ secrets.nope }}',
    'null',
    'NaN',
    '💥',
    'a'.repeat(129),
    'é'.repeat(5000),
    'x'.repeat(200_000),
  ),
  fc.string({ unit: hostileUnit, maxLength: 12 }),
  fc.string({ maxLength: 40 }),
);

export const hostileNumber: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(0, -1, -0, 0.5, 1e6, 2 ** 31, 2 ** 31 - 1, 2 ** 53 + 2, -(2 ** 53), 1e308, -1e308, 5e-324),
  fc.constantFrom(raw('1e999'), raw('-1e999'), raw(`1${'0'.repeat(400)}`), raw('123456789012345678901234567890')),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

const deepValue = fc.oneof(
  fc.constantFrom(63, 64, 65, 100, 10_000).map((depth) => raw(deepText(depth))),
  fc.constantFrom(64, 65, 10_000).map((depth) => raw(deepArrays(depth))),
);

export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: hostileString },
  { weight: 3, arbitrary: hostileNumber },
  { weight: 2, arbitrary: deepValue },
  { weight: 1, arbitrary: fc.constantFrom(true, false, null, [], {}, [null], { '': '' }) },
  { weight: 1, arbitrary: fc.dictionary(hostileString.filter((s) => s.length < 100), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.array(hostileString.filter((s) => s.length < 100), { maxLength: 3 }) },
);

/** Bodies that are not JSON, or JSON no schema expects. */
export const garbageBody: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '',
    '   ',
    '{',
    '[',
    '{"a":',
    'nul',
    'undefined',
    '\u0000',
    '{"a":1}{"b":2}',
    '[1,]',
    "{'a':1}",
    '\ufeff{}',
    'null',
    '[]',
    '"x"',
    '1e999',
    '-0',
    'true',
    '{"__proto__":{"polluted":true}}',
    '{"constructor":{"prototype":{"polluted":true}}}',
    '{"a":"\\ud800"}',
    '{"a\\u0000":1}',
    '{"a":"\\u0000"}',
    deepArrays(10_000),
    deepText(10_000),
  ),
  fc.string({ maxLength: 30 }),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
);

/** A body over the 1 MiB limit (413), sent now and then. */
export const OVERSIZED_BODY = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) });

/** Path segments, already percent-encoded as they go on the wire. */
export const hostileSegment: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '%00',
    'a%00',
    '%2F',
    'a%2Fb',
    '%2E%2E',
    '..',
    '%E0%A4%A',
    '%ED%A0%80',
    '%C0%80',
    '%',
    '%zz',
    '%25',
    '%EF%BF%BF',
    '%F0%9F%92%A5',
    '00000000-0000-0000-0000-000000000000',
    'x'.repeat(3000),
    '%20',
    '+',
  ),
  fc.string({ unit: hostileUnit, minLength: 1, maxLength: 8 }).map(encodeLoosely),
);

/**
 * encodeURIComponent, except that a lone surrogate (which it refuses) is
 * written as the three bytes UTF-8 would use for it: `%ED%A0%80`, exactly
 * what a client with a broken encoder sends.
 */
export function encodeLoosely(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      out += encodeURIComponent(text.slice(i, i + 2));
      i++;
    } else if (code >= 0xd800 && code <= 0xdfff) {
      out += [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
    } else {
      out += encodeURIComponent(text[i]!);
    }
  }
  return out;
}

const forgedCursor: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    'AAAA',
    '!!!',
    'eyJ',
    'bnVsbA',
    encodeCursor(['not-a-date', 'zzz']),
    encodeCursor(['2026-11-21T10:00:00.000Z', '00000000-0000-0000-0000-000000000000']),
    encodeCursor(['2026-11-21T10:00:00.000Z', 'not-a-uuid']),
    encodeCursor([1e308, -1]),
    encodeCursor([-1, -1]),
    encodeCursor(['\u0000', '\u0000']),
    encodeCursor(['x'.repeat(5000), 1]),
    encodeCursor(['99999-01-01T00:00:00Z', 'a']),
    encodeCursor([]),
    encodeCursor(['a', 'b', 'c']),
  ),
  fc.array(fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.double({ noNaN: true })), { maxLength: 3 }).map(encodeCursor),
);

/**
 * RFC 3339 date-times no store takes (DateTimeInput, src/http/openapi.ts),
 * for the fields whose schema says date-time: the year 0000 (Postgres has
 * none), as is and through an offset; the years 1–999 (Postgres prints them
 * in a form Date misreads), to the last millisecond of 999; past 9999 through
 * an offset; a day the calendar does not have.
 */
export const dateTimeEdges = [
  '0000-06-01T00:00:00Z',
  '0001-01-01T00:30:00+01:00',
  '0001-01-01T00:00:00Z',
  '0099-06-01T00:00:00Z',
  '0999-12-31T23:59:59.999Z',
  '9999-12-31T23:30:00-01:00',
  '2026-02-30T00:00:00Z',
];

/** A query value, encoded for the wire. */
export const hostileQueryValue: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('', '%00', 'abc', '0', '-1', '1000000', '1e999', 'Infinity', 'NaN', '1.5', '%ED%A0%80', '%E0%A4%A', '%', '+', 'a%2Fb', 'x'.repeat(5000)),
  forgedCursor,
  hostileString.filter((s) => s.length < 1000).map(encodeLoosely),
);

// ---------------------------------------------------------------------------
// schema-shaped examples

/** Values a body field of this name should carry to reach past the catalog checks. */
export type FieldValues = Record<string, unknown>;

export function resolve(schema: JsonSchema, components: Record<string, JsonSchema>): JsonSchema {
  let current = schema;
  for (let i = 0; i < 20 && typeof current?.$ref === 'string'; i++) {
    current = components[current.$ref.replace('#/components/schemas/', '')] ?? {};
  }
  return current ?? {};
}

/**
 * A plausible value for `schema`: its required fields (and those with an
 * example), enum values, fixture names for fields named in `fields`. Not
 * always valid, only close enough that mutations reach the service.
 */
export function exampleFor(schema: JsonSchema, components: Record<string, JsonSchema>, fields: FieldValues, field = '', depth = 0): unknown {
  const s = resolve(schema, components);
  if (field in fields) return structuredClone(fields[field]);
  if (depth > 6) return {};
  if (s.const !== undefined) return s.const;
  if (Array.isArray(s.enum)) return s.enum[0];
  const variant = s.oneOf ?? s.anyOf;
  if (Array.isArray(variant) && variant.length > 0) return exampleFor(variant[0], components, fields, field, depth + 1);
  if (Array.isArray(s.allOf)) {
    return Object.assign({}, ...s.allOf.map((part: JsonSchema) => exampleFor(part, components, fields, field, depth + 1)));
  }
  if (s.example !== undefined) return structuredClone(s.example);
  const type = Array.isArray(s.type) ? s.type.find((t: string) => t !== 'null') : s.type;
  switch (type) {
    case 'string':
      if (s.format === 'date-time') return '2026-11-21T10:00:00.000Z';
      if (s.format === 'uuid') return '00000000-0000-4000-8000-000000000000';
      if (s.format === 'uri' || s.format === 'url') return 'https://hooks.example.com/fuzz';
      return 'fuzz'.padEnd(s.minLength ?? 1, 'z');
    case 'integer':
    case 'number':
      return s.minimum ?? 1;
    case 'boolean':
      return false;
    case 'array':
      return s.minItems ? [exampleFor(s.items ?? {}, components, fields, '', depth + 1)] : [];
    case 'object':
    default: {
      const out: Record<string, unknown> = {};
      const required = new Set<string>(s.required ?? []);
      for (const [key, sub] of Object.entries((s.properties ?? {}) as Record<string, JsonSchema>)) {
        if (required.has(key) || key in fields || resolve(sub, components).example !== undefined) {
          out[key] = exampleFor(sub, components, fields, key, depth + 1);
        }
      }
      return out;
    }
  }
}

const DATE_TIME = /^\d{4}-\d\d-\d\dT/;

/** How many date-times `example` holds (exampleFor writes one for each date-time field): the `at`s of a dateEdge mutation. */
export const dateTimeCount = (example: unknown) => pathsOf(example).filter((p) => DATE_TIME.test(String(getAt(example, p)))).length;

/** Every path into `value` (`[]` is the value itself), containers and leaves. */
export function pathsOf(value: unknown): (string | number)[][] {
  const paths: (string | number)[][] = [];
  const stack: { v: unknown; p: (string | number)[] }[] = [{ v: value, p: [] }];
  while (stack.length) {
    const { v, p } = stack.pop()!;
    paths.push(p);
    if (Array.isArray(v)) v.forEach((item, i) => stack.push({ v: item, p: [...p, i] }));
    else if (v && typeof v === 'object') for (const [k, item] of Object.entries(v)) stack.push({ v: item, p: [...p, k] });
  }
  return paths;
}

function getAt(value: unknown, path: (string | number)[]): unknown {
  return path.reduce<any>((v, k) => (v == null ? undefined : v[k]), value);
}

function setAt(value: unknown, path: (string | number)[], replacement: unknown): unknown {
  if (path.length === 0) return replacement;
  const parent = getAt(value, path.slice(0, -1)) as any;
  if (parent && typeof parent === 'object') parent[path[path.length - 1]!] = replacement;
  return value;
}

function deleteAt(value: unknown, path: (string | number)[]): unknown {
  if (path.length === 0) return undefined;
  const parent = getAt(value, path.slice(0, -1)) as any;
  if (Array.isArray(parent)) parent.splice(Number(path[path.length - 1]), 1);
  else if (parent && typeof parent === 'object') delete parent[path[path.length - 1]!];
  return value;
}

export type BodyMutation =
  | { kind: 'asIs' }
  | { kind: 'drop'; at: number }
  | { kind: 'extra'; at: number; key: string; value: unknown }
  | { kind: 'replace'; at: number; value: unknown }
  | { kind: 'dateEdge'; at: number; value: string }
  | { kind: 'garbage'; text: string }
  | { kind: 'oversized' }
  | { kind: 'none' };

export const bodyMutation: fc.Arbitrary<BodyMutation> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({ kind: 'asIs' as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('drop' as const), at: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('extra' as const), at: fc.nat(), key: hostileString.filter((s) => s.length < 300), value: hostileValue }) },
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('replace' as const), at: fc.nat(), value: hostileValue }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('dateEdge' as const), at: fc.nat(), value: fc.constantFrom(...dateTimeEdges) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('garbage' as const), text: garbageBody }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'none' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'oversized' as const }) },
);

/** The body text a mutation makes of `example` (undefined: no body at all). */
export function mutateBody(example: unknown, mutation: BodyMutation): string | undefined {
  const value = structuredClone(example);
  const paths = pathsOf(value);
  switch (mutation.kind) {
    case 'asIs':
      return serialize(value);
    case 'none':
      return undefined;
    case 'oversized':
      return OVERSIZED_BODY;
    case 'garbage':
      return mutation.text;
    case 'drop':
      return serialize(deleteAt(value, paths[mutation.at % paths.length]!) ?? null);
    case 'replace':
      return serialize(setAt(value, paths[mutation.at % paths.length]!, mutation.value));
    case 'dateEdge': {
      // one of the example's date-times (exampleFor writes them for date-time fields), if it has any
      const dates = paths.filter((p) => DATE_TIME.test(String(getAt(value, p))));
      return serialize(dates.length ? setAt(value, dates[mutation.at % dates.length]!, mutation.value) : value);
    }
    case 'extra': {
      const containers = paths.filter((p) => {
        const v = getAt(value, p);
        return v !== null && typeof v === 'object' && !Array.isArray(v);
      });
      if (containers.length === 0) return serialize({ [mutation.key]: mutation.value });
      const target = getAt(value, containers[mutation.at % containers.length]!) as Record<string, unknown>;
      target[mutation.key] = mutation.value;
      return serialize(value);
    }
  }
}

// ---------------------------------------------------------------------------
// a real keep-alive client

export interface WireResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** Whether the request went on a socket an earlier request had used. */
  reusedSocket: boolean;
  /** True when the client cut the response short (an event stream). */
  cut: boolean;
}

/**
 * One request on `agent`. An event stream is read up to its headers and then
 * cut (its socket is destroyed): the fuzz only needs its status.
 */
export function wireRequest(
  agent: http.Agent,
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Uint8Array,
): Promise<WireResponse> {
  // framed explicitly: node's client sends a DELETE's body unframed otherwise, which no server can parse
  const framed = body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) };
  return new Promise((resolve, reject) => {
    const request = http.request(`${base}${path}`, { method, agent, headers: framed }, (response) => {
      if (String(response.headers['content-type'] ?? '').startsWith('text/event-stream')) {
        response.destroy();
        resolve({ status: response.statusCode!, headers: response.headers, body: '', reusedSocket: request.reusedSocket, cut: true });
        return;
      }
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({
          status: response.statusCode!,
          headers: response.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          reusedSocket: request.reusedSocket,
          cut: false,
        }),
      );
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}
