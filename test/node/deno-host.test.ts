import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { denoCheck, startDenoProcess } from '../support/deno-process';
import { createDatabaseUrl, usingPostgres } from '../support/node-database';
import { startServerProcess, type ServerProcess } from '../support/node-process';
import { startReceiver, type Receiver } from '../support/receiver';
import { SmtpSink } from '../support/smtp-sink';
import { webhookAction } from '../support/run-fixtures';
import { openSse, type SseEvent } from '../support/sse-client';

/**
 * The Deno host (`npm run deno`, src/deno/server.ts) against `npm start`,
 * both as real processes on fresh databases (Postgres when TEST_DATABASE_URL
 * is set, else embedded PGlite): the same scripted session of the
 * foundation, entity, action-run and stream suites' HTTP cases, and a user's
 * sign-up, is played on each, and the two transcripts (statuses, headers,
 * bodies, what the receiver and the SMTP server were sent, the SSE events),
 * ids, times and tokens normalised, must be equal. So must the per-address
 * rate limit and a stop with an upload in flight. Each host starts once.
 */

const SECRETS = {
  ENCRYPTION_KEY: 'deadbeef'.repeat(8),
  AUTH_SECRET: 'deno-auth-secret-that-must-never-be-logged-0123',
  CODEHOST_APP_ID: '4242',
  CODEHOST_APP_NAME: 'cellplane-test',
  CODEHOST_APP_PRIVATE_KEY: '-----BEGIN PRIVATE KEY-----\nMIIdenoprivatekeymaterialneverlogged\n-----END PRIVATE KEY-----',
  CODEHOST_APP_WEBHOOK_SECRET: 'deno-webhook-secret-value',
};
const RATE_LIMIT = 80;

interface Host {
  name: 'node' | 'deno';
  server: ServerProcess;
  /** Every bearer token the session handled, for the log scan. */
  tokens: string[];
  /** Where its mail goes (SMTP_URL). */
  mail: SmtpSink;
}

interface Step {
  step: string;
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

/** Headers of the connection, not of the API: how each server frames its bytes. */
const TRANSPORT_HEADERS = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length']);

/**
 * Replaces what differs by construction between two fresh servers: ids and
 * tokens by their order of first appearance (so a repeated id must repeat),
 * times, the server's own address, rate-limit clocks.
 */
function normaliser(hostUrl: string) {
  const seen = new Map<string, string>();
  const label = (kind: string, value: string) => {
    if (!seen.has(value)) seen.set(value, `<${kind}${[...seen.values()].filter((v) => v.startsWith(`<${kind}`)).length + 1}>`);
    return seen.get(value)!;
  };
  const text = (value: string) =>
    value
      .replaceAll(hostUrl, '<host>')
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, (id) => label('id', id.toLowerCase()))
      .replace(/cpl_[0-9A-Za-z]{36}/g, (token) => label('token', token))
      .replace(/cpl_[0-9A-Za-z]{8}(?![0-9A-Za-z])/g, (prefix) => label('prefix', prefix))
      .replace(/eyJ[0-9A-Za-z_-]+\.eyJ[0-9A-Za-z_-]+\.[0-9A-Za-z_-]+/g, (jwt) => label('jwt', jwt))
      // a session token, and its signature in the Bearer value and the cookie (plain or URL-encoded)
      .replace(/(?<![0-9A-Za-z])[0-9A-Za-z]{32}(?![0-9A-Za-z])(\.[0-9A-Za-z+/%]+=?)?/g, (_, signed) => `${label('session', _.slice(0, 32))}${signed ? '.<signature>' : ''}`)
      .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<time>')
      // the standing moves with time (windows roll over; on Postgres, instances sync their counts each second)
      .replace(/;r=\d+;t=\d+/, ';r=<n>;t=<s>')
      .replace(/retry in \d+ s/, 'retry in <s> s');
  const value = (input: unknown): unknown => {
    if (typeof input === 'string') return text(input);
    if (Array.isArray(input)) return input.map(value);
    if (input && typeof input === 'object') {
      return Object.fromEntries(
        Object.entries(input).map(([key, v]) => [key, /ms$/i.test(key) && typeof v === 'number' ? '<ms>' : value(v)]),
      );
    }
    return input;
  };
  return {
    value,
    headers: (headers: Headers) =>
      Object.fromEntries(
        [...headers]
          .filter(([name]) => !TRANSPORT_HEADERS.has(name))
          .map(([name, v]) => [name, name === 'x-next-cursor' ? label('cursor', v) : name === 'retry-after' ? '<s>' : text(v)]),
      ),
  };
}

