/**
 * The least work of an action trigger over HTTP, for the deliveries part
 * of `npm run bench -- http` (./deliveries.ts): a bare `node:http` server
 * doing only what a trigger must, then the same kept whole. It runs as a
 * child process, as the app does: in the bench's own process it took its
 * requests and sent its webhooks without a process in between, on the event
 * loop that also ran the client and the receiver, which the app's trigger
 * cannot (bench/http-results.md, "2026-11-28, fourth").
 *
 * Run by startLeastTrigger (./server.ts) as `node --import tsx
 * bench/http/least-trigger.ts` with DATABASE_URL, PORT, LEAST_ENV_ID,
 * LEAST_ENTITY (the entity's name) and LEAST_RECEIVER_URL. Ready once
 * `GET /healthz` answers, after its two tables exist.
 *
 * A ladder of rungs, each `POST /<rung>` doing what the rung below does and
 * one thing more (LADDER), so that where a trigger's time goes is measured
 * step by step in the same run, not inferred:
 *
 * - `relay`: the request taken, 202, then the receiver fetched. No database:
 *   the trigger's two HTTP crossings alone.
 * - `read`: the entity read first.
 * - `plain`: a run inserted and committed after the read. The
 *   least work of the row.
 * - `outbox`: the guarantees of what is written: the bearer token hashed and
 *   the access epoch read beside the entity (the remembered caller's check),
 *   the run and its job row in one statement (the outbox).
 * - `signed`: the run's callback token (HS256) signed as the Node host signs
 *   it, by fast-jwt (Platform.signHs256), and carried in the payload.
 * - `whole`: a request id, one log line after the response, and the webhook
 *   before the 202, as the app sends it. The least work kept whole.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { pathToFileURL } from 'node:url';
import { createSigner } from 'fast-jwt';
import pg from 'pg';
import { requestLog } from './request-log';
import { APP_POOL_SIZE } from './target';

/** What both write: the runs (and, from the bench's loop, one outcome row per delivery), and the least work's jobs. */
export const LEAST_RUNS_TABLE = 'bench_least_work';
const LEAST_JOBS_TABLE = 'bench_least_job';

/** What a rung does; each rung of LADDER does what the one before it does, and one thing more. */
interface Rung {
  read: boolean;
  insert: boolean;
  outbox: boolean;
  sign: boolean;
  envelope: boolean;
  webhookFirst: boolean;
}

const RELAY: Rung = { read: false, insert: false, outbox: false, sign: false, envelope: false, webhookFirst: false };
const READ: Rung = { ...RELAY, read: true };
const PLAIN: Rung = { ...READ, insert: true };
const OUTBOX: Rung = { ...PLAIN, outbox: true };
const SIGNED: Rung = { ...OUTBOX, sign: true };
const WHOLE: Rung = { ...SIGNED, envelope: true, webhookFirst: true };

/** The rungs by path (`POST /<rung>`), lowest first. */
const LADDER = { relay: RELAY, read: READ, plain: PLAIN, outbox: OUTBOX, signed: SIGNED, whole: WHOLE } satisfies Record<string, Rung>;
export type RungName = keyof typeof LADDER;
const isRung = (name: string): name is RungName => Object.hasOwn(LADDER, name);

/** The two tables the least work writes (the bench's write-per-delivery loop writes the first too, once the child is ready); dropped by dropLeastTables. */
async function createLeastTables(pool: pg.Pool | pg.Client): Promise<void> {
  await pool.query(`create table if not exists ${LEAST_RUNS_TABLE} (id uuid primary key, entity_id uuid not null, body jsonb not null, created_at timestamptz not null default now())`);
  await pool.query(`create table if not exists ${LEAST_JOBS_TABLE} (run_id uuid primary key, due_at timestamptz not null)`);
}

export async function dropLeastTables(pool: pg.Pool | pg.Client): Promise<void> {
  await pool.query(`drop table if exists ${LEAST_RUNS_TABLE}, ${LEAST_JOBS_TABLE}`);
}

