/**
 * The floor under `GET ENV/entities/{name}` over HTTP: a bare `node:http`
 * server, a `pg` Pool of the app's size and one named select per request,
 * the row answered as JSON. No routing, authentication, validation or ORM.
 * It runs as a child process, as the app does, so that neither shares an
 * event loop with autocannon's clients.
 *
 * Run by startBare (bench/http/server.ts) as `node --import tsx
 * bench/http/bare.ts` with DATABASE_URL, PORT and BARE_ENV_ID; any path
 * answers the entity named by its last segment. It imports nothing of the
 * app (but the bearer token's reading, for the least work below), so its
 * process holds only what the floor needs.
 *
 * With BARE_FRAMEWORK=hono it is the floor of the architecture instead
 * (ARCHITECTURE.md: one Hono app, served on Node by @hono/node-server): the
 * same pool and select behind a Hono app with the one route
 * `GET /entities/:name`, answered with `c.json`. No middleware: what Hono
 * and its Node adapter cost on their own.
 *
 * With BARE_STATEMENT it is the least work of the app's GET instead, on
 * Hono: the route `GET /:org/:project/envs/:env/entities/:name`, the bearer
 * token read as the app reads it and hashed to what the app stores, and the
 * app's own statements (entityReadQuery and rememberedEntityReadQuery in
 * src/modules/entities/fast-paths.ts: the token, tenancy and grant checks
 * folded into the entity's read, or the access epoch beside it), whose texts
 * and parameters the bench passes in (leastWorkStatements, ./server.ts);
 * the Entity answered as the JSON text Postgres writes. Like the app, it
 * remembers a token's plain answer with the access epoch it was read at
 * (src/auth/plain-callers.ts): then its one statement reads the epoch's row
 * and the entity, not the four tables. Nothing else of the app:
 * no request id, log line, rate limit, input checks, validation or ORM.
 *
 * With BARE_GUARANTEES as well (`all`, or some of id, log, limit and
 * validation, comma-separated), that least work keeps those of the app's
 * per-request guarantees, each in its least form (guaranteeLayers): the
 * GET's floor once it keeps what the issue and SPEC ask of every request.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { Hono, type MiddlewareHandler } from 'hono';
import { requestId } from 'hono/request-id';
import pg from 'pg';
import { z } from 'zod';
import { bearerCredential } from '../../src/auth/caller';
import { requestLog } from './request-log';
import { APP_POOL_SIZE, statementValues, type LeastWorkStatement } from './target';

/** The app's read by name (src/modules/entities/fast-paths.ts) without the token and tenancy it folds in. */
const ENTITY_BY_NAME = 'select * from entities where env_id = $1 and name = $2';

function serve(): void {
  const envId = process.env.BARE_ENV_ID;
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: APP_POOL_SIZE });
  pool.on('error', () => {});
  const byName = (name: string) => pool.query({ name: 'bare_entity_by_name', text: ENTITY_BY_NAME, values: [envId, name] });
  const statement = process.env.BARE_STATEMENT;
  const server = statement
    ? leastWorkServer(pool, JSON.parse(statement) as LeastWorkStatements, guaranteesOf(process.env.BARE_GUARANTEES))
    : process.env.BARE_FRAMEWORK === 'hono'
      ? honoServer(byName)
      : nodeServer(byName);
  server.listen(Number(process.env.PORT), '127.0.0.1');
  process.once('SIGTERM', () => {
    server.closeAllConnections();
    server.close(() => void pool.end().then(() => process.exit(0)));
  });
}

type ByName = (name: string) => Promise<{ rows: unknown[] }>;

function honoServer(byName: ByName): Server {
  const app = new Hono();
  app.get('/entities/:name', async (c) => {
    const { rows } = await byName(c.req.param('name'));
    return rows.length ? c.json(rows[0] as object) : c.json({ error: 'not found', code: 'not_found' }, 404);
  });
  // as serve() in src/node/server.ts builds it, but not yet listening
  return createAdaptorServer({ fetch: app.fetch }) as Server;
}

/** The GET's statements: with the token checked in full, and for a caller remembered with its access epoch. */
export interface LeastWorkStatements {
  inFull: LeastWorkStatement;
  remembered: LeastWorkStatement;
}

/** The placeholders the app's GET statement takes, from a request and what it remembers. */
type GetValues = { tokenHash: string; org: string; project: string; env: string; name: string; now: string; envId: string | null };