/** The recording client of one host's session. */
function session(host: Host) {
  const steps: Step[] = [];
  const normalise = normaliser(host.server.url);
  const call = async (step: string, method: string, path: string, options: { token?: string; body?: unknown; headers?: Record<string, string> } = {}) => {
    const response = await fetch(`${host.server.url}${path}`, {
      method,
      headers: {
        ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
        ...options.headers,
      },
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
    const raw = await response.text();
    const body = raw && response.headers.get('content-type')?.includes('json') ? JSON.parse(raw) : raw;
    steps.push({ step, status: response.status, headers: normalise.headers(response.headers), body: normalise.value(body) });
    if (typeof body?.token === 'string') host.tokens.push(body.token);
    return { status: response.status, body, headers: response.headers };
  };
  const note = (step: string, value: unknown) => steps.push({ step, status: 0, headers: {}, body: normalise.value(value) });
  return { steps, call, note, normalise };
}

const eventsOf = (events: SseEvent[]) => events.map(({ id, event, data }) => ({ id, event, data }));

type Recorder = ReturnType<typeof session>;
const P = '/acme/platform';
const E = `${P}/envs/default`;

/** The scripted session: what a new user does first, on any host. */
async function playSession(host: Host, receiver: Receiver): Promise<Step[]> {
  const recorder = session(host);
  const { owner, viewer } = await playFoundation(recorder);
  await playEntities(recorder, owner, viewer);
  await playActionRun(recorder, host, receiver, owner);
  await playStream(recorder, host, owner, viewer);
  await playPeople(recorder, host);
  return recorder.steps;
}

/** Bootstrap mode, organizations, projects, environments, tokens; 401, 403, 404. */
async function playFoundation({ call }: Recorder): Promise<{ owner: string; viewer: string }> {
  expect((await call('health', 'GET', '/healthz')).status).toBe(200);
  expect((await call('request head over 16 KiB', 'GET', '/healthz', { headers: { 'x-padding': 'a'.repeat(17_000) } })).status).toBe(431);
  expect((await call('create org', 'POST', '/orgs', { body: { name: 'Acme', slug: 'acme' } })).status).toBe(201);
  expect((await call('create project', 'POST', '/orgs/acme/projects', { body: { name: 'Platform', slug: 'platform' } })).status).toBe(201);
  await call('create other org', 'POST', '/orgs', { body: { name: 'Other', slug: 'other' } });
  await call('create other project', 'POST', '/orgs/other/projects', { body: { name: 'Web', slug: 'web' } });
  await call('envs in bootstrap mode', 'GET', `${P}/envs`);
  const minted = await call('mint owner token', 'POST', '/orgs/acme/projects/platform/tokens', { body: { name: 'root', role: 'owner' } });
  expect(minted.status).toBe(201);
  const owner: string = minted.body.token;
  expect((await call('no token after bootstrap', 'GET', `${P}/envs`)).status).toBe(401);
  await call('bad token', 'GET', `${P}/envs`, { token: `${owner.slice(0, -4)}AAAA` });
  expect((await call('envs', 'GET', `${P}/envs`, { token: owner })).status).toBe(200);
  expect((await call('create env', 'POST', `${P}/envs`, { token: owner, body: { name: 'staging' } })).status).toBe(201);
  await call('duplicate env', 'POST', `${P}/envs`, { token: owner, body: { name: 'staging' } });
  const viewer: string = (await call('mint viewer token', 'POST', '/orgs/acme/projects/platform/tokens', { token: owner, body: { name: 'reader', role: 'viewer' } })).body.token;
  await call('tokens', 'GET', '/orgs/acme/projects/platform/tokens', { token: owner });
  expect((await call('viewer may not create', 'POST', `${P}/envs`, { token: viewer, body: { name: 'qa' } })).status).toBe(403);
  expect((await call('other org', 'GET', '/other/web/envs', { token: owner })).status).toBe(404);
  await call('other org by name', 'GET', '/orgs/other', { token: owner });
  return { owner, viewer };
}

/** An entity type; entities created, read, listed by cursor, refused (400), updated, deleted. */
async function playEntities({ call }: Recorder, owner: string, viewer: string): Promise<void> {
  const type = { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' };
  expect((await call('create entity type', 'POST', `${P}/entity-types`, { token: owner, body: type })).status).toBe(201);
  for (const name of ['web-1', 'web-2', 'web-3']) {
    const body = { kind: 'Entity', entityType: 'vm', name, labels: { tier: 'web' } };
    expect((await call(`create ${name}`, 'POST', `${E}/entities`, { token: owner, body })).status).toBe(201);
  }
  await call('get entity', 'GET', `${E}/entities/web-1`, { token: viewer });
  const page = await call('list, first page', 'GET', `${E}/entities?limit=2`, { token: viewer });
  expect(page.headers.get('x-next-cursor')).toBeTruthy();
  await call('list, next page', 'GET', `${E}/entities?limit=2&cursor=${encodeURIComponent(page.headers.get('x-next-cursor')!)}`, { token: viewer });
  const invalid = await call('invalid entity', 'POST', `${E}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name: 'Not A Name!' } });
  expect(invalid.status).toBe(400);
  expect(invalid.body).toMatchObject({ error: expect.any(String), code: 'validation_failed' });
  await call('unknown type', 'POST', `${E}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'db', name: 'db-1' } });
  await call('update entity', 'PUT', `${E}/entities/web-2`, { token: owner, body: { state: 'running', labels: { tier: 'edge' } } });
  await call('delete entity', 'DELETE', `${E}/entities/web-3`, { token: owner });
  await call('deleted entity', 'GET', `${E}/entities/web-3`, { token: owner });
  await call('viewer may not delete', 'DELETE', `${E}/entities/web-2`, { token: viewer });
}

/** A run delivered to the receiver and completed by its signed callback; a local webhook URL refused. */
async function playActionRun({ call, note }: Recorder, host: Host, receiver: Receiver, owner: string): Promise<void> {
  await call('create action', 'POST', `${P}/actions`, { token: owner, body: webhookAction('deploy', `${receiver.url}/hook`) });
  const triggered = await call('trigger', 'POST', `${E}/entities/web-1/actions/deploy`, { token: owner, body: { parameters: { size: 'large' } } });
  expect(triggered.status).toBe(202);
  const runId: string = triggered.body.id;
  const delivery = (await receiver.waitForRequests(receiver.requests.length + 1)).find((r) => r.headers['webhook-id'] === runId)!;
  const { callbackUrl, callbackToken } = JSON.parse(delivery.body);
  host.tokens.push(callbackToken);
  note('delivery received', {
    method: delivery.method,
    url: delivery.url,
    body: JSON.parse(delivery.body),
    headers: Object.keys(delivery.headers).sort(),
    contentType: delivery.headers['content-type'],
    userAgent: delivery.headers['user-agent'],
  });
  // the attempt is recorded after the receiver answered
  for (let i = 0; i < 100 && (await getRunStatus(host, runId, owner)) === 'pending'; i++) await new Promise((r) => setTimeout(r, 50));
  await call('run delivered', 'GET', `${E}/action-runs/${runId}`, { token: owner });
  const callbackPath = new URL(callbackUrl).pathname;
  await call('callback without token', 'POST', callbackPath, { body: { status: 'succeeded' } });
  const result = { status: 'succeeded', output: { url: 'https://web-1.example.com' } };
  expect((await call('callback', 'POST', callbackPath, { token: callbackToken, body: result })).status).toBe(200);
  await call('run completed', 'GET', `${E}/action-runs/${runId}`, { token: owner });
  await call('entity moved', 'GET', `${E}/entities/web-1`, { token: owner });
  // the outbound guard: a local name that OUTBOUND_ALLOWED_HOSTS does not list is refused at the trigger
  const local = webhookAction('local', `http://localhost:${new URL(receiver.url).port}/hook`);
  await call('create action to localhost', 'POST', `${P}/actions`, { token: owner, body: local });
  expect((await call('trigger refused', 'POST', `${E}/entities/web-2/actions/local`, { token: owner })).status).toBe(400);
  await call('runs', 'GET', `${E}/action-runs`, { token: owner });
}

/** The SSE stream: its head, a change seen live, one missed while away resumed with Last-Event-ID, 401. */
async function playStream({ call, note, steps, normalise }: Recorder, host: Host, owner: string, viewer: string): Promise<void> {
  const stream = `${host.server.url}${E}/entities/stream`;
  // the Node host writes a stream straight to its socket, Deno as a web stream: the heads must still agree
  const opening = new AbortController();
  const head = await fetch(stream, { headers: { authorization: `Bearer ${viewer}` }, signal: opening.signal });
  steps.push({ step: 'stream head', status: head.status, headers: normalise.headers(head.headers), body: '' });
  opening.abort();
  const live = await openSse(stream, { token: viewer });
  await call('create web-4', 'POST', `${E}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name: 'web-4' } });
  note('live event', eventsOf(await live.waitForEvents(1)));
  live.close();
  await call('create web-5 while away', 'POST', `${E}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name: 'web-5' } });
  const resumed = await openSse(stream, { token: viewer, lastEventId: live.events[0]!.id });
  note('resumed event', eventsOf(await resumed.waitForEvents(1)));
  resumed.close();
  expect(resumed.events[0]!.data).toMatchObject({ type: 'entity.created', entity: { name: 'web-5' } });
  const unauthorised = await fetch(stream);
  note('stream without token', { status: unauthorised.status, body: await unauthorised.json() });
  await call('changes', 'GET', `${E}/changes?limit=100`, { token: viewer });
}

