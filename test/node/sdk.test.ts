import { createServer, type Server } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CellplaneError, createClient, type CellplaneClient, type EnvRef } from '../../src/sdk';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';
import { webhookAction } from '../support/run-fixtures';
import { startReceiver, type Receiver } from '../support/receiver';

/**
 * The SDK (src/sdk) over real HTTP against a real server: typed calls, the
 * one error type, keyset iteration, idempotent triggers, following a run,
 * and the change stream resuming after its connection is cut.
 */

/** A TCP proxy whose open connections can be cut, to drop a stream mid-flight. */
async function startCuttableProxy(target: URL): Promise<{ url: string; cut(): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    cut: () => sockets.forEach((socket) => socket.destroy()),
    close: () => new Promise((resolve) => (sockets.forEach((s) => s.destroy()), server.close(() => resolve()))),
  };
}

describe('SDK', () => {
  let api: TestApi;
  let receiver: Receiver;
  let tenant: Tenant;
  let baseUrl: string;
  let client: CellplaneClient;
  let ref: EnvRef;
  let token: string;
  const path = () => ({ o: ref.org, p: ref.project, envName: ref.env });

  beforeAll(async () => {
    receiver = await startReceiver();
    api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: receiver.host } });
    tenant = await createTenant(api);
    token = await mintToken(api, tenant, { role: 'owner' });
    baseUrl = await api.listen();
    client = createClient({ baseUrl, token });
    ref = { org: tenant.org.slug, project: tenant.project.slug, env: 'default' };
    await client.POST('/{o}/{p}/entity-types', {
      params: { path: { o: ref.org, p: ref.project } },
      body: { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning', properties: [{ name: 'size', type: 'string' }] },
    });
  });

  afterAll(async () => {
    await receiver?.close();
    await api?.close();
  });

  it('answers typed bodies and throws one error type with status, code, details and request id', async () => {
    const created = await client.POST('/{o}/{p}/envs/{envName}/entities', {
      params: { path: path() },
      body: { kind: 'Entity', entityType: 'vm', name: 'web-1', properties: { size: 'large' } },
    });
    expect(created).toMatchObject({ name: 'web-1', state: 'provisioning', properties: { size: 'large' } });
    const read = await client.GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { ...path(), name: 'web-1' } } });
    expect(read.id).toBe(created.id);

    const invalid = await client
      .POST('/{o}/{p}/envs/{envName}/entities', { params: { path: path() }, body: { kind: 'Entity', entityType: 'vm', name: 'web-2', properties: { size: 3 } } })
      .catch((error: unknown) => error);
    expect(invalid).toBeInstanceOf(CellplaneError);
    const error = invalid as CellplaneError;
    expect(error).toMatchObject({ status: 400, code: 'validation_failed' });
    expect(error.details).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'properties.size' })]));
    expect(error.requestId).toMatch(/^[0-9a-f-]{36}$/);

    const missing = (await client
      .GET('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { ...path(), name: 'nope' } } })
      .catch((e: unknown) => e)) as CellplaneError;
    expect(missing).toMatchObject({ status: 404, code: 'not_found', request: { method: 'GET' } });
    expect(missing.request.url).toContain('/entities/nope');

    const anonymous = (await createClient({ baseUrl })
      .GET('/{o}/{p}/envs/{envName}/entities', { params: { path: path() } })
      .catch((e: unknown) => e)) as CellplaneError;
    expect(anonymous).toMatchObject({ status: 401, code: 'unauthorized' });
  });

  it('reports a server that does not answer as a network error', async () => {
    const closed = await startCuttableProxy(new URL(baseUrl));
    await closed.close();
    const error = (await createClient({ baseUrl: closed.url })
      .GET('/orgs/{id}', { params: { path: { id: ref.org } } })
      .catch((e: unknown) => e)) as CellplaneError;
    expect(error).toBeInstanceOf(CellplaneError);
    expect(error).toMatchObject({ status: 0, code: 'network_error' });
  });

  it('iterates every keyset page in order', async () => {
    const names = Array.from({ length: 23 }, (_, i) => `page-${String(i).padStart(2, '0')}`);
    for (const name of names) {
      await client.POST('/{o}/{p}/envs/{envName}/entities', { params: { path: path() }, body: { kind: 'Entity', entityType: 'vm', name } });
    }
    const seen: string[] = [];
    for await (const entity of client.paginate('/{o}/{p}/envs/{envName}/entities', { params: { path: path(), query: { namePrefix: 'page-', limit: 5 } } })) {
      seen.push(entity.name);
    }
    expect(seen).toEqual(names);
  });

  it('sends Idempotency-Key on trigger and follows a run to its end', async () => {
    await client.POST('/{o}/{p}/actions', {
      params: { path: { o: ref.org, p: ref.project } },
      body: webhookAction('deploy', `${receiver.url}/hooks`) as never,
    });
    const first = await client.trigger(ref, 'web-1', 'deploy', { parameters: { size: 'large' } }, { idempotencyKey: 'sdk-key-1' });
    const again = await client.trigger(ref, 'web-1', 'deploy', { parameters: { size: 'large' } }, { idempotencyKey: 'sdk-key-1' });
    expect(again.id).toBe(first.id);
    const other = await client.trigger(ref, 'web-1', 'deploy', {}, { idempotencyKey: 'sdk-key-2' });
    expect(other.id).not.toBe(first.id);

    const statuses: string[] = [];
    const waiting = client.waitForRun(ref, first.id, { intervalMs: 20, onUpdate: (run) => statuses.push(run.status) });
    await client.DELETE('/{o}/{p}/envs/{envName}/action-runs/{id}', { params: { path: { ...path(), id: first.id } } });
    const done = await waiting;
    expect(done.status).toBe('cancelled');
    expect(statuses.at(-1)).toBe('cancelled');
    await client.DELETE('/{o}/{p}/envs/{envName}/action-runs/{id}', { params: { path: { ...path(), id: other.id } } });
  });

  it('streams changes and resumes with Last-Event-ID after the connection drops: no gap, no duplicate', async () => {
    const proxy = await startCuttableProxy(new URL(baseUrl));
    const viaProxy = createClient({ baseUrl: proxy.url, token });
    const controller = new AbortController();
    const events: { id: string | undefined; name: string }[] = [];
    const reconnects: (string | undefined)[] = [];
    const put = (name: string, state: string) =>
      client.PUT('/{o}/{p}/envs/{envName}/entities/{name}', { params: { path: { ...path(), name } }, body: { state } });
    const stream = viaProxy.stream(ref, { signal: controller.signal, retryMs: 50, onReconnect: ({ lastEventId }) => reconnects.push(lastEventId) });
    const reading = (async () => {
      for await (const event of stream) {
        const data = event.data as { entity?: { name: string } };
        events.push({ id: event.id, name: `${event.event}:${data.entity?.name}` });
        if (events.length === 1) {
          // cut the connection, and change more while no client is connected
          proxy.cut();
          await put('page-01', 'running');
          await put('page-02', 'running');
        }
        if (events.length === 3) controller.abort();
      }
    })();
    // the stream starts at the latest change: this is its first event
    await new Promise((resolve) => setTimeout(resolve, 200));
    await put('page-00', 'running');
    await reading;
    await proxy.close();
    expect(events.map((event) => event.name)).toEqual(['entity.updated:page-00', 'entity.updated:page-01', 'entity.updated:page-02']);
    const ids = events.map((event) => Number(event.id));
    expect(ids).toEqual([ids[0], ids[0]! + 1, ids[0]! + 2]);
    expect(reconnects.length).toBeGreaterThanOrEqual(1);
    expect(reconnects[0]).toBe(events[0]!.id);
  });

  it('throws, and does not retry, when the stream is refused', async () => {
    const refused = createClient({ baseUrl, token: 'cpl_not-a-real-token' }).stream(ref, { retryMs: 10 });
    await expect(refused.next()).rejects.toMatchObject({ status: 401, code: 'unauthorized' });
  });
});
