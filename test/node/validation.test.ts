import { createRoute, z } from '@hono/zod-openapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AppEnv } from '../../src/context';
import { ApiRoutes, validationHook } from '../../src/http/validation';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, mintToken, type Tenant } from '../support/fixtures';

/**
 * Path and query parameters are checked by ApiRoutes (src/http/validation.ts),
 * in one synchronous step, not through @hono/zod-validator: the answers and
 * the document must be what the library gave.
 */
describe('path and query validation', () => {
  let api: TestApi;
  let tenant: Tenant;
  let token: string;
  const env = () => `/${tenant.org.slug}/${tenant.project.slug}/envs/default`;

  beforeAll(async () => {
    api = await createTestApi();
    tenant = await createTenant(api);
    token = await mintToken(api, tenant, { role: 'owner' });
    const type = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/entity-types`, {
      token,
      body: { kind: 'EntityType', name: 'svc', states: ['up'], initialState: 'up' },
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    for (const name of ['a', 'b', 'c']) expect((await api.call('POST', `${env()}/entities`, { token, body: { kind: 'Entity', entityType: 'svc', name } })).status).toBe(201);
  });
  afterAll(() => api?.close());

  it('refuses a path parameter against its schema, naming it', async () => {
    const response = await api.call('GET', `${env()}/relationships/not-a-uuid`, { token });
    expect(response.status).toBe(400);
    expect(response.body).toEqual({
      error: 'invalid param: id Invalid UUID',
      code: 'validation_failed',
      details: [{ path: 'id', message: 'Invalid UUID' }],
    });
  });

  it('refuses a query parameter against its schema, naming it', async () => {
    const response = await api.call('GET', `${env()}/entities?limit=0`, { token });
    expect(response.status).toBe(400);
    expect(response.body).toEqual({
      error: 'invalid query: limit Too small: expected number to be >=1',
      code: 'validation_failed',
      details: [{ path: 'limit', message: 'Too small: expected number to be >=1' }],
    });
  });

  it('hands the route the parsed values: coerced, defaulted, and a repeated name as a list', async () => {
    const page = await api.call('GET', `${env()}/entities?limit=2`, { token });
    expect(page.status).toBe(200);
    expect((page.body as { name: string }[]).map((entity: { name: string }) => entity.name)).toEqual(['a', 'b']);
    // no limit: the default page holds all three
    expect((await api.call('GET', `${env()}/entities`, { token })).body).toHaveLength(3);
    // two labels none of them carry: both are applied, where one string would have been a single filter
    const labelled = await api.call('GET', `${env()}/entities?label=x:1&label=y:2`, { token });
    expect(labelled.status).toBe(200);
    expect(labelled.body).toEqual([]);
    const entity = await api.call('GET', `${env()}/entities/b`, { token });
    expect(entity.status).toBe(200);
    expect(entity.body.name).toBe('b');
  });

  it('still documents every parameter of a checked route', async () => {
    const document = await api.call('GET', '/openapi.json');
    const list = document.body.paths['/{o}/{p}/envs/{envName}/entities'].get;
    const names = (list.parameters as { name: string; in: string }[]).map((parameter) => `${parameter.in}:${parameter.name}`);
    expect(names).toEqual(expect.arrayContaining(['path:o', 'path:p', 'path:envName', 'query:limit', 'query:label', 'query:cursor']));
  });

  it("checks the query, then the path, after the route's own middleware, as the library did; a route with a hook of its own is the library's", async () => {
    const routes = new ApiRoutes<AppEnv>({ defaultHook: validationHook });
    const request = { params: z.object({ id: z.uuid() }), query: z.object({ n: z.coerce.number().int() }) };
    routes.openapi(createRoute({ method: 'get', path: '/checked/{id}', request, responses: { 200: { description: 'ok' } } }), (c) =>
      c.json({ ...c.req.valid('param'), ...c.req.valid('query') }, 200),
    );
    routes.openapi(
      createRoute({ method: 'get', path: '/hooked/{id}', request, responses: { 200: { description: 'ok' } } }),
      (c) => c.json({ ...c.req.valid('param'), ...c.req.valid('query') }, 200),
      (result, c) => (result.success ? undefined : c.json({ hook: result.target }, 422)),
    );
    // a route's own middleware answers before its parameters are read (a caller's check: 401 before 400)
    routes.openapi(
      createRoute({
        method: 'get',
        path: '/guarded/{id}',
        request,
        middleware: [async (c, next) => (c.req.header('x-pass') ? next() : c.json({ guard: 'refused' }, 401))],
        responses: { 200: { description: 'ok' } },
      }),
      (c) => c.json({ ...c.req.valid('param'), ...c.req.valid('query') }, 200),
    );
    routes.onError((error, c) => c.json({ error: error.message }, 400));
    const guarded = await routes.request('/guarded/bad?n=x');
    expect([guarded.status, await guarded.json()]).toEqual([401, { guard: 'refused' }]);
    const passed = await routes.request('/guarded/bad?n=1', { headers: { 'x-pass': '1' } });
    expect(await passed.json()).toEqual({ error: expect.stringMatching(/^invalid param: id /) });
    const id = '5f0c6f8e-8d3e-4d6a-9a43-2b1f0d1e7c11';
    expect(await (await routes.request(`/checked/${id}?n=7`)).json()).toEqual({ id, n: 7 });
    expect(await (await routes.request('/checked/bad?n=x')).json()).toEqual({ error: expect.stringMatching(/^invalid query: n /) });
    expect(await (await routes.request('/checked/bad?n=1')).json()).toEqual({ error: expect.stringMatching(/^invalid param: id /) });
    const hooked = await routes.request('/hooked/bad?n=1');
    expect([hooked.status, await hooked.json()]).toEqual([422, { hook: 'param' }]);
    expect(await (await routes.request(`/hooked/${id}?n=2`)).json()).toEqual({ id, n: 2 });
    const documented = routes.getOpenAPI31Document({ openapi: '3.1.0', info: { title: 't', version: '1' } });
    expect(Object.keys(documented.paths ?? {})).toEqual(['/checked/{id}', '/hooked/{id}', '/guarded/{id}']);
    expect(documented.paths!['/checked/{id}']!.get!.parameters).toHaveLength(2);
  });
});
