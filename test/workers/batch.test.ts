import { exports } from 'cloudflare:workers';
import { createParser } from 'eventsource-parser';
import { afterAll, describe, expect, inject, it } from 'vitest';

/**
 * POST ENV/batch (src/modules/batch, docs/batch.md) through the real Worker
 * entry in workerd, against the Neon driver: one transaction per request
 * over the driver's WebSocket, set-based statements with jsonb parameters,
 * a dry run rolled back, a refusal rolled back, and the change log and its
 * live stream (the environment's Durable Object, told after commit).
 *
 * Uses the tenant the global setup seeded, in an environment of its own
 * (`batch-worker`), so the other files' changes in `default` do not land in
 * this file's log. Every batch's writes are tracked in `written`, and the
 * last test checks the whole log against it.
 *
 * Within one batch the log's order is the implementation's (deletes, then
 * updates, then creates in name order; docs/batch.md promises none), so a
 * batch's changes are compared as a set, their sequences as a run.
 */

const BASE = 'http://cellplane.test';
const tenant = inject('seededTenant');
const PROJECT = `/${tenant.org}/${tenant.project}`;
const ENV_NAME = 'batch-worker';
const ENV = `${PROJECT}/envs/${ENV_NAME}`;
const SOURCE = 'terraform:worker-lineage';
const VM = 'batch-vm';
const HOST = 'batch-host';
const RUNS_ON = 'batch-runs-on';

