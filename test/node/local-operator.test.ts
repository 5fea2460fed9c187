import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocal } from '../../src/cli/local';
import { startServer } from '../../src/node/server';
import { CellplaneError, createClient } from '../../src/sdk';

/**
 * Local-first mode (src/cli/local.ts): the app inside the caller's process
 * on an embedded database folder, no port, no token; then the same folder
 * served by the Node host (`npm start` with CELLPLANE_DATA_DIR).
 */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe('local-first mode', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cellplane-local-'));
  const notices: string[] = [];
  const out = { info: (text: string) => notices.push(text) };
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('creates the organization and project in effect on first use, and serves every call without a token', async () => {
    const local = await openLocal({ dataDir, org: 'local', project: 'default', out });
    try {
      expect(notices).toEqual(['local: created organization "local" and project "default"']);
      const { client } = local;
      await client.POST('/{o}/{p}/entity-types', {
        params: { path: { o: 'local', p: 'default' } },
        body: { kind: 'EntityType', name: 'svc', states: ['up', 'down'], initialState: 'up' },
      });
      await client.POST('/{o}/{p}/envs/{envName}/entities', {
        params: { path: { o: 'local', p: 'default', envName: 'default' } },
        body: { kind: 'Entity', entityType: 'svc', name: 'api' },
      });
    } finally {
      await local.close();
    }
  });

  it('opens the same folder again without creating anything, and a second project on request', async () => {
    notices.length = 0;
    const local = await openLocal({ dataDir, org: 'local', project: 'default', out });
    try {
      expect(notices).toEqual([]);
      const entity = await local.client.GET('/{o}/{p}/envs/{envName}/entities/{name}', {
        params: { path: { o: 'local', p: 'default', envName: 'default', name: 'api' } },
      });
      expect(entity.state).toBe('up');
    } finally {
      await local.close();
    }
    const other = await openLocal({ dataDir, org: 'local', project: 'scratch', out });
    try {
      expect(notices).toEqual(['local: created project "scratch"']);
      // GET /orgs is a user's list; the local operator owns every organization of its database
      expect((await other.client.GET('/orgs')).map((org) => [org.slug, org.role])).toEqual([['local', 'owner']]);
    } finally {
      await other.close();
    }
  });

  it('refuses credentials it cannot verify even in local mode', async () => {
    const local = await openLocal({ dataDir, org: 'local', project: 'default', out });
    try {
      const error = (await local.client
        .GET('/{o}/{p}/envs/{envName}/entities', {
          params: { path: { o: 'local', p: 'default', envName: 'default' } },
          headers: { authorization: 'Bearer cpl_not-a-token' },
        })
        .catch((e: unknown) => e)) as CellplaneError;
      expect(error).toMatchObject({ status: 401, code: 'unauthorized' });
    } finally {
      await local.close();
    }
  });

  it('leaves data that the Node host then serves from the same CELLPLANE_DATA_DIR', async () => {
    const port = await freePort();
    const server = await startServer({ CELLPLANE_DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: 'error' });
    try {
      // no token was ever minted: the server is in bootstrap mode, as a fresh `npm start` is
      const client = createClient({ baseUrl: server.url });
      const entity = await client.GET('/{o}/{p}/envs/{envName}/entities/{name}', {
        params: { path: { o: 'local', p: 'default', envName: 'default', name: 'api' } },
      });
      expect(entity).toMatchObject({ name: 'api', entityTypeName: 'svc', state: 'up' });
    } finally {
      await server.stop();
    }
  });
});
