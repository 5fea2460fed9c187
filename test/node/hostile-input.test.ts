import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateServiceToken } from '../../src/auth/service-token';
import { findHostileJson, MAX_JSON_DEPTH } from '../../src/http/hostile-input';
import { createTenant, expectError, seedToken, type Tenant } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { wireRequest } from '../support/openapi-fuzz';
import { webhookAction } from '../support/run-fixtures';

/**
 * Input no route can take is refused at the edge (STYLE 13; docs/decisions.md
 * "Input hardening"): 400 validation_failed with a detail per place, before the
 * database is leased and without an error logged. Also the two HTTP framing
 * faults: a 413 closes its connection and says so, and a request without a
 * body is a request without a body whatever its Content-Type.
 */

const nested = (depth: number, inner: string) => '['.repeat(depth) + inner + ']'.repeat(depth);

describe('hostile input', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let proj: string;
  let env: string;
  let runId: string;

  beforeAll(async () => {
    api = await createTestApi({ env: { OUTBOUND_ALLOWED_HOSTS: '127.0.0.1' } });
    tenant = await createTenant(api);
    owner = await seedToken(api, tenant, 'owner');
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const made = async (path: string, body: unknown, status = 201) => {
      const response = await api.call('POST', path, { token: owner, body });
      expect(response.status, JSON.stringify(response.body)).toBe(status);
      return response.body;
    };
    await made(`${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
      properties: [
        { name: 'size', type: 'string' },
        { name: 'spec', type: 'object' },
        { name: 'cores', type: 'number' },
      ],
    });
    await made(`${env}/entities`, { kind: 'Entity', entityType: 'vm', name: 'vm-1' });
    await made(`${proj}/actions`, webhookAction('restart', 'http://127.0.0.1:9/hooks/{{ entity.name }}'));
    runId = (await made(`${env}/entities/vm-1/actions/restart`, {}, 202)).id;
  });
  afterAll(() => api.close());

  /** The request is 400 validation_failed naming `detailPath`, and neither the database nor the error log saw it. */
  async function refusedAtTheEdge(send: () => Promise<ApiResponse>, detailPath: string | RegExp, message: RegExp): Promise<ApiResponse> {
    const leases = api.databaseLeases();
    const errors = api.logs.filter((line) => line.includes('"level":"error"')).length;
    const response = await send();
    expectError(response, 400, 'validation_failed');
    expect(response.body.details, JSON.stringify(response.body)).toEqual(
      expect.arrayContaining([{ path: typeof detailPath === 'string' ? detailPath : expect.stringMatching(detailPath), message: expect.stringMatching(message) }]),
    );
    expect(api.databaseLeases(), 'the database was leased').toBe(leases);
    expect(api.logs.filter((line) => line.includes('"level":"error"')).length, 'an error was logged').toBe(errors);
    return response;
  }

  describe('in the URL', () => {
    it('refuses %00 in a path segment, even with a token no one has checked yet (GET /orgs/%00)', async () => {
      const { token } = generateServiceToken();
      const response = await refusedAtTheEdge(() => api.call('GET', '/orgs/%00', { token }), 'path.id', /NUL/);
      expect(response.body.details).toEqual([{ path: 'path.id', message: 'contains a NUL character (U+0000)' }]);
    });

    it('refuses %00 in any segment of any route, the run callback included', async () => {
      await refusedAtTheEdge(() => api.call('GET', `/${tenant.org.slug}/%00/entity-types`, { token: owner }), 'path.p', /NUL/);
      await refusedAtTheEdge(() => api.call('GET', `${env}/entities/vm%00`, { token: owner }), 'path.name', /NUL/);
      await refusedAtTheEdge(() => api.call('DELETE', `${env}/action-runs/%00`, { token: owner }), 'path.id', /NUL/);
      await refusedAtTheEdge(
        () => api.call('POST', `${env}/action-runs/${runId}%00/callback`, { token: owner, body: { status: 'succeeded' } }),
        'path.id',
        /NUL/,
      );
    });

    it('refuses %00 in query values and keys', async () => {
      await refusedAtTheEdge(() => api.call('GET', `${env}/entities?entityType=%00`, { token: owner }), 'query.entityType', /NUL/);
      await refusedAtTheEdge(() => api.call('GET', `${env}/entities?label=team:a%00b`, { token: owner }), 'query.label', /NUL/);
      await refusedAtTheEdge(() => api.call('GET', `${env}/action-runs?limit=%00`, { token: owner }), 'query.limit', /NUL/);
      await refusedAtTheEdge(() => api.call('GET', `${env}/entities?a%00=1`, { token: owner }), 'query.a\\u0000', /NUL/);
    });

    it('refuses malformed percent-encoding: a cut escape, an encoded lone surrogate', async () => {
      const { token } = generateServiceToken();
      await refusedAtTheEdge(() => api.call('GET', '/orgs/%E0%A4%A', { token }), 'path.id', /percent-encoded/);
      await refusedAtTheEdge(() => api.call('GET', '/orgs/%ED%A0%80', { token }), 'path.id', /percent-encoded/);
      await refusedAtTheEdge(() => api.call('GET', `${env}/entities?cursor=%ED%A0%80`, { token: owner }), 'query.cursor', /percent-encoded/);
      await refusedAtTheEdge(() => api.call('GET', `${env}/entities?namePrefix=%`, { token: owner }), 'query.namePrefix', /percent-encoded/);
    });

    it('takes well-formed text in every script, and %2F, as names (a plain 404 for one that does not exist)', async () => {
      for (const name of ['%F0%9F%92%A5', 'caf%C3%A9', 'a%2Fb', '%D7%A9%D7%9C%D7%95%D7%9D']) {
        expectError(await api.call('GET', `${proj}/entity-types/${name}`, { token: owner }), 404, 'not_found');
      }
    });
  });

  describe('in the JSON body', () => {
    const cases: { what: string; method: string; path: () => string; body: (hostile: string) => string; detail: string | RegExp }[] = [
      {
        what: 'entity labels',
        method: 'POST',
        path: () => `${env}/entities`,
        body: (h) => `{"kind":"Entity","entityType":"vm","name":"vm-x","labels":{"team":${h}}}`,
        detail: 'labels.team',
      },
      {
        what: 'entity properties',
        method: 'PUT',
        path: () => `${env}/entities/vm-1`,
        body: (h) => `{"kind":"Entity","entityType":"vm","name":"vm-1","properties":{"spec":{"image":${h}}}}`,
        detail: 'properties.spec.image',
      },
      {
        what: 'an action definition',
        method: 'POST',
        path: () => `${proj}/actions`,
        body: (h) =>
          `{"kind":"Action","name":"deploy","entityType":"vm","displayName":${h},"trigger":{"type":"webhook","url":"http://127.0.0.1:9/x"}}`,
        detail: 'displayName',
      },
      {
        what: "a trigger's payload",
        method: 'PUT',
        path: () => `${proj}/actions/restart`,
        body: (h) =>
          `{"kind":"Action","name":"restart","entityType":"vm","trigger":{"type":"webhook","url":"http://127.0.0.1:9/x","payload":{"note":[${h}]}}}`,
        detail: 'trigger.payload.note.0',
      },
      {
        what: 'trigger parameters',
        method: 'POST',
        path: () => `${env}/entities/vm-1/actions/restart`,
        body: (h) => `{"parameters":{"size":${h}}}`,
        detail: 'parameters.size',
      },
      {
        what: 'callback output',
        method: 'POST',
        path: () => `${env}/action-runs/${runId}/callback`,
        body: (h) => `{"status":"succeeded","output":{"log":${h}}}`,
        detail: 'output.log',
      },
    ];

    for (const c of cases) {
      it(`refuses NUL, lone surrogates, and JSON nested ${10_000} deep in ${c.what}`, async () => {
        const send = (hostile: string) => () => api.call(c.method, c.path(), { token: owner, rawBody: c.body(hostile) });
        await refusedAtTheEdge(send('"a\\u0000b"'), c.detail, /NUL/);
        await refusedAtTheEdge(send('"\\ud800"'), c.detail, /lone UTF-16 surrogate/);
        await refusedAtTheEdge(send('"x\\udfffy"'), c.detail, /lone UTF-16 surrogate/);
        await refusedAtTheEdge(send(nested(10_000, '1')), new RegExp(`^${String(c.detail).replace(/\./g, '\\.')}(\\.0)+$`), /nests deeper than 64 levels/);
        await refusedAtTheEdge(send('1e999'), c.detail, /not a finite number/);
      });
    }

    it('refuses object keys carrying NUL or a lone surrogate, and shows them escaped', async () => {
      const response = await refusedAtTheEdge(
        () => api.call('POST', `${env}/entities`, { token: owner, rawBody: '{"kind":"Entity","entityType":"vm","name":"vm-k","labels":{"a\\u0000":"b","\\udc00":"c"}}' }),
        'labels.a\\u0000',
        /key contains a NUL/,
      );
      expect(response.body.details).toContainEqual({ path: 'labels.\\udc00', message: 'key contains a lone UTF-16 surrogate (not valid Unicode)' });
    });

    it(`takes nesting up to ${MAX_JSON_DEPTH} levels and refuses one more`, async () => {
      // the body is level 1, trigger 2, payload 3: payload nested n deep makes the body 2 + n deep
      const action = (depth: number) =>
        `{"kind":"Action","name":"deep-${depth}","entityType":"vm","trigger":{"type":"webhook","url":"http://127.0.0.1:9/x","payload":${nested(depth - 2, '"x"')}}}`;
      const ok = await api.call('POST', `${proj}/actions`, { token: owner, rawBody: action(MAX_JSON_DEPTH) });
      expect(ok.status, JSON.stringify(ok.body)).toBe(201);
      await refusedAtTheEdge(
        () => api.call('POST', `${proj}/actions`, { token: owner, rawBody: action(MAX_JSON_DEPTH + 1) }),
        /^trigger\.payload(\.0)+$/,
        /nests deeper than 64 levels/,
      );
    });

    it('takes well-formed text: surrogate pairs, accents, right-to-left, control characters other than NUL', async () => {
      const response = await api.call('POST', `${env}/entities`, {
        token: owner,
        body: { kind: 'Entity', entityType: 'vm', name: 'vm-text', labels: { emoji: '💥🚀', accent: 'café', rtl: 'שלום', tab: 'a\tb' } },
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.labels).toEqual({ emoji: '💥🚀', accent: 'café', rtl: 'שלום', tab: 'a\tb' });
    });

    it('walks without recursing: 100,000 levels are reported, not a stack overflow, and the details are bounded', () => {
      let deep: unknown = 1;
      for (let i = 0; i < 100_000; i++) deep = [deep];
      expect(findHostileJson(deep)).toEqual([{ path: Array.from({ length: MAX_JSON_DEPTH }, () => '0').join('.'), message: 'nests deeper than 64 levels' }]);
      const many = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, '\u0000']));
      expect(findHostileJson(many)).toHaveLength(20);
      expect(findHostileJson({ a: [1, 'ok', { b: null, c: true, d: '💥' }] })).toEqual([]);
    });
  });

  describe('a body over 1 MiB', () => {
    const oversized = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024), slug: 'big' });

    /**
     * A keep-alive project create on a raw socket, its head sent with `framing`
     * (how the body's length is told); the body is the caller's to write.
     * `closed` resolves with everything received once the server closes.
     */
    const rawProjectCreate = async (framing: string) => {
      const base = new URL(await api.listen());
      const socket = net.connect(Number(base.port), base.hostname);
      socket.on('error', () => {
        // the server may close while the rest of the body is still being written; the answer is already here
      });
      let received = '';
      socket.setEncoding('latin1');
      socket.on('data', (chunk: string) => (received += chunk));
      const closed = new Promise<string>((resolve) => socket.once('close', () => resolve(received)));
      socket.write(
        `POST /orgs/${tenant.org.slug}/projects HTTP/1.1\r\nHost: ${base.host}\r\nConnection: keep-alive\r\n` +
          `Authorization: Bearer ${owner}\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`,
      );
      return { socket, closed };
    };

    it('is answered 413 with Connection: close on a raw keep-alive socket, which the server then closes', async () => {
      const { socket, closed } = await rawProjectCreate(`Content-Length: ${Buffer.byteLength(oversized)}`);
      socket.write(oversized);
      const [head, body] = (await closed).split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 413 /);
      expect(head!.toLowerCase()).toContain('connection: close');
      expect(JSON.parse(body!)).toMatchObject({ code: 'payload_too_large' });
    });

    it('leaves a keep-alive client able to go on: its next request gets a fresh connection and an answer', async () => {
      const base = await api.listen();
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      try {
        for (let round = 0; round < 3; round++) {
          const refused = await wireRequest(agent, base, 'POST', `/orgs/${tenant.org.slug}/projects`, {
            authorization: `Bearer ${owner}`,
            'content-type': 'application/json',
          }, oversized);
          expect(refused.status).toBe(413);
          expect(refused.headers.connection).toBe('close');
          expect(JSON.parse(refused.body)).toMatchObject({ code: 'payload_too_large' });
          const next = await wireRequest(agent, base, 'GET', `/orgs/${tenant.org.slug}`, { authorization: `Bearer ${owner}` });
          expect(next.status).toBe(200);
          expect(next.reusedSocket, 'the closed connection was handed out again').toBe(false);
          // and that connection is kept: a request that fits goes on it
          const again = await wireRequest(agent, base, 'GET', `/orgs/${tenant.org.slug}`, { authorization: `Bearer ${owner}` });
          expect(again.status).toBe(200);
          expect(again.reusedSocket).toBe(true);
        }
      } finally {
        agent.destroy();
      }
    });

    it('closes the connection too when a body without Content-Length runs over as it streams', async () => {
      const { socket, closed } = await rawProjectCreate('Transfer-Encoding: chunked');
      const chunk = 'x'.repeat(64 * 1024);
      for (let i = 0; i < 20; i++) socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
      socket.write('0\r\n\r\n');
      const [head] = (await closed).split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 413 /);
      expect(head!.toLowerCase()).toContain('connection: close');
    });
  });

  describe('a request without a body', () => {
    let base: string;
    let agent: http.Agent;
    beforeAll(async () => {
      base = await api.listen();
      agent = new http.Agent({ keepAlive: true });
    });
    afterAll(() => agent.destroy());
    const json = () => ({ authorization: `Bearer ${owner}`, 'content-type': 'application/json' });

    it('is taken as having none, though it says Content-Type: application/json (DELETE)', async () => {
      await api.call('POST', `${proj}/entity-types`, { token: owner, body: { kind: 'EntityType', name: 'gone', states: ['a'], initialState: 'a' } });
      const response = await wireRequest(agent, base, 'DELETE', `${proj}/entity-types/gone`, json());
      expect(response.status, response.body).toBe(200);
      expect(JSON.parse(response.body)).toEqual({ deleted: true, name: 'gone' });
    });

    it('triggers an action whose body is optional, with no body or a zero-length one', async () => {
      const none = await wireRequest(agent, base, 'POST', `${env}/entities/vm-1/actions/restart`, json());
      expect(none.status, none.body).toBe(202);
      expect(JSON.parse(none.body).parameters).toEqual({ size: 'small' });
      const empty = await wireRequest(agent, base, 'POST', `${env}/entities/vm-1/actions/restart`, json(), '');
      expect(empty.status, empty.body).toBe(202);
    });

    it('is 400 validation_failed, not invalid_json, where the route requires a body', async () => {
      const response = await wireRequest(agent, base, 'POST', `${proj}/entity-types`, json(), '');
      expect(response.status).toBe(400);
      expect(JSON.parse(response.body)).toMatchObject({ code: 'validation_failed' });
      // in-process too: an empty string body is no body
      expectError(await api.call('POST', `${proj}/entity-types`, { token: owner, rawBody: '' }), 400, 'validation_failed');
    });

    it('still refuses a body of only whitespace as invalid_json: it is a body, and not JSON', async () => {
      expectError(await api.call('POST', `${env}/entities/vm-1/actions/restart`, { token: owner, rawBody: '  ' }), 400, 'invalid_json');
    });
  });
});