async function call(method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${tenant.token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await exports.default.fetch(`${BASE}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

async function batch(body: Record<string, unknown>) {
  return call('POST', `${ENV}/batch`, { source: SOURCE, ...body });
}

async function ok(body: Record<string, unknown>): Promise<any> {
  const response = await batch(body);
  expect(response.status, JSON.stringify(response.body)).toBe(200);
  return response.body;
}

const getEntity = (name: string) => call('GET', `${ENV}/entities/${encodeURIComponent(name)}`);

interface Change {
  seq: number;
  type: string;
  entity: any;
}

/** The changes after `after` (one page is plenty here) and the page's `next`. */
async function changesAfter(after: number): Promise<{ changes: Change[]; next: number }> {
  const response = await call('GET', `${ENV}/changes?after=${after}&limit=1000`);
  expect(response.status, JSON.stringify(response.body)).toBe(200);
  return response.body;
}

/** The last sequence of this environment's log. */
const lastSeq = async () => (await changesAfter(0)).next;

async function entityNames(): Promise<string[]> {
  const response = await call('GET', `${ENV}/entities?limit=1000`);
  expect(response.status).toBe(200);
  return response.body.map((e: { name: string }) => e.name).sort();
}

async function links(): Promise<{ from: string; to: string; properties: unknown }[]> {
  const response = await call('GET', `${ENV}/relationships?relationshipType=${RUNS_ON}&limit=1000`);
  expect(response.status).toBe(200);
  const names = new Map<string, string>();
  for (const name of await entityNames()) names.set((await getEntity(name)).body.id, name);
  return response.body
    .map((r: any) => ({ from: names.get(r.fromEntityId)!, to: names.get(r.toEntityId)!, properties: r.properties }))
    .sort((a: any, b: any) => `${a.from}>${a.to}`.localeCompare(`${b.from}>${b.to}`));
}

type Written = [type: string, name: string];

/** Every change this file expects in the log: one list per request that wrote, in request order. */
const written: Written[][] = [];

const byName = (a: Written, b: Written) => a[1].localeCompare(b[1]) || a[0].localeCompare(b[0]);

/** One request's changes: the ones expected, in any order, with consecutive sequences right after `after`. */
function expectOneRequest(changes: Change[], after: number, expected: Written[]) {
  expect(changes.map((c) => c.seq)).toEqual(expected.map((_, i) => after + i + 1));
  expect(changes.map((c): Written => [c.type, c.entity.name]).sort(byName)).toEqual([...expected].sort(byName));
}

const FIRST_BATCH = {
  observedAt: '2026-03-01T10:00:00.000Z',
  entities: [
    { entityType: VM, name: 'web-1', properties: { size: 'small' }, labels: { team: 'web' } },
    { entityType: VM, name: 'web-2', state: 'running', properties: { size: 'large', cpus: 4 } },
    { entityType: VM, name: 'web-3' },
    { entityType: HOST, name: 'host-a' },
  ],
  relationships: [
    { relationshipType: RUNS_ON, from: 'web-1', to: 'host-a' },
    { relationshipType: RUNS_ON, from: 'web-2', to: 'host-a', properties: { weight: 3 } },
  ],
};

interface Stream {
  status: number;
  events: { id?: string; event?: string; data: any }[];
  next(count: number): Promise<void>;
  close(): Promise<void>;
}

/** An SSE subscription read with a real parser, as test/workers/stream.test.ts does. */
async function openStream(path: string): Promise<Stream> {
  const response = await exports.default.fetch(`${BASE}${path}`, { headers: { authorization: `Bearer ${tenant.token}` } });
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

describe.sequential('POST ENV/batch on the Worker', () => {
  it('defines the catalog and an environment of its own', async () => {
    const env = await call('POST', `${PROJECT}/envs`, { name: ENV_NAME });
    expect(env.status, JSON.stringify(env.body)).toBe(201);
    const made = async (path: string, body: unknown) => {
      const response = await call('POST', `${PROJECT}/${path}`, body);
      expect(response.status, JSON.stringify(response.body)).toBe(201);
    };
    await made('entity-types', {
      kind: 'EntityType',
      name: VM,
      states: ['provisioning', 'running', 'stopped'],
      initialState: 'provisioning',
      properties: [
        { name: 'size', type: 'string', enum: ['small', 'large'] },
        { name: 'cpus', type: 'integer', default: 1 },
      ],
      constraints: [
        { kind: 'transition', from: 'provisioning', to: ['running'] },
        { kind: 'transition', from: 'running', to: ['stopped'] },
      ],
    });
    await made('entity-types', { kind: 'EntityType', name: HOST, states: ['up', 'down'], initialState: 'up' });
    await made('relationship-types', {
      kind: 'RelationshipType',
      name: RUNS_ON,
      from: VM,
      to: HOST,
      cardinality: 'many-to-one',
      states: ['active', 'draining'],
      properties: [{ name: 'weight', type: 'integer', default: 1 }],
    });
    expect(await lastSeq()).toBe(0);
  });

  it('creates entities and relationships owned by the source, one change each', async () => {
    const body = await ok(FIRST_BATCH);
    expect(body).toEqual({
      source: SOURCE,
      dryRun: false,
      entities: { created: ['web-1', 'web-2', 'web-3', 'host-a'], updated: [], unchanged: 0, deleted: [], alreadyGone: 0, conflicts: [] },
      relationships: { created: 2, updated: 0, unchanged: 0, deleted: 0, conflicts: [] },
    });
    const expected: Written[] = [
      ['entity.created', 'web-1'],
      ['entity.created', 'web-2'],
      ['entity.created', 'web-3'],
      ['entity.created', 'host-a'],
    ];
    written.push(expected);

    const web1 = (await getEntity('web-1')).body;
    expect(web1).toMatchObject({
      entityTypeName: VM,
      state: 'provisioning',
      properties: { size: 'small', cpus: 1 },
      labels: { team: 'web' },
      syncSource: SOURCE,
      lastSyncedAt: FIRST_BATCH.observedAt,
    });
    expect((await getEntity('web-2')).body).toMatchObject({ state: 'running', properties: { size: 'large', cpus: 4 }, syncSource: SOURCE });
    expect((await getEntity('host-a')).body).toMatchObject({ entityTypeName: HOST, state: 'up', syncSource: SOURCE });
    expect(await links()).toEqual([
      { from: 'web-1', to: 'host-a', properties: { weight: 1 } },
      { from: 'web-2', to: 'host-a', properties: { weight: 3 } },
    ]);

    // the change rows are built in SQL from the rows as written: the same JSON the entity route answers
    const { changes } = await changesAfter(0);
    expectOneRequest(changes, 0, expected);
    expect(changes.find((c) => c.entity.name === 'web-1')!.entity).toEqual(web1);
  });

  it('writes nothing when the same batch is sent again', async () => {
    const before = await lastSeq();
    const rows = await Promise.all(['web-1', 'web-2', 'web-3', 'host-a'].map(async (name) => (await getEntity(name)).body));
    const body = await ok({ ...FIRST_BATCH, observedAt: '2026-03-01T11:00:00.000Z' });
    expect(body).toEqual({
      source: SOURCE,
      dryRun: false,
      entities: { created: [], updated: [], unchanged: 4, deleted: [], alreadyGone: 0, conflicts: [] },
      relationships: { created: 0, updated: 0, unchanged: 2, deleted: 0, conflicts: [] },
    });
    expect(await changesAfter(before)).toEqual({ changes: [], next: before });
    // not even restamped: updatedAt and lastSyncedAt stay
    expect(await Promise.all(['web-1', 'web-2', 'web-3', 'host-a'].map(async (name) => (await getEntity(name)).body))).toEqual(rows);
  });

  it('updates what differs, and only that', async () => {
    const before = await lastSeq();
    const previous = (await getEntity('web-1')).body;
    const body = await ok({
      observedAt: '2026-03-01T12:00:00.000Z',
      entities: [
        { entityType: VM, name: 'web-1', state: 'running', properties: { size: 'large' }, labels: { team: 'api' } },
        { entityType: VM, name: 'web-2', state: 'running', properties: { size: 'large', cpus: 4 } },
      ],
      relationships: [{ relationshipType: RUNS_ON, from: 'web-1', to: 'host-a', properties: { weight: 2 } }],
    });
    expect(body.entities).toEqual({ created: [], updated: ['web-1'], unchanged: 1, deleted: [], alreadyGone: 0, conflicts: [] });
    expect(body.relationships).toEqual({ created: 0, updated: 1, unchanged: 0, deleted: 0, conflicts: [] });
    written.push([['entity.updated', 'web-1']]);

    const web1 = (await getEntity('web-1')).body;
    expect(web1).toMatchObject({
      id: previous.id,
      state: 'running',
      properties: { size: 'large', cpus: 1 },
      labels: { team: 'api' },
      lastSyncedAt: '2026-03-01T12:00:00.000Z',
      createdAt: previous.createdAt,
    });
    const { changes } = await changesAfter(before);
    expect(changes.map((c) => [c.seq, c.type, c.entity.name])).toEqual([[before + 1, 'entity.updated', 'web-1']]);
    expect(changes[0]!.entity).toEqual(web1);
    expect((await links()).find((l) => l.from === 'web-1')!.properties).toEqual({ weight: 2 });
  });

  it('answers a dry run as the write would, and writes nothing', async () => {
    const before = await lastSeq();
    const names = await entityNames();
    const web3 = (await getEntity('web-3')).body;
    const relationshipsBefore = await links();
    const request = {
      entities: [
        { entityType: VM, name: 'web-4' },
        { entityType: VM, name: 'web-3', properties: { size: 'small' } },
      ],
      relationships: [{ relationshipType: RUNS_ON, from: 'web-4', to: 'host-a' }],
      deleteEntities: ['web-2', 'never-was'],
    };
    const dry = await ok({ ...request, dryRun: true });
    expect(dry).toEqual({
      source: SOURCE,
      dryRun: true,
      entities: { created: ['web-4'], updated: ['web-3'], unchanged: 0, deleted: ['web-2'], alreadyGone: 1, conflicts: [] },
      relationships: { created: 1, updated: 0, unchanged: 0, deleted: 0, conflicts: [] },
    });
    expect(await changesAfter(before)).toEqual({ changes: [], next: before });
    expect(await entityNames()).toEqual(names);
    expect((await getEntity('web-4')).status).toBe(404);
    expect((await getEntity('web-3')).body).toEqual(web3);
    expect(await links()).toEqual(relationshipsBefore);
  });

  it('reports an entity created by hand through POST ENV/entities as a conflict, and leaves it as it is', async () => {
    const manual = await call('POST', `${ENV}/entities`, { kind: 'Entity', entityType: VM, name: 'manual', properties: { size: 'small' } });
    expect(manual.status, JSON.stringify(manual.body)).toBe(201);
    expect(manual.body.syncSource).toBeNull();
    written.push([['entity.created', 'manual']]);
    const before = await lastSeq();

    const body = await ok({
      entities: [
        { entityType: VM, name: 'manual', properties: { size: 'large' } },
        { entityType: VM, name: 'web-5' },
      ],
      relationships: [{ relationshipType: RUNS_ON, from: 'manual', to: 'host-a' }],
    });
    expect(body.entities).toEqual({
      created: ['web-5'],
      updated: [],
      unchanged: 0,
      deleted: [],
      alreadyGone: 0,
      conflicts: [{ name: 'manual', reason: 'created by hand', syncSource: null }],
    });
    expect(body.relationships).toEqual({
      created: 0,
      updated: 0,
      unchanged: 0,
      deleted: 0,
      conflicts: [{ relationshipType: RUNS_ON, from: 'manual', to: 'host-a', reason: 'from entity "manual" was created by hand' }],
    });
    written.push([['entity.created', 'web-5']]);
    expect((await getEntity('manual')).body).toEqual(manual.body);
    expect((await changesAfter(before)).changes.map((c) => [c.seq, c.type, c.entity.name])).toEqual([[before + 1, 'entity.created', 'web-5']]);

    // nor deleted by the source
    const deletion = await ok({ deleteEntities: ['manual'] });
    expect(deletion.entities).toMatchObject({ deleted: [], alreadyGone: 0, conflicts: [{ name: 'manual', reason: 'created by hand', syncSource: null }] });
    expect((await getEntity('manual')).body).toEqual(manual.body);
    expect(await lastSeq()).toBe(before + 1);
  });

  it('deletes what the source owns, with its relationships', async () => {
    const before = await lastSeq();
    const web2 = (await getEntity('web-2')).body;
    const body = await ok({ deleteEntities: ['web-2', 'never-was'] });
    expect(body.entities).toEqual({ created: [], updated: [], unchanged: 0, deleted: ['web-2'], alreadyGone: 1, conflicts: [] });
    written.push([['entity.deleted', 'web-2']]);
    expect((await getEntity('web-2')).status).toBe(404);
    expect(await links()).toEqual([{ from: 'web-1', to: 'host-a', properties: { weight: 2 } }]);
    const { changes } = await changesAfter(before);
    expect(changes.map((c) => [c.seq, c.type, c.entity])).toEqual([[before + 1, 'entity.deleted', { id: web2.id, name: 'web-2', entityTypeName: VM }]]);
  });

  it('refuses a batch with an invalid item: 400 validation_failed, nothing written', async () => {
    const before = await lastSeq();
    const names = await entityNames();
    const web1 = (await getEntity('web-1')).body;
    const response = await batch({
      entities: [
        { entityType: VM, name: 'web-6' },
        { entityType: VM, name: 'web-1', properties: { size: 'huge' } },
        { entityType: 'no-such-type', name: 'odd' },
      ],
      relationships: [{ relationshipType: RUNS_ON, from: 'web-6', to: 'host-a' }],
      deleteEntities: ['web-3'],
    });
    expect({ status: response.status, code: response.body.code }).toEqual({ status: 400, code: 'validation_failed' });
    expect(response.body.error).toEqual(expect.any(String));
    expect(response.body.details).toEqual([
      { path: 'entities.1.properties.size', message: expect.stringContaining('must be one of') },
      { path: 'entities.2.entityType', message: 'entity type "no-such-type" does not exist in this project' },
    ]);
    expect(await changesAfter(before)).toEqual({ changes: [], next: before });
    expect(await entityNames()).toEqual(names);
    expect((await getEntity('web-1')).body).toEqual(web1);

    // a schema refusal (a repeated name) writes nothing either
    const repeated = await batch({ entities: [{ entityType: HOST, name: 'h' }, { entityType: HOST, name: 'h' }] });
    expect({ status: repeated.status, code: repeated.body.code }).toEqual({ status: 400, code: 'validation_failed' });
    expect(repeated.body.details.map((d: { path: string }) => d.path)).toEqual(['entities.1.name']);
    expect(await lastSeq()).toBe(before);
  });

  it('delivers a batch’s changes to a live SSE subscriber through the Durable Object', async () => {
    const stream = await openStream(`${ENV}/entities/stream?entityType=${VM}`);
    open.push(stream);
    expect(stream.status).toBe(200);
    const before = await lastSeq();
    const body = await ok({
      entities: [
        { entityType: HOST, name: 'host-b' },
        { entityType: VM, name: 'web-7', properties: { size: 'small' } },
        { entityType: VM, name: 'web-3', properties: { size: 'large' } },
      ],
    });
    expect(body.entities).toMatchObject({ created: ['host-b', 'web-7'], updated: ['web-3'], conflicts: [] });
    const expected: Written[] = [
      ['entity.created', 'host-b'],
      ['entity.created', 'web-7'],
      ['entity.updated', 'web-3'],
    ];
    written.push(expected);
    const { changes } = await changesAfter(before);
    expectOneRequest(changes, before, expected);
    // host-b is filtered out by entityType; the vm changes arrive as the log holds them, with its sequences as ids
    await stream.next(2);
    const vmChanges = changes.filter((c) => c.entity.entityTypeName === VM);
    expect(stream.events.map((e) => [e.id, e.event, e.data.entity])).toEqual(vmChanges.map((c) => [String(c.seq), c.type, c.entity]));
    expect(stream.events.find((e) => e.data.entity.name === 'web-3')!.data.entity).toEqual((await getEntity('web-3')).body);
    await stream.close();
  });

  it('has logged exactly one change per written entity, with consecutive sequences', async () => {
    const { changes, next } = await changesAfter(0);
    const total = written.reduce((sum, request) => sum + request.length, 0);
    expect(changes.map((c) => c.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(next).toBe(total);
    let after = 0;
    for (const request of written) {
      expectOneRequest(changes.slice(after, after + request.length), after, request);
      after += request.length;
    }
  });
});
