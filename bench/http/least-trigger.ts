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
 * LEAST_ENTITY and LEAST_ACTION (names), LEAST_RECEIVER_URL and
 * LEAST_STATEMENTS (the app's, TriggerStatements). Ready once
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
 * - `appread`: the app's own read (src/modules/action-runs/fast-path.ts) in
 *   place of the ladder's: the remembered caller's statement, the access
 *   epoch with the entity and the action, every column of both.
 * - `stored`: the app's own insert in place of the ladder's too: the run the
 *   app stores (every column, its indexes and foreign keys) with its job,
 *   into the app's tables. The app's data path without the app around it.
 *   Its jobs are leased until `infinity`, so no runner of the app takes
 *   them; deleteLeastRuns removes them.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { pathToFileURL } from 'node:url';
import { createSigner } from 'fast-jwt';
import pg from 'pg';
import { requestLog } from './request-log';
import { APP_POOL_SIZE, statementValues, type LeastWorkStatement } from './target';

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
  /** The app's read, not the ladder's. */
  appRead: boolean;
  /** The app's insert and tables, not the ladder's. */
  appWrite: boolean;
}

/** The app's trigger statements, built by the bench (./server.ts, triggerStatements); the read's row is the epoch, then the entity's columns, then the action's. */
export interface TriggerStatements {
  read: LeastWorkStatement & { entityColumns: string[]; actionColumns: string[] };
  insert: LeastWorkStatement;
}

/** Who the runs the app's insert wrote (`stored`) say triggered them: deleteLeastRuns finds them by it. */
const STORED_BY = 'bench:least-work';

const RELAY: Rung = { read: false, insert: false, outbox: false, sign: false, envelope: false, webhookFirst: false, appRead: false, appWrite: false };
const READ: Rung = { ...RELAY, read: true };
const PLAIN: Rung = { ...READ, insert: true };
const OUTBOX: Rung = { ...PLAIN, outbox: true };
const SIGNED: Rung = { ...OUTBOX, sign: true };
const WHOLE: Rung = { ...SIGNED, envelope: true, webhookFirst: true };
const APP_READ: Rung = { ...WHOLE, appRead: true };
const STORED: Rung = { ...APP_READ, appWrite: true };

/** The rungs by path (`POST /<rung>`), lowest first. */
const LADDER = { relay: RELAY, read: READ, plain: PLAIN, outbox: OUTBOX, signed: SIGNED, whole: WHOLE, appread: APP_READ, stored: STORED } satisfies Record<string, Rung>;
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

/** The runs the `stored` rung wrote into the app's table, with their jobs (their foreign key cascades). */
export async function deleteLeastRuns(pool: pg.Pool | pg.Client): Promise<void> {
  await pool.query('delete from action_runs where triggered_by = $1', [STORED_BY]);
}

/** The columns `names` of an array row, from `offset` on, as an object. */
const columnsOf = (row: unknown[], names: string[], offset: number): Record<string, unknown> => Object.fromEntries(names.map((name, i) => [name, row[offset + i]]));

async function serve(): Promise<void> {
  const envId = process.env.LEAST_ENV_ID;
  const entityName = process.env.LEAST_ENTITY;
  const actionName = process.env.LEAST_ACTION;
  const receiverUrl = process.env.LEAST_RECEIVER_URL;
  const statements = JSON.parse(process.env.LEAST_STATEMENTS ?? '') as TriggerStatements;
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: APP_POOL_SIZE });
  pool.on('error', () => {});
  await createLeastTables(pool);
  const {
    rows: [tenancy],
  } = await pool.query<{ org_id: string; project_id: string }>('select org_id, project_id from environments where id = $1', [envId]);
  if (!tenancy) throw new Error(`least-work trigger: no environment ${envId}`);
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
      const authorization = req.headers.authorization ?? '';
      const { entity, action } = rung.appRead ? await readAsApp(authorization) : { entity: await readEntity(rung.outbox ? authorization : undefined), action: {} };
      const created = Math.floor(Date.now() / 1000);
      const payload = { vm: entity.name as string, runId: id };
      if (rung.appWrite) await insertAsApp(id, entity, action);
      else if (rung.insert) await insertRun(rung.outbox, id, entity.id as string, JSON.stringify(payload));
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
  /** The caller's token, hashed, remembered with the access epoch read beside its data: its answer stands while that epoch does (src/auth/plain-callers.ts). */
  const remember = (authorization: string, epoch: string) => {
    const tokenHash = createHash('sha256').update(authorization.replace(/^Bearer /, '')).digest('hex');
    if (epochs.get(tokenHash) !== epoch) epochs.set(tokenHash, epoch);
  };
  /** The entity by name; with the caller's token, hashed, and the access epoch read beside it. */
  const readEntity = async (authorization: string | undefined): Promise<Record<string, unknown>> => {
    if (authorization === undefined) {
      const { rows } = await pool.query({ name: 'least_entity', text: 'select * from entities where env_id = $1 and name = $2', values: [envId, entityName] });
      return rows[0];
    }
    const { rows: [entity] } = await pool.query({
      name: 'least_whole_entity',
      text: 'select e.*, (select value::text from access_epoch where id = 1) as access_epoch from entities e where env_id = $1 and name = $2',
      values: [envId, entityName],
    });
    remember(authorization, entity.access_epoch);
    return entity;
  };
  /** The app's remembered read: the access epoch, the entity and the action, every column of both. */
  const readAsApp = async (authorization: string): Promise<{ entity: Record<string, unknown>; action: Record<string, unknown> }> => {
    const { read } = statements;
    const {
      rows: [row],
    } = await pool.query<unknown[]>({
      name: 'least_app_read',
      text: read.text,
      values: statementValues(read, { envId, projectId: tenancy.project_id, entity: entityName, action: actionName }),
      rowMode: 'array',
    });
    if (!row) throw new Error('least-work trigger: the access epoch has no row');
    remember(authorization, row[0] as string);
    const entity = columnsOf(row, read.entityColumns, 1);
    const action = columnsOf(row, read.actionColumns, 1 + read.entityColumns.length);
    if (entity.id === null || action.id === null) throw new Error(`least-work trigger: no entity ${entityName} or action ${actionName}`);
    return { entity, action };
  };
  /** The run as the app builds it from the entity and the action, and its job, by the app's insert into the app's tables. */
  const insertAsApp = async (id: string, entity: Record<string, unknown>, action: Record<string, unknown>): Promise<void> => {
    const now = new Date();
    const timeoutMinutes = action.timeoutMinutes as number;
    const run = {
      id,
      orgId: tenancy.org_id,
      projectId: tenancy.project_id,
      envId,
      callbackBaseUrl: 'http://127.0.0.1',
      actionId: action.id,
      actionName: action.name,
      entityId: entity.id,
      operationEntityName: entity.name,
      status: 'pending',
      parameters: {},
      recommendations: {},
      triggeredBy: STORED_BY,
      trigger: action.trigger,
      entitySnapshot: { id: entity.id, name: entity.name, properties: entity.properties },
      onSuccess: action.onSuccess,
      onFailure: action.onFailure,
      idempotencyKey: null,
      requestFingerprint: null,
      timeoutMinutes,
      timeoutAt: new Date(now.getTime() + timeoutMinutes * 60_000),
      createdAt: now,
      repo: null,
      prNumber: null,
      prUrl: null,
      headSha: null,
      // held by no runner of the app's, ever
      leaseUntil: 'infinity',
    };
    await pool.query({ name: 'least_app_insert', text: statements.insert.text, values: statementValues(statements.insert, run) });
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
