import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { guardedFetch, NOT_PUBLIC } from '../../src/node/outbound-fetch';

/**
 * The Node host's outbound call for webhook attempts (src/node/outbound-fetch.ts):
 * undici's dispatcher instead of fetch, answering with the status and headers,
 * against real receivers on 127.0.0.1.
 */
describe('the webhook attempts’ outbound call', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  async function receiver(handle: (req: IncomingMessage, res: ServerResponse, body: string) => void) {
    const seen: { method: string; url: string; headers: IncomingMessage['headers']; body: string }[] = [];
    let connections = 0;
    const server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
        handle(req, res, body);
      });
    });
    server.on('connection', () => connections++);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}`, seen, connections: () => connections };
  }

  const send = guardedFetch(['127.0.0.1']);

  it('sends method, path, query, headers and body, and answers with the status and headers', async () => {
    const r = await receiver((_req, res) => res.writeHead(429, { 'retry-after': '7', 'x-echo': 'yes' }).end('slow down'));
    const answer = await send(`${r.url}/hook?a=1&b=two`, {
      method: 'PUT',
      headers: new Headers({ 'content-type': 'application/json', 'webhook-id': 'run-1' }),
      body: '{"vm":"web-1"}',
    });
    expect(answer.status).toBe(429);
    expect(answer.headers.get('retry-after')).toBe('7');
    expect(answer.headers.get('x-echo')).toBe('yes');
    expect(answer.headers.get('Retry-After')).toBe('7');
    expect(answer.headers.get('x-absent')).toBeNull();
    expect(r.seen).toEqual([
      expect.objectContaining({ method: 'PUT', url: '/hook?a=1&b=two', body: '{"vm":"web-1"}', headers: expect.objectContaining({ 'webhook-id': 'run-1', 'content-type': 'application/json' }) }),
    ]);
  });

  it('reads headers as Headers.get does: a repeated one joined, a name that is no header absent', async () => {
    const r = await receiver((_req, res) => {
      res.setHeader('x-many', ['a', 'b']);
      res.end();
    });
    const answer = await send(`${r.url}/hook`, { method: 'POST', body: '{}' });
    expect(answer.headers.get('x-many')).toBe(new Headers([['x-many', 'a'], ['x-many', 'b']]).get('x-many'));
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) expect(answer.headers.get(name)).toBeNull();
  });

  it('follows no redirect: a 302 is the answer, and only the first URL is asked', async () => {
    const r = await receiver((req, res) => (req.url === '/moved' ? res.writeHead(302, { location: '/elsewhere' }).end() : res.end('reached')));
    const answer = await send(`${r.url}/moved`, { method: 'POST', body: '{}' });
    expect(answer.status).toBe(302);
    expect(answer.headers.get('location')).toBe('/elsewhere');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(r.seen.map((request) => request.url)).toEqual(['/moved']);
  });

  it('reads and drops small bodies, so one connection serves attempt after attempt; a large body closes its own', async () => {
    const r = await receiver((req, res) => res.end(req.url === '/large' ? 'x'.repeat(256 * 1024) : 'ok'));
    // the body is dropped in the background, after the answer: the connection is free again once it is read
    const bodyRead = () => new Promise((resolve) => setTimeout(resolve, 20));
    for (let i = 0; i < 5; i++) {
      expect((await send(`${r.url}/small`, { method: 'POST', body: '{}' })).status).toBe(200);
      await bodyRead();
    }
    expect(r.connections()).toBe(1);
    // past the limit the connection is closed rather than read to its end: the next attempt needs a new one
    expect((await send(`${r.url}/large`, { method: 'POST', body: '{}' })).status).toBe(200);
    await bodyRead();
    expect((await send(`${r.url}/small`, { method: 'POST', body: '{}' })).status).toBe(200);
    expect(r.connections()).toBeGreaterThan(1);
  });

  it('fails as fetch does: a TypeError caused by the network error, or the signal’s reason once it aborts', async () => {
    const closed = await receiver(() => {});
    const port = new URL(closed.url).port;
    await new Promise((resolve) => servers.pop()!.close(resolve));
    const refused = await send(`http://127.0.0.1:${port}/hook`, { method: 'POST', body: '{}' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(TypeError);
    expect((refused as TypeError & { cause: { code: string } }).cause.code).toBe('ECONNREFUSED');

    const silent = await receiver(() => {}); // never answers
    const timedOut = await send(`${silent.url}/hook`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(100) }).catch((error: unknown) => error);
    expect((timedOut as Error).name).toBe('TimeoutError');
  });

  it('refuses, at connection time, a name that resolves to an address that is not public', async () => {
    const r = await receiver((_req, res) => res.end());
    const port = new URL(r.url).port;
    const rebinding = guardedFetch([], (_hostname, _options, callback) => callback(null, [{ address: '127.0.0.1', family: 4 }]));
    const refused = await rebinding(`http://hooks.example.test:${port}/hook`, { method: 'POST', body: '{}' }).catch((error: unknown) => error);
    expect((refused as TypeError & { cause: { code: string } }).cause.code).toBe(NOT_PUBLIC);
    expect(r.seen).toEqual([]);
  });
});
