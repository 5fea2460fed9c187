import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLocal } from '../../src/cli/local';
import { createCliHome, runCli, startCli, type CliHome } from '../support/cli';

/**
 * `cellplane --local` on an empty directory: the embedded database is
 * created in `.cellplane/` (or --data-dir), with organization `local` and
 * project `default`; commands run against it in-process, with no baseUrl,
 * no token and no port opened, whatever SERVICE_BASE_URL and SERVICE_TOKEN
 * say.
 */

/** The TCP sockets process `pid` is listening on (Linux: its socket fds matched against /proc/net/tcp{,6} rows in state 0A). */
function listeningSockets(pid: number): number {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(match[1]!);
    } catch {
      // closed meanwhile
    }
  }
  let listening = 0;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue;
    for (const row of readFileSync(table, 'utf8').trim().split('\n').slice(1)) {
      const columns = row.trim().split(/\s+/);
      if (columns[3] === '0A' && inodes.has(columns[9]!)) listening += 1;
    }
  }
  return listening;
}

// each local command opens the embedded database in a new process: seconds, not milliseconds
describe('cellplane --local', { timeout: 180_000 }, () => {
  let home: CliHome;
  // a server that does not exist and a token that is not one: local mode must use neither
  const ignored = { SERVICE_BASE_URL: 'http://127.0.0.1:1', SERVICE_TOKEN: 'cpl_000000000000000000000000000000000000' };

  beforeAll(() => {
    home = createCliHome();
  });
  afterAll(() => home.remove());

  it('creates organization local and project default in .cellplane on first use', async () => {
    expect(readdirSync(home.cwd)).toEqual([]);
    const first = await runCli(['--local', 'projects', 'list', '--json'], { home, env: ignored });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toBe('local: created organization "local" and project "default"\n');
    expect((JSON.parse(first.stdout) as { slug: string }[]).map((project) => project.slug)).toEqual(['default']);
    expect(existsSync(join(home.cwd, '.cellplane'))).toBe(true);

    const again = await runCli(['orgs', 'get', '--json'], { home, env: { ...ignored, SERVICE_LOCAL: '1' } });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toBe('');
    expect(JSON.parse(again.stdout)).toMatchObject({ slug: 'local', name: 'local' });
    const settings = await runCli(['--local', 'config', 'get', 'currentOrg'], { home });
    expect(settings).toEqual({ code: 0, stdout: 'local\n', stderr: 'from default (local mode)\n' });
  });

  it('entities create and list work against the embedded database, and no port is opened', async () => {
    // the catalog is `cellplane apply`'s: the entity type is written through local mode's own client, in this process
    const local = await openLocal({ dataDir: join(home.cwd, '.cellplane'), org: 'local', project: 'default', out: { info: () => {} } });
    try {
      await local.client.POST('/{o}/{p}/entity-types', {
        params: { path: { o: 'local', p: 'default' } },
        body: { kind: 'EntityType', name: 'vm', states: ['new', 'up'], initialState: 'new' },
      });
    } finally {
      await local.close();
    }

    const created = await runCli(['--local', 'entities', 'create', 'web-1', '--type', 'vm', '--label', 'team=a'], { home, env: ignored });
    expect(created).toEqual({ code: 0, stdout: 'created entity web-1 (vm, new)\n', stderr: '' });
    const moved = await runCli(['--local', 'entities', 'set-state', 'web-1', 'up'], { home, env: ignored });
    expect(moved).toEqual({ code: 0, stdout: 'web-1 is up\n', stderr: '' });
    const listed = await runCli(['--local', 'entities', 'list', '--json'], { home, env: ignored });
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ name: 'web-1', entityTypeName: 'vm', state: 'up', labels: { team: 'a' } })]);

    // a command that stays up: the stream, served in-process; the detector is checked on a socket this process listens on
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    try {
      expect(listeningSockets(process.pid)).toBeGreaterThan(0);
    } finally {
      await new Promise<void>((resolve) => probe.close(() => resolve()));
    }
    const stream = startCli(['--local', 'stream', '--since', '0', '--json'], { home, env: ignored });
    try {
      await stream.waitFor('stdout', /"web-1"/);
      expect(listeningSockets(stream.child.pid!)).toBe(0);
    } finally {
      stream.child.kill('SIGINT');
    }
    const ended = await stream.exited;
    expect(ended.code, ended.stderr).toBe(0);
    expect(ended.stdout.trim().split('\n').map((line) => JSON.parse(line).event)).toEqual(['entity.created', 'entity.updated']);
  });

  it('--data-dir moves the database; --org and --project name what first use creates', async () => {
    const result = await runCli(['--local', '--data-dir', 'elsewhere', '--org', 'acme', '--project', 'platform', 'envs', 'list'], { home });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toBe('local: created organization "acme" and project "platform"\n');
    expect(result.stdout).toMatch(/^NAME +CREATED\ndefault +\S+\n$/);
    expect(existsSync(join(home.cwd, 'elsewhere'))).toBe(true);
  });
});
