import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenantWithRival, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { openSse, type SseClient, type SseEvent } from '../support/sse-client';
import { eventually } from '../support/eventually';

/**
 * The change stream's hub through a real HTTP server and real SSE clients
 * (DECISIONS §6), beyond test/node/stream.test.ts: the per-environment
 * connection cap, the heartbeat making up a lost publish, a token's expiry,
 * `?lastEventId=`, and ordering with many writers at once.
 *
 * One database, three apps on it, each with its own hub: `api` (no
 * heartbeat: what reaches its streams came through a publish), `capped` (two
 * streams per environment) and `beating` (a fast heartbeat, and no publish
 * for what `api` writes).
 */

let counter = 0;
const fresh = (base: string) => `${base}-${++counter}`;

async function within<T>(promise: Promise<T>, what: string, timeoutMs = 10_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const ids = (events: SseEvent[]) => events.map((e) => Number(e.id));

/** The first `count` frames of a stream as the bytes carry them (the SSE client parses them), after `lastEventId` if given. */
async function rawFrames(url: string, token: string, lastEventId: string | undefined, count: number): Promise<string[]> {
  const controller = new AbortController();
  const response = await fetch(url, {
    headers: { authorization: `Bearer ${token}`, ...(lastEventId === undefined ? {} : { 'last-event-id': lastEventId }) },
    signal: controller.signal,
  });
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const frames = () => text.split('\n\n').filter((block) => block.startsWith('id: '));
  try {
    while (frames().length < count) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    controller.abort();
  }
  return frames().slice(0, count);
}
const names = (events: SseEvent[]) => events.map((e) => e.data.entity.name as string);
const consecutive = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

describe('the change stream hub', () => {
  let api: TestApi;
  let capped: TestApi;
  let beating: TestApi;
  const bases = new Map<TestApi, string>();
  let tenant: Tenant;
  let owner: string;
  let viewer: string;
  let proj: string;
  const clients: SseClient[] = [];

  const open = async (app: TestApi, path: string, options: { token?: string; lastEventId?: string } = {}) => {
    const client = await openSse(`${bases.get(app)}${path}`, { token: options.token ?? viewer, lastEventId: options.lastEventId });
    clients.push(client);
    return client;
  };

  const newEnv = async () => {
    const name = fresh('env');
    expect((await api.call('POST', `${proj}/envs`, { token: owner, body: { name } })).status).toBe(201);
    return `${proj}/envs/${name}`;
  };

  const createEntity = async (envPath: string, name: string, app = api) => {
    const response = await app.call('POST', `${envPath}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  };

  /** The environment's whole log, from the JSON catch-up. */
  const logOf = async (envPath: string) => {
    const page = await api.call('GET', `${envPath}/changes?limit=1000`, { token: viewer });
    expect(page.status).toBe(200);
    return page.body.changes as { seq: number; type: string; entity: { name: string } }[];
  };

  beforeAll(async () => {
    api = await createTestApi({ hub: { heartbeatMs: 600_000 } });
    capped = await createTestApi({ hub: { maxSubscribersPerEnvironment: 2, heartbeatMs: 200 }, database: api.testDatabase });
    beating = await createTestApi({ hub: { heartbeatMs: 200 }, database: api.testDatabase });
    for (const app of [api, capped, beating]) bases.set(app, await app.listen());
    ({ tenant, tokens: { owner, viewer } } = await createTenantWithRival(api));
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    const type = await api.call('POST', `${proj}/entity-types`, {
      token: owner,
      body: { kind: 'EntityType', name: 'vm', states: ['new', 'ready'], initialState: 'new' },
    });
    expect(type.status).toBe(201);
  });
  afterAll(async () => {
    for (const client of clients) client.close();
    // the sharing apps first: the database belongs to `api`
    await capped.close();
    await beating.close();
    await api.close();
  });

  describe('the connection cap', () => {
    it('answers 503 stream_limit_reached past the cap, counts per environment, and frees the slot of a client that goes away', async () => {
      const env = await newEnv();
      const other = await newEnv();
      const first = await open(capped, `${env}/entities/stream`);
      const second = await open(capped, `${env}/entities/stream`);
      expect([first.status, second.status]).toEqual([200, 200]);

      const refused = await fetch(`${bases.get(capped)}${env}/entities/stream`, { headers: { authorization: `Bearer ${viewer}` } });
      expectError({ status: refused.status, body: await refused.json(), headers: refused.headers }, 503, 'stream_limit_reached');

      // another environment has slots of its own
      const elsewhere = await open(capped, `${other}/entities/stream`);
      expect(elsewhere.status).toBe(200);
      elsewhere.close();

      first.close();
      await eventually(() => capped.hub.subscriberCount() === 1 || undefined, { what: 'the closed streams to be dropped' });
      const third = await open(capped, `${env}/entities/stream`);
      expect(third.status).toBe(200);

      // both open streams are live
      const name = fresh('after-cap');
      await createEntity(env, name, capped);
      expect(names(await second.waitForEvents(1))).toEqual([name]);
      expect(names(await third.waitForEvents(1))).toEqual([name]);
      expect(first.events).toEqual([]);
    });
  });

  it('the heartbeat makes up for a publish that never arrived', async () => {
    const env = await newEnv();
    const client = await open(beating, `${env}/entities/stream`);
    expect(client.status).toBe(200);
    // written through `api`: its hub is told, `beating`'s never is
    const name = fresh('unpublished');
    await createEntity(env, name, api);
    const [event] = await client.waitForEvents(1, 5_000);
    expect(event).toMatchObject({ event: 'entity.created', data: { entity: { name } } });
    expect(beating.hub.subscriberCount()).toBeGreaterThan(0);
  });

  it("ends the stream with event: end when its token expires, and the token opens no other", async () => {
    const env = await newEnv();
    // real time: the expiry timer runs on the system clock; short enough to keep the test quick
    const token = await mintToken(api, tenant, { role: 'viewer', expiresAt: new Date(Date.now() + 2_500).toISOString(), as: owner });
    const client = await open(api, `${env}/entities/stream`, { token });
    expect(client.status).toBe(200);
    const name = fresh('before-expiry');
    await createEntity(env, name);
    expect(names(await client.waitForEvents(1))).toEqual([name]);
    await within(client.ended, 'the stream to end at expiry');
    expect(client.events.at(-1)).toMatchObject({ event: 'end', data: { type: 'end', reason: 'token expired' } });
    expect((await fetch(`${bases.get(api)}${env}/entities/stream`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);
  });

  it("sends a create's frame live exactly as the log replays it, byte for byte", async () => {
    const env = await newEnv();
    const url = `${bases.get(api)}${env}/entities/stream`;
    const before = api.hub.subscriberCount();
    const live = rawFrames(url, viewer, undefined, 3);
    await eventually(() => api.hub.subscriberCount() > before || undefined, { what: 'the stream to open' });
    // the first create of the process's type reads it in a transaction; the next ones are one statement, whose change row the hub is handed
    for (const name of ['one', 'two', 'three']) await createEntity(env, name);
    const frames = await within(live, 'three live frames');
    expect(frames.map((frame) => /^id: (\d+)/.exec(frame)?.[1])).toEqual((await logOf(env)).map((change) => String(change.seq)));
    expect(await within(rawFrames(url, viewer, '0', 3), 'three replayed frames')).toEqual(frames);
  });

  describe('resuming with ?lastEventId=', () => {
    let env: string;
    let seqs: number[];

    beforeAll(async () => {
      env = await newEnv();
      for (const name of ['one', 'two', 'three']) await createEntity(env, name);
      seqs = (await logOf(env)).map((change) => change.seq);
      expect(seqs).toHaveLength(3);
    });

    it('replays the changes after it, as the header does', async () => {
      const byQuery = await open(api, `${env}/entities/stream?lastEventId=${seqs[0]}`);
      const byHeader = await open(api, `${env}/entities/stream`, { lastEventId: String(seqs[0]) });
      for (const client of [byQuery, byHeader]) {
        const events = await client.waitForEvents(2);
        expect(ids(events)).toEqual(seqs.slice(1));
        expect(names(events)).toEqual(['two', 'three']);
      }
    });

    it('the header wins when both are sent; an empty header leaves the query in charge', async () => {
      const both = await open(api, `${env}/entities/stream?lastEventId=0`, { lastEventId: String(seqs[1]) });
      const emptyHeader = await open(api, `${env}/entities/stream?lastEventId=${seqs[1]}`, { lastEventId: '' });
      const name = fresh('four');
      await createEntity(env, name);
      for (const client of [both, emptyHeader]) {
        expect(names(await client.waitForEvents(2))).toEqual(['three', name]);
      }
    });

    it('refuses a value that is not a change sequence: 400 validation_failed', async () => {
      for (const value of ['abc', '-1', '1.5']) {
        expectError(await api.call('GET', `${env}/entities/stream?lastEventId=${value}`, { token: viewer }), 400, 'validation_failed');
      }
    });
  });

  describe('many writers at once', () => {
    it('two environments written concurrently, a stream on each: each gets its own changes, once, in order', async () => {
      const left = await newEnv();
      const right = await newEnv();
      const streams = { [left]: await open(api, `${left}/entities/stream`), [right]: await open(api, `${right}/entities/stream`) };
      const written = { [left]: [] as string[], [right]: [] as string[] };
      await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          [left, right].map(async (env) => {
            const name = fresh(`w${i}`);
            written[env]!.push(name);
            await createEntity(env, name);
          }),
        ).flat(),
      );
      for (const env of [left, right]) {
        // a last change after the burst: anything duplicated or stray would arrive before it
        const sentinel = fresh('sentinel');
        await createEntity(env, sentinel);
        const events = await streams[env]!.waitForEvents(13);
        expect(names(events).at(-1)).toBe(sentinel);
        expect(new Set(names(events).slice(0, -1))).toEqual(new Set(written[env]));
        expect(ids(events)).toEqual((await logOf(env)).map((change) => change.seq));
        expect(ids(events)).toEqual(consecutive(ids(events)[0]!, 13));
      }
    });

    it('30 creates at once in one environment reach a live stream exactly once, ids increasing without gaps', async () => {
      const env = await newEnv();
      const client = await open(api, `${env}/entities/stream`);
      const burst = Array.from({ length: 30 }, () => fresh('burst'));
      await Promise.all(burst.map((name) => createEntity(env, name)));
      const sentinel = fresh('sentinel');
      await createEntity(env, sentinel);
      const events = await client.waitForEvents(31);
      expect(names(events).at(-1)).toBe(sentinel);
      expect(names(events).slice(0, -1).sort()).toEqual([...burst].sort());
      expect(ids(events)).toEqual(consecutive(ids(events)[0]!, 31));
      expect(ids(events)).toEqual((await logOf(env)).map((change) => change.seq));
    });
  });

  // truly concurrent on Postgres; on PGlite the sessions take turns, and every assertion holds all the same
  describe('ordering with writers on several connections and app instances', () => {
    it('two app instances writing one environment at once: every stream, live or joining mid-burst, gets the log in order, once', async () => {
      const env = await newEnv();
      const live = await open(api, `${env}/entities/stream`);
      // `beating` only learns of `api`'s writes at its heartbeat, and `api` of `beating`'s at the next publish of its own
      const onOther = await open(beating, `${env}/entities/stream`);
      const writers = Array.from({ length: 60 }, (_, i) => createEntity(env, fresh('pg'), i % 2 === 0 ? api : beating));
      // streams that join while the writers are at it: a catch-up racing live fan-out
      const joining: SseClient[] = [];
      for (let i = 0; i < 3; i++) {
        await new Promise((resolve) => setTimeout(resolve, 5 * i));
        joining.push(await open(i % 2 === 0 ? api : beating, `${env}/entities/stream?lastEventId=0`));
      }
      const written = await Promise.all(writers);
      // every writer's change, and updates racing the creates' stream position
      await Promise.all(
        written
          .slice(0, 20)
          .map((entity) => api.call('PUT', `${env}/entities/${entity.name}`, { token: owner, body: { state: 'ready' } })),
      );
      const sentinel = fresh('sentinel');
      await createEntity(env, sentinel);
      const log = await logOf(env);
      expect(log.map((change) => change.seq)).toEqual(consecutive(1, 81));
      expect(log.at(-1)!.entity.name).toBe(sentinel);

      for (const client of [live, onOther, ...joining]) {
        const events = await client.waitForEvents(81);
        expect(ids(events)).toEqual(consecutive(1, 81));
        expect(events.map((e) => [e.event, e.data.entity.name])).toEqual(log.map((change) => [change.type, change.entity.name]));
      }
    });

    it('many environments, each written by 15 concurrent requests: no stream sees another environment, none misses one of its own', async () => {
      const envs = await Promise.all(Array.from({ length: 4 }, () => newEnv()));
      const streams = await Promise.all(envs.map((env) => open(api, `${env}/entities/stream`)));
      await Promise.all(envs.flatMap((env) => Array.from({ length: 15 }, () => createEntity(env, fresh(env.split('/').at(-1)!)))));
      for (const [i, env] of envs.entries()) {
        const events = await streams[i]!.waitForEvents(15);
        expect(ids(events)).toEqual(consecutive(1, 15));
        expect(names(events).every((name) => name.startsWith(`${env.split('/').at(-1)}-`))).toBe(true);
      }
    });
  });
});