/** A user signs up (its verification mail goes out over SMTP), works with the session as a Bearer value, signs in. */
async function playPeople({ call, note }: Recorder, host: Host): Promise<void> {
  const ann = { email: 'ann@example.com', password: 'correct horse battery', name: 'Ann' };
  const annSession = (await call('sign up', 'POST', '/api/auth/sign-up/email', { body: ann })).headers.get('set-auth-token')!;
  host.tokens.push(annSession);
  expect((await call('org of a user', 'POST', '/orgs', { token: annSession, body: { name: 'Ann Co', slug: 'ann-co' } })).status).toBe(201);
  await call('sign in, wrong password', 'POST', '/api/auth/sign-in/email', { body: { email: ann.email, password: 'wrong password' } });
  expect((await call('sign in', 'POST', '/api/auth/sign-in/email', { body: { email: ann.email, password: ann.password } })).status).toBe(200);
  note('verification mail', await host.mail.waitFor((mail) => mail.envelope.to.includes(ann.email)));
}

async function getRunStatus(host: Host, id: string, token: string): Promise<string> {
  const response = await fetch(`${host.server.url}${E}/action-runs/${id}`, { headers: { authorization: `Bearer ${token}` } });
  return ((await response.json()) as { status: string }).status;
}

/** GET from a given loopback address: a second client, as far as the server can tell. */
function getFrom(address: string, url: string): Promise<{ status: number; headers: Headers; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { localAddress: address, agent: false }, (res) => {
      let text = '';
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers.set(name, value);
        resolve({ status: res.statusCode!, headers, body: JSON.parse(text) });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Spends 127.0.0.1's budget of unauthenticated requests: its refusal, and
 * whether 127.0.0.2 is refused too (it must not be: its budget is its own).
 */
async function exhaustOneAddress(host: Host): Promise<{ refusal: Step; secondAddressRefused: boolean }> {
  const { normalise } = session(host);
  const url = `${host.server.url}/orgs/acme`;
  let status = 0;
  // a window can roll over mid-way: keep asking until the budget is spent
  for (let i = 0; i < 3 * RATE_LIMIT && status !== 429; i++) status = (await getFrom('127.0.0.1', url)).status;
  const refused = await getFrom('127.0.0.1', url);
  const second = await getFrom('127.0.0.2', url);
  return {
    refusal: { step: '127.0.0.1 past its budget', status: refused.status, headers: normalise.headers(refused.headers), body: normalise.value(refused.body) },
    secondAddressRefused: second.status === 429,
  };
}

function expectNoSecrets(output: string, host: Host): void {
  for (const value of [...Object.values(SECRETS).filter((v) => v.length > 12), 'MIIdenoprivatekeymaterialneverlogged', ...host.tokens]) {
    expect(output, `${host.name} host output leaks a secret`).not.toContain(value);
  }
}

/**
 * A request whose head and the first bytes of its body are sent now, the
 * rest on `finish`, which resolves with the status line of the answer (empty
 * if the connection was closed without one).
 *
 * It resolves once the host is handling the request: it asks
 * `Expect: 100-continue` and waits for the interim `100 Continue`, which
 * Node writes as it dispatches the request and Deno as the handler starts
 * reading the body. Without that the signal could reach a loaded host
 * before it had accepted the connection, and no host answers a request it
 * never received.
 */
function startUpload(url: string, path: string, body: string): Promise<{ finish(): Promise<string> }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    // from an address of its own: 127.0.0.1's budget may be spent (exhaustOneAddress)
    const socket = connect({ port: Number(port), host: hostname, localAddress: '127.0.0.3' }, () => {
      const head =
        `POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n`;
      socket.write(head + body.slice(0, 5));
      // status lines as they come: the interim 100, then the answer ('' when the connection closes without one)
      let received = '';
      const statusLines: string[] = [];
      const waiting: ((line: string) => void)[] = [];
      const nextStatusLine = () => new Promise<string>((done) => (statusLines.length ? done(statusLines.shift()!) : waiting.push(done)));
      const push = (line: string) => (waiting.length ? waiting.shift()!(line) : statusLines.push(line));
      socket.on('data', (chunk) => {
        received += String(chunk);
        let end: number;
        while ((end = received.indexOf('\r\n\r\n')) >= 0) {
          push(received.slice(0, received.indexOf('\r\n')));
          // an interim answer has no body; the final one's body is not needed
          received = received.slice(end + 4);
        }
      });
      socket.once('close', () => push(''));
      nextStatusLine().then((interim) => {
        if (!interim.startsWith('HTTP/1.1 100')) return reject(new Error(`expected 100 Continue, got ${JSON.stringify(interim)}`));
        resolve({
          finish: async () => {
            socket.write(body.slice(5));
            const statusLine = await nextStatusLine();
            socket.destroy();
            return statusLine;
          },
        });
      }, reject);
    });
    socket.once('error', reject);
  });
}