function leastWorkServer(pool: pg.Pool, statements: LeastWorkStatements, guarantees: Set<Guarantee>): Server {
  // as the app remembers a token's plain answer (src/auth/plain-callers.ts): its environment and the access epoch it was read at
  const remembered = new Map<string, { envId: string; epoch: string }>();
  type Row = { entity_json: string | null; caller_env_id: string; access_epoch: string | null };
  const send = async (name: string, statement: LeastWorkStatement, request: GetValues) =>
    (await pool.query<Row>({ name, text: statement.text, values: statementValues(statement, request) })).rows[0];
  const app = new Hono();
  for (const layer of guaranteeLayers(guarantees)) app.use('*', layer);
  app.get('/:org/:project/envs/:env/entities/:name', async (c) => {
    if (guarantees.has('validation') && !GetParams.safeParse(c.req.param()).success) return c.json({ error: 'invalid path', code: 'validation_failed' }, 400);
    // hashServiceToken's value (SHA-256, hex), by Node's native hash: the least a Node host could spend on it
    const tokenHash = createHash('sha256').update(bearerCredential(c.req.header('authorization')) ?? '').digest('hex');
    const path = c.req.param();
    const key = JSON.stringify([tokenHash, path.org, path.project, path.env]);
    const known = remembered.get(key);
    const request = { tokenHash, ...path, now: new Date().toISOString(), envId: known?.envId ?? null };
    let row = known && (await send('least_entity_read_remembered', statements.remembered, request));
    if (!row || row.access_epoch !== known?.epoch) {
      row = await send('least_entity_read', statements.inFull, request);
      if (row?.access_epoch) remembered.set(key, { envId: row.caller_env_id, epoch: row.access_epoch });
    }
    if (!row?.entity_json) return c.json({ error: 'not found', code: 'not_found' }, 404);
    return c.body(row.entity_json, 200, { 'content-type': 'application/json' });
  });
  app.get('/healthz', (c) => c.text('ok'));
  return createAdaptorServer({ fetch: app.fetch }) as Server;
}

const GUARANTEES = ['id', 'log', 'limit', 'validation'] as const;
type Guarantee = (typeof GUARANTEES)[number];
/** BARE_GUARANTEES: `all`, or some of GUARANTEES comma-separated; none by default. */
function guaranteesOf(value: string | undefined): Set<Guarantee> {
  if (value === 'all') return new Set(GUARANTEES);
  const named = (value ?? '').split(',').filter(Boolean);
  for (const name of named) if (!(GUARANTEES as readonly string[]).includes(name)) throw new Error(`BARE_GUARANTEES: unknown ${name}`);
  return new Set(named as Guarantee[]);
}

/** The path's parameters, checked as the app's route schema checks them (EntityParams): four non-empty strings. */
const GetParams = z.object({ org: z.string().min(1), project: z.string().min(1), env: z.string().min(1), name: z.string().min(1) });

/**
 * The per-request guarantees of the app, each in its least form:
 * - `id`: Hono's own request-id middleware, as the app uses it (the
 *   `X-Request-Id` header);
 * - `log`: one JSON line per request, rendered and written after the
 *   response, all of a turn's lines in one write, as the app's sink does;
 * - `limit`: a per-credential count in a Map and the two RateLimit headers,
 *   where the app's limiter keeps windows per token hash and per address;
 * - `validation` (in the route): the path's four parameters through a zod
 *   schema, as the app's route schema (EntityParams) checks them.
 */
function guaranteeLayers(guarantees: Set<Guarantee>): MiddlewareHandler[] {
  const logRequest = requestLog((text) => process.stdout.write(text));
  const log: MiddlewareHandler = async (c, next) => {
    const started = Date.now();
    await next();
    logRequest({ requestId: c.get('requestId'), method: c.req.method, path: c.req.path, status: c.res.status, durationMs: Date.now() - started });
  };
  // the bench's limit (BENCH_RATE_LIMIT, passed in by startLeastWork): counted, never reached
  const limitPerMinute = Number(process.env.RATE_LIMIT_PER_MINUTE);
  const windows = new Map<string, { count: number; resetAt: number }>();
  const limit: MiddlewareHandler = async (c, next) => {
    const key = c.req.header('authorization') ?? '';
    const now = Date.now();
    let window = windows.get(key);
    if (!window || window.resetAt <= now) windows.set(key, (window = { count: 0, resetAt: now + 60_000 }));
    window.count++;
    c.header('RateLimit-Policy', `"default";q=${limitPerMinute};w=60`);
    c.header('RateLimit', `"default";r=${limitPerMinute - window.count};t=${Math.ceil((window.resetAt - now) / 1000)}`);
    await next();
  };
  const layers: MiddlewareHandler[] = [];
  if (guarantees.has('id')) layers.push(requestId({ headerName: 'X-Request-Id' }));
  if (guarantees.has('log')) layers.push(log);
  if (guarantees.has('limit')) layers.push(limit);
  return layers;
}

function nodeServer(byName: ByName): Server {
  return createServer((req, res) => {
    const url = req.url ?? '/';
    const name = decodeURIComponent(url.slice(url.lastIndexOf('/') + 1));
    byName(name).then(
      ({ rows }) => {
        const body = rows.length ? JSON.stringify(rows[0]) : '{"error":"not found","code":"not_found"}';
        res.writeHead(rows.length ? 200 : 404, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      },
      (error: unknown) => {
        console.error(error);
        res.writeHead(500).end();
      },
    );
  });
}

serve();
