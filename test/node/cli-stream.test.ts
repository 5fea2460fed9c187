import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCliHome, startCli, target, type CliHome } from '../support/cli';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * `cellplane stream` against a real server, through a TCP proxy on
 * 127.0.0.1 the test can cut: the CLI prints one line per change, notes the
 * dropped connection on stderr, reconnects with Last-Event-ID and prints
 * the changes made while it was away exactly once, in order; Ctrl-C
 * (SIGINT) ends it with exit 0.
 */

interface Proxy {
  url: string;
  /** Connections accepted so far. */
  accepted(): number;
  /** Drops every open connection and refuses new ones until `open()`. */
  cut(): void;
  open(): void;
  close(): Promise<void>;
}

async function startProxy(targetUrl: string): Promise<Proxy> {
  const { port: targetPort } = new URL(targetUrl);
  const sockets = new Set<Socket>();
  let blocked = false;
  let accepted = 0;
  const server: Server = createServer((client) => {
    if (blocked) return void client.destroy();
    accepted += 1;
    const upstream = connect(Number(targetPort), '127.0.0.1');
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', drop);
      socket.on('close', drop);
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    accepted: () => accepted,
    cut() {
      blocked = true;
      for (const socket of sockets) socket.destroy();
    },
    open() {
      blocked = false;
    },
    async close() {
      blocked = true;
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Line {
  id: string;
  event: string;
  data: { type: string; entity: { name: string; state: string }; at: string };
}

describe('cellplane stream', () => {
  let api: TestApi;
  let proxy: Proxy;
  let home: CliHome;
  let tenant: Tenant;
  let owner: string;
  let env: string;

  beforeAll(async () => {
    api = await createTestApi();
    proxy = await startProxy(await api.listen());
    home = createCliHome();
    tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    for (const name of ['vm', 'db']) {
      const type = await api.call('POST', `${proj}/entity-types`, { token: owner, body: { kind: 'EntityType', name, states: ['new', 'up'], initialState: 'new' } });
      expect(type.status).toBe(201);
    }
  });

  afterAll(async () => {
    await api.close();
    await proxy.close();
    home.remove();
  });

  const create = async (name: string, type = 'vm') => {
    const response = await api.call('POST', `${env}/entities`, { token: owner, body: { kind: 'Entity', entityType: type, name } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
  };
  const lines = (stdout: string) =>
    stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Line);

  it('prints each change as a JSON line, resumes after a dropped connection without gap or repeat, and exits 0 on Ctrl-C', async () => {
    await create('s-1');
    const stream = startCli([...target(proxy.url, owner, tenant), 'stream', '--since', '0', '--json'], { home });
    try {
      await stream.waitFor('stdout', /"s-1"/);
      await create('s-2');
      await stream.waitFor('stdout', /"s-2"/);
      const before = proxy.accepted();

      proxy.cut();
      await stream.waitFor('stderr', /connection lost/);
      // changed while the CLI cannot reach the server
      await create('s-3');
      await api.call('PUT', `${env}/entities/s-1`, { token: owner, body: { state: 'up' } });
      proxy.open();
      await stream.waitFor('stdout', /"state": ?"up"/);
      expect(proxy.accepted()).toBeGreaterThan(before);
      await create('s-4');
      await stream.waitFor('stdout', /"s-4"/);
    } finally {
      stream.child.kill('SIGINT');
    }
    const result = await stream.exited;
    expect(result.code, result.stderr).toBe(0);
    const events = lines(result.stdout);
    expect(events.map((line) => [line.event, line.data.entity.name, line.data.entity.state])).toEqual([
      ['entity.created', 's-1', 'new'],
      ['entity.created', 's-2', 'new'],
      ['entity.created', 's-3', 'new'],
      ['entity.updated', 's-1', 'up'],
      ['entity.created', 's-4', 'new'],
    ]);
    const ids = events.map((line) => Number(line.id));
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    // every line is the event as the SDK reads it: id, event, data
    expect(Object.keys(events[0]!)).toEqual(['id', 'event', 'data']);
    const notes = result.stderr.split('\n');
    expect(notes[0]).toBe(`streaming changes of ${tenant.org.slug}/${tenant.project.slug}/default after 0 (Ctrl-C to stop)`);
    expect(result.stderr).toMatch(new RegExp(`connection lost \\(.+\\); reconnecting, resuming after ${ids[1]}\\n`));
  });

  it('prints a line per change for people, filtered by --type', async () => {
    const changes = await api.call('GET', `${env}/changes?after=0&limit=1000`, { token: owner });
    const after = changes.body.next as number;
    const stream = startCli([...target(proxy.url, owner, tenant), 'stream', '--type', 'db', '--since', String(after)], { home });
    try {
      await create('skip-me', 'vm');
      await create('db-1', 'db');
      await stream.waitFor('stdout', /db-1/);
    } finally {
      stream.child.kill('SIGINT');
    }
    const result = await stream.exited;
    expect(result.code, result.stderr).toBe(0);
    // the line ends with the change's own time, as the change feed records it
    const feed = await api.call('GET', `${env}/changes?after=${after}&limit=1000`, { token: owner });
    const change = feed.body.changes.find((c: { entity: { name: string } }) => c.entity.name === 'db-1');
    expect(result.stdout).toBe(`${change.seq}  entity.created  db/db-1  new  ${change.at}\n`);
  });
});
