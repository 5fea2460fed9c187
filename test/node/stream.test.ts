import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { eq } from 'drizzle-orm';
import { entityChanges, orgs } from '../../src/db/schema';
import { pruneChanges } from '../../src/stream/feed';
import { createTenantWithRival, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { openSse, type SseClient } from '../support/sse-client';

/**
 * The entity change stream (DECISIONS §6) through a real HTTP server and a
 * real SSE client: events in order, resume with Last-Event-ID without gap or
 * duplicate, filters, scopes, isolation, and the JSON catch-up.
 */

let counter = 0;
const fresh = (base: string) => `${base}-${++counter}`;

describe('entity change stream', () => {
  let api: TestApi;
  let base: string;
  let tenant: Tenant;
  let other: Tenant;
  let owner: string;
  let viewer: string;
  let otherOwner: string;
  let proj: string;
  let env: string;
  const clients: SseClient[] = [];

  const open = async (path: string, options: { token?: string; lastEventId?: string } = {}) => {
    const client = await openSse(`${base}${path}`, { token: options.token ?? viewer, lastEventId: options.lastEventId });
    clients.push(client);
    return client;
  };

  const createEntity = async (name: string, fields: Record<string, unknown> = {}, envPath = env, token = owner) => {
    const response = await api.call('POST', `${envPath}/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name, ...fields } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  };

  beforeAll(async () => {
    // no heartbeat during these tests: every event must come through the publish after its commit
    api = await createTestApi({ hub: { heartbeatMs: 600_000 } });
    base = await api.listen();
    ({ tenant, other, otherOwner, tokens: { owner, viewer } } = await createTenantWithRival(api, { environments: ['staging'] }));
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    for (const [t, token] of [[tenant, owner], [other, otherOwner]] as const) {
      for (const name of ['vm', 'db']) {
        const type = await api.call('POST', `/${t.org.slug}/${t.project.slug}/entity-types`, {
          token,
          body: { kind: 'EntityType', name, states: ['new', 'ready'], initialState: 'new' },
        });
        expect(type.status).toBe(201);
      }
    }
    const cell = await api.call('POST', `${proj}/cells`, {
      token: owner,
      body: { kind: 'Cell', name: 'blue', entityType: 'vm', membership: { mode: 'derived', derivedFrom: { selector: { labels: { color: 'blue' } } } } },
    });
    expect(cell.status, JSON.stringify(cell.body)).toBe(201);
  });
  afterAll(async () => {
    if (process.env.DEBUG_STREAM) console.log(api.logs.filter((l) => l.includes('stream')).join('\n'));
    for (const client of clients) client.close();
    await api.close();
  });

  it('streams created, updated and deleted events with the change sequence as id', async () => {
    const client = await open(`${env}/entities/stream`);
    expect(client.status).toBe(200);
    const name = fresh('web');
    await createEntity(name);
    await api.call('PUT', `${env}/entities/${name}`, { token: owner, body: { state: 'ready' } });
    await api.call('DELETE', `${env}/entities/${name}`, { token: owner });
    const events = await client.waitForEvents(3);
    expect(events.map((e) => e.event)).toEqual(['entity.created', 'entity.updated', 'entity.deleted']);
    const ids = events.map((e) => Number(e.id));
    expect(ids[1]).toBe(ids[0]! + 1);
    expect(ids[2]).toBe(ids[0]! + 2);
    expect(events[0]!.data).toMatchObject({ type: 'entity.created', entity: { name, state: 'new' } });
    expect(events[1]!.data.entity.state).toBe('ready');
    expect(Object.keys(events[2]!.data.entity).sort()).toEqual(['entityTypeName', 'id', 'name']);
    expect(typeof events[2]!.data.at).toBe('string');
  });

  it('a client dropped in the middle of a burst resumes with Last-Event-ID and gets every change once, in order', async () => {
    const first = await open(`${env}/entities/stream`);
    const start = (await api.call('GET', `${env}/changes?limit=1000`, { token: viewer })).body;
    const writes = (async () => {
      for (let i = 0; i < 40; i++) await createEntity(fresh('burst'));
    })();
    const cut = 5 + Math.floor(Math.random() * 20);
    const seen = await first.waitForEvents(cut);
    first.close();
    const resumed = await open(`${env}/entities/stream`, { lastEventId: seen.at(-1)!.id! });
    await writes;
    const all = (await api.call('GET', `${env}/changes?after=${start.next}&limit=1000`, { token: viewer })).body.changes;
    expect(all.length).toBeGreaterThanOrEqual(40);
    const rest = await resumed.waitForEvents(all.length - seen.length);
    const received = [...seen, ...rest].map((e) => Number(e.id));
    expect(received).toEqual(all.map((c: { seq: number }) => c.seq));
  });

  it('frames each event as one HTTP/1.1 chunk, and sends HTTP/1.0 clients the frames bare', async () => {
    // raw bytes, so the framing itself is what is checked (the other tests read through an HTTP client)
    const raw = async (version: '1.0' | '1.1') => {
      const { port } = new URL(base);
      const socket = connect(Number(port), '127.0.0.1');
      let text = '';
      socket.setEncoding('latin1');
      socket.on('data', (data: string) => (text += data));
      socket.write(`GET ${env}/entities/stream HTTP/${version}\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${viewer}\r\n\r\n`);
      await vi.waitFor(() => expect(text).toContain('retry: 2000'));
      const name = fresh('raw');
      await createEntity(name);
      await vi.waitFor(() => expect(text).toMatch(/\r\n\r\n[^]*"type":"entity\.created"[^]*\n\n(\r\n)?$/));
      socket.destroy();
      const [head, body] = [text.slice(0, text.indexOf('\r\n\r\n')), text.slice(text.indexOf('\r\n\r\n') + 4)];
      return { head, body, name };
    };
    const chunked = await raw('1.1');
    expect(chunked.head).toMatch(/transfer-encoding: chunked/i);
    // every chunk is its size line, exactly that many bytes, then CRLF; the event is one of them
    let at = 0;
    const chunks: string[] = [];
    while (at < chunked.body.length) {
      const line = /^([0-9a-f]+)\r\n/.exec(chunked.body.slice(at));
      expect(line, chunked.body.slice(at)).not.toBeNull();
      const size = parseInt(line![1]!, 16);
      const start = at + line![0].length;
      chunks.push(chunked.body.slice(start, start + size));
      expect(chunked.body.slice(start + size, start + size + 2)).toBe('\r\n');
      at = start + size + 2;
    }
    expect(chunks[0]).toBe(': stream open\nretry: 2000\n\n');
    const event = chunks.find((c) => c.includes(`"name":"${chunked.name}"`));
    expect(event).toMatch(/^id: \d+\nevent: entity\.created\ndata: \{.*\}\n\n$/);

    const bare = await raw('1.0');
    expect(bare.head).not.toMatch(/transfer-encoding/i);
    expect(bare.body).toMatch(new RegExp(`^: stream open\\nretry: 2000\\n\\n(: heartbeat\\n\\n)*id: \\d+\\nevent: entity\\.created\\ndata: \\{.*"name":"${bare.name}".*\\}\\n\\n$`));
  });

  it('filters by entityType and by cell; a cell-scoped token sees only its cells', async () => {
    const dbs = await open(`${env}/entities/stream?entityType=db`);
    const blue = await open(`${env}/entities/stream?cell=blue`);
    const scopedToken = await mintToken(api, tenant, { role: 'viewer', cellScopes: ['blue'], as: owner });
    const scoped = await open(`${env}/entities/stream`, { token: scopedToken });
    const red = fresh('red');
    const blueName = fresh('blue');
    const database = fresh('db');
    await createEntity(red, { labels: { color: 'red' } });
    await createEntity(blueName, { labels: { color: 'blue' } });
    await api.call('POST', `${env}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'db', name: database } });
    await api.call('DELETE', `${env}/entities/${blueName}`, { token: owner });
    expect((await dbs.waitForEvents(1)).map((e) => e.data.entity.name)).toEqual([database]);
    expect((await blue.waitForEvents(2)).map((e) => [e.event, e.data.entity.name])).toEqual([
      ['entity.created', blueName],
      ['entity.deleted', blueName],
    ]);
    expect((await scoped.waitForEvents(2)).map((e) => e.data.entity.name)).toEqual([blueName, blueName]);
    // nothing else arrives later either: the red entity and the db never reach them
    await createEntity(fresh('after'), { labels: { color: 'blue' } });
    await scoped.waitForEvents(3);
    expect(scoped.events.map((e) => e.data.entity.name)).not.toContain(red);
    expect(blue.events.map((e) => e.data.entity.name)).not.toContain(database);
  });

  it('never crosses environments or organizations', async () => {
    const staging = await open(`${proj}/envs/staging/entities/stream`);
    const rival = await open(`/${other.org.slug}/${other.project.slug}/envs/default/entities/stream`, { token: otherOwner });
    const mine = await open(`${env}/entities/stream`);
    const name = fresh('here');
    await createEntity(name);
    const theirs = fresh('there');
    await createEntity(theirs, {}, `/${other.org.slug}/${other.project.slug}/envs/default`, otherOwner);
    await mine.waitForEvents(1);
    await rival.waitForEvents(1);
    expect(rival.events.map((e) => e.data.entity.name)).toEqual([theirs]);
    expect(mine.events.map((e) => e.data.entity.name)).toEqual([name]);
    expect(staging.events).toEqual([]);
  });

  it('answers 401 without a token, 404 for another org, 403 for a token pinned elsewhere, 404 for an unknown cell', async () => {
    const noToken = await fetch(`${base}${env}/entities/stream`);
    expect(noToken.status).toBe(401);
    const otherOrg = await fetch(`${base}/${other.org.slug}/${other.project.slug}/envs/default/entities/stream`, {
      headers: { authorization: `Bearer ${viewer}` },
    });
    expect(otherOrg.status).toBe(404);
    const pinned = await mintToken(api, tenant, { role: 'viewer', envName: 'staging', as: owner });
    expect((await fetch(`${base}${env}/entities/stream`, { headers: { authorization: `Bearer ${pinned}` } })).status).toBe(403);
    expectError(await api.call('GET', `${env}/entities/stream?cell=nope`, { token: viewer }), 404, 'not_found');
    expectError(await api.call('GET', `${env}/entities/stream`, { token: viewer, headers: { 'last-event-id': 'abc' } }), 400, 'validation_failed');
  });

  describe('GET ENV/changes', () => {
    it('pages through the log with next, with the same filters', async () => {
      const start = (await api.call('GET', `${env}/changes?limit=1000`, { token: viewer })).body.next;
      const names = [fresh('page'), fresh('page'), fresh('page')];
      for (const name of names) await createEntity(name);
      const first = await api.call('GET', `${env}/changes?after=${start}&limit=2`, { token: viewer });
      expect(first.status).toBe(200);
      expect(first.body.changes.map((c: any) => c.entity.name)).toEqual(names.slice(0, 2));
      const second = await api.call('GET', `${env}/changes?after=${first.body.next}&limit=2`, { token: viewer });
      expect(second.body.changes.map((c: any) => c.entity.name)).toEqual(names.slice(2));
      const caughtUp = await api.call('GET', `${env}/changes?after=${second.body.next}`, { token: viewer });
      expect(caughtUp.body).toEqual({ changes: [], next: second.body.next });
    });

    it('answers 410 resync_required for a point older than the log keeps, and the stream sends resync', async () => {
      const pruneEnv = `${proj}/envs/${fresh('pruned')}`;
      await api.call('POST', `${proj}/envs`, { token: owner, body: { name: pruneEnv.split('/').at(-1) } });
      await createEntity(fresh('old'), {}, pruneEnv);
      await createEntity(fresh('old'), {}, pruneEnv);
      // everything so far is older than a retention of zero
      await pruneChanges(api.db, new Date(Date.now() + 1000), 0);
      expect(await api.db.select().from(entityChanges)).toEqual([]);
      await createEntity(fresh('new'), {}, pruneEnv);
      expectError(await api.call('GET', `${pruneEnv}/changes?after=0`, { token: viewer }), 410, 'resync_required');
      const client = await open(`${pruneEnv}/entities/stream`, { lastEventId: '0' });
      const [event] = await client.waitForEvents(1);
      expect(event).toMatchObject({ event: 'resync' });
      const fromLatest = await api.call('GET', `${pruneEnv}/changes?after=${event!.data.latestSeq}`, { token: viewer });
      expect(fromLatest.status).toBe(200);
    });
  });

  describe('with a 200 ms heartbeat', () => {
    let fast: TestApi;
    let fastBase: string;
    beforeAll(async () => {
      // a second app on the same database, whose hub beats often
      fast = await createTestApi({ hub: { heartbeatMs: 200 }, database: api.testDatabase });
      fastBase = await fast.listen();
    });
    afterAll(() => fast.close());

    it('ends the stream when its token is revoked', async () => {
      const tokenResponse = await fast.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
        token: owner,
        body: { name: fresh('short'), role: 'viewer' },
      });
      const client = await openSse(`${fastBase}${env}/entities/stream`, { token: tokenResponse.body.token });
      clients.push(client);
      const revoked = await fast.call('DELETE', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens/${tokenResponse.body.id}`, {
        token: owner,
      });
      expect(revoked.status).toBe(200);
      await client.ended;
      expect(client.events.at(-1)).toMatchObject({ event: 'end' });
    });

    it('sends heartbeats', async () => {
      const client = await openSse(`${fastBase}${env}/entities/stream`, { token: viewer });
      clients.push(client);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(client.comments).toBeGreaterThan(1);
    });

    it('ends the streams of an environment that is deleted', async () => {
      const name = fresh('gone');
      expect((await fast.call('POST', `${proj}/envs`, { token: owner, body: { name } })).status).toBe(201);
      const client = await openSse(`${fastBase}${proj}/envs/${name}/entities/stream`, { token: viewer });
      clients.push(client);
      expect((await fast.call('DELETE', `${proj}/envs/${name}`, { token: owner })).status).toBe(200);
      await client.ended;
      expect(client.events.at(-1)).toMatchObject({ event: 'end', data: { reason: 'environment deleted' } });
    });

    it('ends the streams of an organization that is suspended', async () => {
      const client = await openSse(`${fastBase}${env}/entities/stream`, { token: viewer });
      clients.push(client);
      await fast.db.update(orgs).set({ suspendedAt: new Date() }).where(eq(orgs.id, tenant.org.id));
      try {
        await client.ended;
        expect(client.events.at(-1)).toMatchObject({ event: 'end', data: { reason: 'organization suspended' } });
      } finally {
        await fast.db.update(orgs).set({ suspendedAt: null }).where(eq(orgs.id, tenant.org.id));
      }
    });
  });
});