async function serve(): Promise<void> {
  const envId = process.env.LEAST_ENV_ID;
  const entityName = process.env.LEAST_ENTITY;
  const receiverUrl = process.env.LEAST_RECEIVER_URL;
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: APP_POOL_SIZE });
  pool.on('error', () => {});
  await createLeastTables(pool);
  const signCallbackToken = createSigner({ key: randomBytes(32), algorithm: 'HS256' });
  const epochs = new Map<string, string>();
  // the log lines go to stdout, which the bench sends to a file, as the app's go to its log file
  const logRequest = requestLog((text) => process.stdout.write(text));
  const send = async (id: string, body: string) => {
    const sent = await fetch(`${receiverUrl}/least`, { method: 'POST', body, headers: { 'content-type': 'application/json', 'webhook-id': id } });
    await sent.arrayBuffer();
  };
  const trigger = async (rung: Rung, req: IncomingMessage, res: ServerResponse) => {
    const started = Date.now();
    const requestId = rung.envelope ? crypto.randomUUID() : undefined;
    const id = crypto.randomUUID();
    let body = JSON.stringify({ vm: entityName, runId: id });
    if (rung.read) {
      const entity = await readEntity(rung.outbox ? (req.headers.authorization ?? '') : undefined);
      const created = Math.floor(Date.now() / 1000);
      const payload = { vm: entity.name as string, runId: id };
      if (rung.insert) await insertRun(rung.outbox, id, entity.id as string, JSON.stringify(payload));
      const callbackToken = rung.sign ? signCallbackToken({ env: envId, sub: id, iat: created, exp: created + 3600 }) : undefined;
      body = JSON.stringify(callbackToken === undefined ? payload : { ...payload, callbackToken });
    }
    const answer = () => {
      res.writeHead(202, requestId ? { 'content-type': 'application/json', 'x-request-id': requestId } : { 'content-type': 'application/json' }).end(JSON.stringify({ id }));
      if (requestId) logRequest({ requestId, method: req.method, path: req.url, status: 202, durationMs: Date.now() - started });
    };
    if (rung.webhookFirst) {
      const sent = send(id, body);
      answer();
      await sent;
    } else {
      answer();
      await send(id, body);
    }
  };
  /** The entity by name; with the caller's token, hashed, and the access epoch read beside it. */
  const readEntity = async (authorization: string | undefined): Promise<Record<string, unknown>> => {
    if (authorization === undefined) {
      const { rows } = await pool.query({ name: 'least_entity', text: 'select * from entities where env_id = $1 and name = $2', values: [envId, entityName] });
      return rows[0];
    }
    const tokenHash = createHash('sha256').update(authorization.replace(/^Bearer /, '')).digest('hex');
    const { rows: [entity] } = await pool.query({
      name: 'least_whole_entity',
      text: 'select e.*, (select value::text from access_epoch where id = 1) as access_epoch from entities e where env_id = $1 and name = $2',
      values: [envId, entityName],
    });
    // the remembered caller's answer stands while the epoch it was read at does (src/auth/plain-callers.ts)
    if (epochs.get(tokenHash) !== entity.access_epoch) epochs.set(tokenHash, entity.access_epoch);
    return entity;
  };
  /** The run, committed; with its job row in the same statement when `withJob`. */
  const insertRun = (withJob: boolean, id: string, entityId: string, body: string) =>
    withJob
      ? pool.query({
          name: 'least_whole_run',
          text: `with run as (insert into ${LEAST_RUNS_TABLE} (id, entity_id, body) values ($1, $2, $3) returning id) insert into ${LEAST_JOBS_TABLE} (run_id, due_at) select id, now() from run`,
          values: [id, entityId, body],
        })
      : pool.query({ name: 'least_run', text: `insert into ${LEAST_RUNS_TABLE} (id, entity_id, body) values ($1, $2, $3)`, values: [id, entityId, body] });
  const server = createServer((req, res) => {
    if (req.method === 'GET') return void res.writeHead(req.url === '/healthz' ? 200 : 404).end();
    req.resume();
    req.on('end', async () => {
      try {
        const name = (req.url ?? '').slice(1);
        if (!isRung(name)) return void res.writeHead(404).end();
        await trigger(LADDER[name], req, res);
      } catch (error) {
        console.error(error);
        if (!res.headersSent) res.writeHead(500).end(String(error));
      }
    });
  });
  server.listen(Number(process.env.PORT), '127.0.0.1');
  process.once('SIGTERM', () => {
    server.closeAllConnections();
    server.close(() => void pool.end().then(() => process.exit(0)));
  });
}

// the bench imports the tables' helpers from here; only the child process serves
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await serve();
