import { exports } from 'cloudflare:workers';
import { createParser } from 'eventsource-parser';
import { afterAll, describe, expect, inject, it } from 'vitest';

/**
 * The entity change stream on the Worker: the request is authorized by the
 * Worker and served by the environment's Durable Object, which reads the
 * change log through the Neon driver. Read with a real SSE parser.
 */

const BASE = 'http://cellplane.test';
const tenant = inject('seededTenant');
const PROJECT = `/${tenant.org}/${tenant.project}`;
const ENV = `${PROJECT}/envs/default`;

async function call(method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${tenant.token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await exports.default.fetch(`${BASE}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

interface Stream {
  status: number;
  events: { id?: string; event?: string; data: any }[];
  next(count: number): Promise<void>;
  close(): Promise<void>;
}

async function openStream(path: string, headers: Record<string, string> = {}): Promise<Stream> {
  const response = await exports.default.fetch(`${BASE}${path}`, { headers: { authorization: `Bearer ${tenant.token}`, ...headers } });
  const events: Stream['events'] = [];
  const parser = createParser({ onEvent: (m) => events.push({ id: m.id, event: m.event, data: JSON.parse(m.data) }) });
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  return {
    status: response.status,
    events,
    async next(count) {
      while (events.length < count) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`stream ended after ${events.length} of ${count} events`);
        parser.feed(value);
      }
    },
    close: () => reader.cancel(),
  };
}

const open: Stream[] = [];
afterAll(async () => {
  for (const stream of open) await stream.close().catch(() => {});
});

describe.sequential('the entity change stream on the Worker', () => {
  it('delivers a create as it commits, then resumes after Last-Event-ID without gap or duplicate', async () => {
    const type = await call('POST', `${PROJECT}/entity-types`, { kind: 'EntityType', name: 'streamed', states: ['a', 'b'], initialState: 'a' });
    expect(type.status).toBe(201);
    const stream = await openStream(`${ENV}/entities/stream?entityType=streamed`);
    open.push(stream);
    expect(stream.status).toBe(200);
    expect((await call('POST', `${ENV}/entities`, { kind: 'Entity', entityType: 'streamed', name: 'first' })).status).toBe(201);
    await stream.next(1);
    expect(stream.events[0]).toMatchObject({ event: 'entity.created', data: { type: 'entity.created', entity: { name: 'first' } } });
    await stream.close();

    // two more changes while nobody listens, then a resume from the first
    expect((await call('PUT', `${ENV}/entities/first`, { state: 'b' })).status).toBe(200);
    expect((await call('POST', `${ENV}/entities`, { kind: 'Entity', entityType: 'streamed', name: 'second' })).status).toBe(201);
    const resumed = await openStream(`${ENV}/entities/stream?entityType=streamed`, { 'last-event-id': stream.events[0]!.id! });
    open.push(resumed);
    await resumed.next(2);
    expect(resumed.events.map((e) => [e.event, e.data.entity.name])).toEqual([
      ['entity.updated', 'first'],
      ['entity.created', 'second'],
    ]);
    expect(resumed.events.map((e) => Number(e.id))).toEqual([Number(stream.events[0]!.id) + 1, Number(stream.events[0]!.id) + 2]);
  });

  it('a cell-scoped token, and a cell filter, see only that cell through the Durable Object', async () => {
    const type = await call('POST', `${PROJECT}/entity-types`, { kind: 'EntityType', name: 'stream-scoped', states: ['a'], initialState: 'a' });
    expect(type.status).toBe(201);
    const cell = await call('POST', `${PROJECT}/cells`, {
      kind: 'Cell',
      name: 'stream-blue',
      entityType: 'stream-scoped',
      membership: { mode: 'derived', derivedFrom: { selector: { labels: { color: 'blue' } } } },
    });
    expect(cell.status, JSON.stringify(cell.body)).toBe(201);
    // seeded by the global setup: a mint through the API would close bootstrap mode, which the foundation tests own
    const scoped = await openStream(`${ENV}/entities/stream`, { authorization: `Bearer ${tenant.scopedToken}` });
    const filtered = await openStream(`${ENV}/entities/stream?cell=stream-blue`);
    open.push(scoped, filtered);
    expect([scoped.status, filtered.status]).toEqual([200, 200]);

    const entity = (name: string, color: string) => ({ kind: 'Entity', entityType: 'stream-scoped', name, labels: { color } });
    for (const [name, color] of [['red-1', 'red'], ['blue-1', 'blue'], ['red-2', 'red'], ['blue-2', 'blue']]) {
      expect((await call('POST', `${ENV}/entities`, entity(name!, color!))).status).toBe(201);
    }
    for (const stream of [scoped, filtered]) {
      await stream.next(2);
      expect(stream.events.map((e) => [e.event, e.data.entity.name])).toEqual([
        ['entity.created', 'blue-1'],
        ['entity.created', 'blue-2'],
      ]);
    }
  });

  it('answers the JSON catch-up and refuses a resume point beyond the log', async () => {
    const page = await call('GET', `${ENV}/changes?limit=2`);
    expect(page.status).toBe(200);
    expect(page.body.changes.length).toBeLessThanOrEqual(2);
    const beyond = await call('GET', `${ENV}/changes?after=999999`);
    expect(beyond.status).toBe(400);
  });
});