/**
 * SIGTERM to the host's process group (npm and the Deno host, which gets it
 * twice: directly and through npm's relay) with an upload under way,
 * finished once the host is stopping: it is still answered.
 */
async function stopDuringUpload(host: Host): Promise<{ code: number | null; answer: string }> {
  const signIn = JSON.stringify({ email: 'nobody@example.com', password: 'not a password of anyone' });
  const upload = await startUpload(host.server.url, '/api/auth/sign-in/email', signIn);
  const exited = host.server.stop('SIGTERM', { group: true });
  while (!host.server.output().includes('"msg":"shutting down"')) await new Promise((r) => setTimeout(r, 20));
  // the stop waits on the upload while npm's relay of the signal arrives
  await new Promise((r) => setTimeout(r, 500));
  const answer = await upload.finish();
  return { code: await exited, answer };
}

describe('npm run deno (the Deno host as a process), against npm start', () => {
  const dirs: string[] = [];
  const databases: { close(): Promise<void> }[] = [];
  let receiver: Receiver;
  let node: Host;
  let deno: Host;
  let typecheck: ReturnType<typeof denoCheck>;

  /** A fresh database: one on TEST_DATABASE_URL's server, else an embedded PGlite in a new folder. */
  const databaseEnv = async (): Promise<Record<string, string>> => {
    if (usingPostgres()) {
      const database = await createDatabaseUrl();
      databases.push(database);
      return { DATABASE_URL: database.url };
    }
    const dir = mkdtempSync(join(tmpdir(), 'cellplane-deno-'));
    dirs.push(dir);
    return { CELLPLANE_DATA_DIR: dir };
  };

  beforeAll(async () => {
    // alongside the hosts' start: on a cold cache it takes longer than both
    typecheck = denoCheck();
    receiver = await startReceiver({ status: 202 });
    const env = { ...SECRETS, OUTBOUND_ALLOWED_HOSTS: '127.0.0.1', RATE_LIMIT_PER_MINUTE: String(RATE_LIMIT), LOG_LEVEL: 'debug' };
    const [nodeEnv, denoEnv] = await Promise.all([databaseEnv(), databaseEnv()]);
    const [nodeMail, denoMail] = await Promise.all([SmtpSink.start(), SmtpSink.start()]);
    const [nodeServer, denoServer] = await Promise.all([
      startServerProcess({ ...env, ...nodeEnv, SMTP_URL: nodeMail.url }),
      startDenoProcess({ ...env, ...denoEnv, SMTP_URL: denoMail.url }, { npm: true }),
    ]);
    node = { name: 'node', server: nodeServer, tokens: [], mail: nodeMail };
    deno = { name: 'deno', server: denoServer, tokens: [], mail: denoMail };
  });
  afterAll(async () => {
    await Promise.all([node?.server.stop('SIGKILL'), deno?.server.stop('SIGKILL')]);
    await Promise.all([receiver?.close(), node?.mail.close(), deno?.mail.close()]);
    await Promise.all(databases.map((database) => database.close()));
    dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true }));
  });

  it('type-checks under Deno (deno check src/deno/server.ts)', async () => {
    const { code, output } = await typecheck;
    expect(code, output).toBe(0);
  }, 120_000);

  it('logs the same start line', () => {
    const listening = (host: Host) => JSON.parse(host.server.output().split('\n').find((line) => line.includes('"cellplane listening"'))!);
    const [fromNode, fromDeno] = [listening(node), listening(deno)];
    expect(Object.keys(fromDeno)).toEqual(Object.keys(fromNode));
    expect(fromDeno.url).toBe(deno.server.url);
    expect(fromDeno.database.replace(/ in .*/, '')).toBe(fromNode.database.replace(/ in .*/, ''));
  });

  it("answers a new user's session (foundation, entities, an action run, the stream, people, mail) exactly as npm start does", async () => {
    const fromNode = await playSession(node, receiver);
    const fromDeno = await playSession(deno, receiver);
    expect(fromDeno).toEqual(fromNode);
  });

  it('limits unauthenticated requests per client address, as npm start does', async () => {
    const fromNode = await exhaustOneAddress(node);
    const fromDeno = await exhaustOneAddress(deno);
    expect(fromDeno).toEqual(fromNode);
    expect(fromDeno).toMatchObject({ refusal: { status: 429, body: { code: 'rate_limited' } }, secondAddressRefused: false });
  });

  it('stops cleanly on SIGTERM sent to its process group (through npm too), answering the upload in flight, and never logs the configured secrets', async () => {
    const [fromNode, fromDeno] = await Promise.all([stopDuringUpload(node), stopDuringUpload(deno)]);
    expect(fromDeno).toEqual(fromNode);
    // read to its end and answered: no such user
    expect(fromDeno).toEqual({ code: 0, answer: 'HTTP/1.1 401 Unauthorized' });
    expect(deno.server.output()).toContain('"msg":"stopped"');
    expectNoSecrets(deno.server.output(), deno);
    expectNoSecrets(node.server.output(), node);
  });
});
