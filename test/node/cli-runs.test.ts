import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCliHome, runCli, target, type CliHome } from '../support/cli';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * `cellplane runs …` against a real server whose job runner delivers to a
 * real workflow on 127.0.0.1: a receiver that answers 202 and then calls the
 * run's callback with the outcome the trigger's parameters asked for, as an
 * external workflow does. `--wait` follows the run to its end.
 */

interface Workflow {
  url: string;
  host: string;
  /** Bodies received. */
  received: Record<string, unknown>[];
  close(): Promise<void>;
}

/** Answers 202, then POSTs `{ status }` (and `error` when failed) to the callback URL's path on `apiUrl`. Requests to /hold are never answered. */
async function startWorkflow(apiUrl: () => string): Promise<Workflow> {
  const received: Record<string, unknown>[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk) => (text += chunk));
    req.on('end', () => {
      if (req.url?.startsWith('/hold')) return;
      const body = JSON.parse(text || '{}') as { callbackUrl: string; callbackToken: string; outcome: string };
      received.push(body);
      res.writeHead(202).end();
      setTimeout(() => {
        const outcome = body.outcome === 'failed' ? { status: 'failed', error: 'the workflow failed on purpose' } : { status: 'succeeded', output: { ok: true } };
        void fetch(`${apiUrl()}${new URL(body.callbackUrl).pathname}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${body.callbackToken}`, 'content-type': 'application/json' },
          body: JSON.stringify(outcome),
        });
      }, 300);
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    received,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('cellplane runs', () => {
  let api: TestApi;
  let url: string;
  let home: CliHome;
  let workflow: Workflow;
  let tenant: Tenant;
  let owner: string;
  let env: string;
  let entityCount = 0;

  beforeAll(async () => {
    workflow = await startWorkflow(() => url);
    api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: workflow.host }, runner: { pollIntervalMs: 50 } });
    url = await api.listen();
    home = createCliHome();
    tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const write = async (path: string, body: unknown) => {
      const response = await api.call('POST', path, { token: owner, body });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
    };
    await write(`${proj}/entity-types`, { kind: 'EntityType', name: 'vm', states: ['provisioning', 'running', 'failed'], initialState: 'provisioning' });
    const action = (name: string, path: string) => ({
      kind: 'Action',
      name,
      entityType: 'vm',
      onSuccess: 'running',
      onFailure: 'failed',
      parameters: [
        { name: 'outcome', type: 'string', default: 'succeeded' },
        { name: 'size', type: 'string', default: 'small' },
        { name: 'replicas', type: 'number', default: 1 },
      ],
      trigger: {
        type: 'webhook',
        url: `${workflow.url}${path}`,
        payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}', outcome: '{{ parameters.outcome }}' },
        retry: { maxAttempts: 1, initialDelayMs: 0 },
      },
    });
    await write(`${proj}/actions`, action('deploy', '/deploy'));
    await write(`${proj}/actions`, action('slow', '/hold'));
  });

  afterAll(async () => {
    await api.close();
    await workflow.close();
    home.remove();
  });

  const cli = (args: string[]) => runCli([...target(url, owner, tenant), ...args], { home });
  const newEntity = async () => {
    const name = `vm-${++entityCount}`;
    const response = await api.call('POST', `${env}/entities`, { token: owner, body: { kind: 'Entity', entityType: 'vm', name } });
    expect(response.status).toBe(201);
    return name;
  };
  const getRun = async (id: string) => (await api.call('GET', `${env}/action-runs/${id}`, { token: owner })).body;

  it('trigger sends parameters (file, then flags; key:=json typed) and the idempotency key; list, get and cancel show the API JSON', async () => {
    // the job runner is not started: runs stay pending
    const entity = await newEntity();
    const paramsFile = join(home.cwd, 'params.yaml');
    writeFileSync(paramsFile, 'size: large\nreplicas: 2\n');
    const first = await cli(['runs', 'trigger', entity, 'slow', '--params-file', paramsFile, '--param', 'replicas:=3', '--param', 'outcome=failed', '--idempotency-key', 'k-1', '--json']);
    expect(first.code, first.stderr).toBe(0);
    const run = JSON.parse(first.stdout);
    expect(run).toMatchObject({ actionName: 'slow', status: 'pending', parameters: { size: 'large', replicas: 3, outcome: 'failed' } });
    expect(first.stdout).toBe(`${JSON.stringify(await getRun(run.id), null, 2)}\n`);

    // the same trigger again with the same key: the same run, not a second one
    const again = await cli(['runs', 'trigger', entity, 'slow', '--params-file', paramsFile, '--param', 'replicas:=3', '--param', 'outcome=failed', '--idempotency-key', 'k-1']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toBe(`run ${run.id}: slow on ${entity}, pending\n`);
    expect(again.stderr).toBe(`follow it: cellplane runs get ${run.id} (or trigger with --wait)\n`);

    const [listed, filtered, got] = await Promise.all([
      cli(['runs', 'list', '--json']),
      cli(['runs', 'list', '--status', 'pending', '--entity', entity, '--action', 'slow', '--json']),
      cli(['runs', 'get', run.id, '--json']),
    ]);
    expect(listed.stdout).toBe(`${JSON.stringify((await api.call('GET', `${env}/action-runs`, { token: owner })).body, null, 2)}\n`);
    expect(filtered.stdout).toBe(
      `${JSON.stringify((await api.call('GET', `${env}/action-runs?status=pending&entity=${entity}&action=slow`, { token: owner })).body, null, 2)}\n`,
    );
    expect(JSON.parse(filtered.stdout)).toHaveLength(1);
    expect(got.stdout).toBe(`${JSON.stringify(await getRun(run.id), null, 2)}\n`);

    const cancelled = await cli(['runs', 'cancel', run.id]);
    expect(cancelled).toEqual({ code: 0, stdout: `run ${run.id} cancelled\n`, stderr: '' });
    expect((await getRun(run.id)).status).toBe('cancelled');

    const table = await cli(['runs', 'list']);
    expect(table.stdout.split('\n')[0]).toMatch(/^ID +ACTION +ENTITY +STATUS +CREATED +COMPLETED$/);
    expect(table.stdout).toMatch(new RegExp(`^${run.id} +slow +${entity} +cancelled +\\S+ +\\S+$`, 'm'));

    const reused = await cli(['runs', 'trigger', entity, 'slow', '--idempotency-key', 'k-1']);
    expect(reused.code).toBe(1);
    expect(reused.stderr).toMatch(/\(422 idempotency_key_reused\)\nhint: use a new --idempotency-key, or repeat the first trigger exactly/);

    const badParam = await cli(['runs', 'trigger', entity, 'slow', '--param', 'replicas:=three']);
    expect(badParam).toEqual({
      code: 2,
      stdout: '',
      stderr: 'error: --param "replicas:=three": after := comes JSON (3, true, "text", [1,2], {"a":1}); for a plain string write replicas=<value>\n',
    });
  });

  it('--wait follows a run to succeeded: status changes on stderr, the run on stdout, exit 0', async () => {
    const entity = await newEntity();
    api.jobs.start();
    try {
      const result = await cli(['runs', 'trigger', entity, 'deploy', '--wait', '--interval', '100']);
      expect(result.code, result.stderr).toBe(0);
      const id = /^id: +(\S+)$/m.exec(result.stdout)![1]!;
      const run = await getRun(id);
      expect(run.status).toBe('succeeded');
      expect(result.stdout).toMatch(/^status: +succeeded$/m);
      const notes = result.stderr.trimEnd().split('\n');
      expect(notes[0]).toBe(`run ${id}: pending`);
      expect(notes.at(-1)).toMatch(new RegExp(`^run ${id}: (pending|running) → succeeded$`));
      expect((await api.call('GET', `${env}/entities/${entity}`, { token: owner })).body.state).toBe('running');
    } finally {
      await api.jobs.stop();
    }
  });

  it('--wait on a run that fails exits 1 with the run\'s error and where to look; --json still prints the final run', async () => {
    const entity = await newEntity();
    api.jobs.start();
    try {
      const result = await cli(['runs', 'trigger', entity, 'deploy', '--param', 'outcome=failed', '--wait', '--interval', '100', '--json']);
      expect(result.code).toBe(1);
      const run = JSON.parse(result.stdout);
      expect(run).toMatchObject({ status: 'failed', error: 'the workflow failed on purpose' });
      expect(result.stdout).toBe(`${JSON.stringify(await getRun(run.id), null, 2)}\n`);
      expect(result.stderr.endsWith(`error: run ${run.id} failed: the workflow failed on purpose\nhint: see the run and its delivery attempts: cellplane runs get ${run.id}\n`)).toBe(true);
      expect((await api.call('GET', `${env}/entities/${entity}`, { token: owner })).body.state).toBe('failed');
    } finally {
      await api.jobs.stop();
    }
    expect(workflow.received.filter((body) => body.outcome === 'failed')).toHaveLength(1);
  });
});
