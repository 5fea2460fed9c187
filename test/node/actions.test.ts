import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actions, entities, entityMetrics } from '../../src/db/schema';
import { createTenantWithRival, expectError, mintToken, type Tenant } from '../support/fixtures';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';

const ACTION_FIELDS = [
  'name', 'displayName', 'description', 'entityType', 'conditions', 'parameters', 'trigger', 'onSuccess', 'onFailure',
  'timeoutMinutes', 'orgId', 'projectId', 'createdAt', 'updatedAt',
].sort();

let counter = 0;
const freshName = (base: string) => `${base}-${++counter}`;

const webhook = (fields: Record<string, unknown> = {}) => ({ type: 'webhook', url: 'https://hooks.example.com/deploy', ...fields });

const actionBody = (name: string, overrides: Record<string, unknown> = {}) => ({
  kind: 'Action',
  name,
  entityType: 'vm',
  trigger: webhook(),
  ...overrides,
});

const pullRequest = (fields: Record<string, unknown> = {}) => ({
  type: 'pull-request',
  repo: 'acme/infra',
  title: 'Resize {{ entity.name }}',
  files: [{ path: 'vms/{{ entity.name }}.tf', content: 'size = "{{ parameters.size }}"' }],
  ...fields,
});

describe('actions', () => {
  const clock = manualClock(new Date('2026-11-21T10:00:00.000Z'));
  let api: TestApi;
  let tenant: Tenant;
  let other: Tenant;
  let admin: string;
  let viewer: string;
  let member: string;
  let otherOwner: string;
  let proj: string;
  let path: string;

  const create = (name: string, overrides: Record<string, unknown> = {}, token = admin) =>
    api.call('POST', path, { token, body: actionBody(name, overrides) });

  const createEntity = async (name: string, fields: Record<string, unknown> = {}) => {
    const response = await api.call('POST', `${proj}/envs/default/entities`, {
      token: admin,
      body: { kind: 'Entity', entityType: 'vm', name, ...fields },
    });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  };

  beforeAll(async () => {
    api = await createTestApi({ clock });
    ({ tenant, other, otherOwner, tokens: { admin, viewer, member } } = await createTenantWithRival(api, { environments: ['staging'] }));
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    path = `${proj}/actions`;
    for (const [t, token] of [[tenant, admin], [other, otherOwner]] as const) {
      const response = await api.call('POST', `/${t.org.slug}/${t.project.slug}/entity-types`, {
        token,
        body: {
          kind: 'EntityType',
          name: 'vm',
          states: ['provisioning', 'running', 'failed', 'retired'],
          initialState: 'provisioning',
          metrics: [{ name: 'cpu' }],
        },
      });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
    }
  });
  afterAll(() => api.close());

  describe('POST', () => {
    it('creates a webhook action: 201 with the defaults filled and unset optional fields null', async () => {
      const response = await create('restart');
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(Object.keys(response.body).sort()).toEqual(ACTION_FIELDS);
      expect(response.body).toEqual({
        name: 'restart',
        displayName: null,
        description: null,
        entityType: 'vm',
        conditions: [],
        parameters: [],
        trigger: {
          type: 'webhook',
          url: 'https://hooks.example.com/deploy',
          method: 'POST',
          retry: { maxAttempts: 3, backoff: 'exponential', initialDelayMs: 1000 },
        },
        onSuccess: null,
        onFailure: null,
        timeoutMinutes: 60,
        orgId: tenant.org.id,
        projectId: tenant.project.id,
        createdAt: '2026-11-21T10:00:00.000Z',
        updatedAt: '2026-11-21T10:00:00.000Z',
      });
      expect((await api.call('GET', `${path}/restart`, { token: viewer })).body).toEqual(response.body);
    });

    it('keeps every field given, templates included, without checking their references', async () => {
      const body = actionBody('deploy', {
        displayName: 'Deploy',
        description: 'Ships the build',
        conditions: [{ key: 'state', operator: 'eq', value: 'running' }],
        parameters: [{ name: 'version', type: 'string', required: true }],
        trigger: webhook({
          url: 'https://ci.example.com/run/{{ entity.name }}?v={{ parameters.version }}',
          method: 'PUT',
          headers: { 'X-Run': '{{ run.id }}', 'X-Unknown': '{{ nothing.here }}' },
          payload: { entity: '{{ entity.id }}', callback: '{{ run.callbackUrl }}', nested: [1, { ok: true }] },
          retry: { maxAttempts: 5, backoff: 'fixed', initialDelayMs: 250 },
          signingSecret: '{{ secrets.signing }}',
        }),
        onSuccess: 'running',
        onFailure: 'failed',
        timeoutMinutes: 15,
      });
      const response = await api.call('POST', path, { token: admin, body });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      const { kind: _kind, entityType, ...fields } = body;
      expect(response.body).toMatchObject({ ...fields, entityType });
    });

    it('fills the retry defaults one field at a time', async () => {
      const response = await create(freshName('retry'), { trigger: webhook({ retry: { backoff: 'fixed' } }) });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.trigger.retry).toEqual({ maxAttempts: 3, backoff: 'fixed', initialDelayMs: 1000 });
    });

    it('accepts a pull-request trigger, with and without the optional fields', async () => {
      const minimal = await create(freshName('pr'), { trigger: pullRequest() });
      expect(minimal.status, JSON.stringify(minimal.body)).toBe(201);
      expect(minimal.body.trigger).toEqual(pullRequest());
      const full = pullRequest({
        base: 'main',
        branch: 'resize/{{ entity.name }}',
        body: 'Requested by {{ run.id }}',
        webhookSecret: '{{ secrets.gh-webhook }}',
        auth: { token: '{{ secrets.gh-token }}' },
        postMergeDispatch: { eventType: 'apply', repo: 'acme/deployer', payload: { vm: '{{ entity.name }}' } },
      });
      const response = await create(freshName('pr'), { trigger: full, onSuccess: 'running' });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.trigger).toEqual(full);
    });

    it.each([
      ['bearer', { type: 'bearer', token: '{{ secrets.api-token }}' }, { type: 'bearer', token: '{{ secrets.api-token }}' }],
      ['basic', { type: 'basic', username: 'ci', password: '{{ secrets.ci-pass }}' }, { type: 'basic', username: 'ci', password: '{{ secrets.ci-pass }}' }],
      ['header', { type: 'header', name: 'X-Api-Key', value: '{{secrets.key}}' }, { type: 'header', name: 'X-Api-Key', value: '{{secrets.key}}' }],
      [
        'jwt',
        { type: 'jwt', secret: '{{ secrets.jwt }}' },
        { type: 'jwt', secret: '{{ secrets.jwt }}', algorithm: 'HS256', expiresInSeconds: 300 },
      ],
      [
        'jwt with claims',
        { type: 'jwt', secret: '{{ secrets.jwt }}', algorithm: 'HS256', claims: { sub: '{{ entity.id }}' }, expiresInSeconds: 60 },
        { type: 'jwt', secret: '{{ secrets.jwt }}', algorithm: 'HS256', claims: { sub: '{{ entity.id }}' }, expiresInSeconds: 60 },
      ],
    ])('accepts %s auth given as secret references, and shows them', async (_label, auth, shown) => {
      const response = await create(freshName('auth'), { trigger: webhook({ auth }) });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.trigger.auth).toEqual(shown);
    });

    it.each([
      ['bearer', { type: 'bearer', token: 'sk_live_123' }, 'token'],
      ['basic', { type: 'basic', username: 'ci', password: 'hunter2' }, 'password'],
      ['header', { type: 'header', name: 'X-Api-Key', value: 'k-123' }, 'value'],
      ['jwt', { type: 'jwt', secret: 'shhh' }, 'secret'],
      ['bearer mixing a literal with a reference', { type: 'bearer', token: 'abc{{ secrets.x }}' }, 'token'],
    ])('stores a literal %s credential but answers it redacted', async (_label, auth, field) => {
      const name = freshName('literal');
      const response = await create(name, { trigger: webhook({ auth }) });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.trigger.auth[field]).toBe('[redacted]');
      for (const read of [
        (await api.call('GET', `${path}/${name}`, { token: viewer })).body,
        (await api.call('GET', path, { token: viewer })).body.find((a: { name: string }) => a.name === name),
      ]) {
        expect(read.trigger.auth[field]).toBe('[redacted]');
        expect(JSON.stringify(read)).not.toContain((auth as Record<string, string>)[field]);
      }
      // the run engine reads the row: the literal is kept there
      const [row] = await api.db.select().from(actions).where(and(eq(actions.projectId, tenant.project.id), eq(actions.name, name)));
      expect((row!.trigger as { auth: Record<string, string> }).auth[field]).toBe((auth as Record<string, string>)[field]);
    });

    it('redacts a literal pull-request token', async () => {
      const response = await create(freshName('pr-literal'), { trigger: pullRequest({ auth: { token: 'ghp_literal' } }) });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.trigger.auth).toEqual({ token: '[redacted]' });
    });

    it('409 already_exists for a taken name; the same name in another project is fine', async () => {
      const name = freshName('dup');
      expect((await create(name)).status).toBe(201);
      expectError(await create(name, { displayName: 'Again' }), 409, 'already_exists');
      const elsewhere = await api.call('POST', `/${other.org.slug}/${other.project.slug}/actions`, {
        token: otherOwner,
        body: actionBody(name),
      });
      expect(elsewhere.status).toBe(201);
    });

    it('400 invalid_reference for an unknown entity type, or onSuccess/onFailure not among its states', async () => {
      expectError(await create(freshName('x'), { entityType: 'nope' }), 400, 'invalid_reference');
      const states = await create(freshName('x'), { onSuccess: 'running', onFailure: 'exploded' });
      expectError(states, 400, 'invalid_reference');
      expect(states.body.details).toEqual([{ path: 'onFailure', message: expect.stringContaining('exploded') }]);
      expectError(await create(freshName('x'), { onSuccess: 'gone' }), 400, 'invalid_reference');
    });

    it.each([
      ['a relative url', { trigger: webhook({ url: '/hooks' }) }],
      ['an ftp url', { trigger: webhook({ url: 'ftp://example.com/x' }) }],
      ['an unknown method', { trigger: webhook({ method: 'TRACE' }) }],
      ['an unknown auth type', { trigger: webhook({ auth: { type: 'oauth', token: 'x' } }) }],
      ['bearer without a token', { trigger: webhook({ auth: { type: 'bearer' } }) }],
      ['basic without a password', { trigger: webhook({ auth: { type: 'basic', username: 'u' } }) }],
      ['a jwt algorithm other than HS256', { trigger: webhook({ auth: { type: 'jwt', secret: 's', algorithm: 'none' } }) }],
      ['the redaction marker as a credential', { trigger: webhook({ auth: { type: 'bearer', token: '[redacted]' } }) }],
      ['a literal signingSecret', { trigger: webhook({ signingSecret: 'plain' }) }],
      ['retry maxAttempts 0', { trigger: webhook({ retry: { maxAttempts: 0 } }) }],
      ['an unknown backoff', { trigger: webhook({ retry: { backoff: 'linear' } }) }],
      ['a bad header name', { trigger: webhook({ headers: { 'bad header': 'x' } }) }],
      ['an unknown trigger type', { trigger: { type: 'email', to: 'a@b.c' } }],
      ['a pull request without files', { trigger: pullRequest({ files: [] }) }],
      ['a pull request without a title', { trigger: pullRequest({ title: undefined }) }],
      ['a malformed repo', { trigger: pullRequest({ repo: 'not a repo' }) }],
      ['a literal webhookSecret', { trigger: pullRequest({ webhookSecret: 'plain' }) }],
      ['postMergeDispatch without eventType', { trigger: pullRequest({ postMergeDispatch: { repo: 'a/b' } }) }],
      ['an unknown field', { surprise: true }],
      ['a wrong kind', { kind: 'EntityType' }],
      ['timeoutMinutes 0', { timeoutMinutes: 0 }],
      ['a bad condition key', { conditions: [{ key: 'color', operator: 'eq', value: 'x' }] }],
      ['gt without a number', { conditions: [{ key: 'metrics.cpu', operator: 'gt', value: 'high' }] }],
      ['duplicate parameters', { parameters: [{ name: 'a', type: 'string' }, { name: 'a', type: 'number' }] }],
      ['no trigger', { trigger: undefined }],
    ])('400 validation_failed for %s', async (_label, overrides) => {
      expectError(await create(freshName('bad'), overrides), 400, 'validation_failed');
    });

    it('403 for a viewer and a member (catalog:write); 404 for another tenant', async () => {
      expectError(await create(freshName('x'), {}, viewer), 403, 'forbidden');
      expectError(await create(freshName('x'), {}, member), 403, 'forbidden');
      expectError(await create(freshName('x'), {}, otherOwner), 404, 'not_found');
    });
  });

  describe('webhook URLs (docs/decisions.md, Outbound URLs and the callback base)', () => {
    const urlProblem = (response: { body: { details?: { path: string; message: string }[] } }) =>
      response.body.details?.find((detail) => detail.path === 'trigger.url')?.message ?? '';

    it.each([
      'http://user:pw@hooks.example.com/deploy',
      'https://token@hooks.example.com/deploy',
      'https://:pw@hooks.example.com/deploy',
      'http://{{ secrets.hook-user }}:{{ secrets.hook-password }}@hooks.example.com/deploy',
      'http://{{secrets.x}}@hooks.example.com/',
    ])('refuses credentials in the URL at definition, pointing to auth: %s', async (url) => {
      const name = freshName('userinfo');
      const response = await create(name, { trigger: webhook({ url }) });
      expectError(response, 400, 'validation_failed');
      expect(urlProblem(response)).toContain("trigger's auth");
      expectError(await api.call('GET', `${path}/${name}`, { token: viewer }), 404, 'not_found');
      // nor may a PUT bring one in
      expect((await create(name)).status).toBe(201);
      const put = await api.call('PUT', `${path}/${name}`, { token: admin, body: actionBody(name, { trigger: webhook({ url }) }) });
      expectError(put, 400, 'validation_failed');
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).body.trigger.url).toBe('https://hooks.example.com/deploy');
    });

    it.each([
      'http://{{parameters.h}}/',
      'http://{{entity.name}}.example.com/x',
      'https://hooks.example.com{{parameters.suffix}}/deploy',
      'https://{{secrets.host}}:8443/deploy',
    ])('refuses a template in the host at definition: %s', async (url) => {
      const response = await create(freshName('host-template'), { trigger: webhook({ url }) });
      expectError(response, 400, 'validation_failed');
      expect(urlProblem(response)).toContain('template in its host');
    });

    it('accepts templates in the path and query', async () => {
      const url = 'https://hooks.example.com/{{ entity.name }}/deploy?size={{parameters.size}}#{{ run.id }}';
      const response = await create(freshName('path-template'), { trigger: webhook({ url }) });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      expect(response.body.trigger.url).toBe(url);
    });

    it.each([
      ['https://deploy:hunter2-url-pw@hooks.example.com/x?e={{ entity.name }}', 'https://[redacted]@hooks.example.com/x?e={{ entity.name }}'],
      ['http://hunter2-url-pw@hooks.example.com', 'http://[redacted]@hooks.example.com'],
      ['http:\\\\deploy:hunter2-url-pw@hooks.example.com/x', 'http:\\\\[redacted]@hooks.example.com/x'],
      ['https://deploy:hunter2-url-pw@a@hooks.example.com/x', 'https://[redacted]@hooks.example.com/x'],
    ])('a stored URL with credentials (written before they were refused) is shown redacted: %s', async (stored, shown) => {
      const name = freshName('stored-userinfo');
      expect((await create(name)).status).toBe(201);
      const [row] = await api.db.select().from(actions).where(and(eq(actions.projectId, tenant.project.id), eq(actions.name, name)));
      await api.db
        .update(actions)
        .set({ trigger: { ...(row!.trigger as Record<string, unknown>), url: stored } })
        .where(eq(actions.id, row!.id));
      const one = await api.call('GET', `${path}/${name}`, { token: viewer });
      const list = await api.call('GET', path, { token: viewer });
      expect(one.body.trigger.url).toBe(shown);
      expect(list.body.find((action: { name: string }) => action.name === name).trigger.url).toBe(shown);
      for (const response of [one, list]) expect(JSON.stringify(response.body)).not.toContain('hunter2-url-pw');
      // the shown URL cannot be sent back: it still has userinfo
      const { orgId: _o, projectId: _p, createdAt: _c, updatedAt: _u, ...fields } = one.body;
      expectError(await api.call('PUT', `${path}/${name}`, { token: admin, body: { kind: 'Action', ...fields } }), 400, 'validation_failed');
      // and its trigger is refused before anything is written or sent, without quoting the URL
      await createEntity(name);
      const trigger = await api.call('POST', `${proj}/envs/default/entities/${name}/actions/${name}`, { token: admin });
      expectError(trigger, 400, 'outbound_url_refused');
      expect(trigger.body.error).toContain('credentials in the URL are not allowed');
      expect(JSON.stringify(trigger.body)).not.toContain('hunter2-url-pw');
      expect((await api.call('GET', `${proj}/envs/default/action-runs?action=${name}`, { token: viewer })).body).toEqual([]);
    });
  });

  describe('GET', () => {
    it('lists by name; 404 not_found for an unknown action', async () => {
      const list = await api.call('GET', path, { token: viewer });
      expect(list.status).toBe(200);
      const names = list.body.map((a: { name: string }) => a.name);
      expect(names).toEqual([...names].sort());
      expect(names).toContain('restart');
      expectError(await api.call('GET', `${path}/nope`, { token: viewer }), 404, 'not_found');
      expectError(await api.call('GET', `${path}/restart`, { token: otherOwner }), 404, 'not_found');
    });
  });

  describe('PUT', () => {
    it('replaces the whole definition: omitted fields return to their defaults', async () => {
      const name = freshName('put');
      const created = await create(name, {
        displayName: 'Before',
        timeoutMinutes: 5,
        onSuccess: 'running',
        trigger: webhook({ method: 'PATCH', retry: { maxAttempts: 9 } }),
      });
      expect(created.status).toBe(201);
      clock.advance(60_000);
      const response = await api.call('PUT', `${path}/${name}`, { token: admin, body: actionBody(name, { trigger: pullRequest() }) });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toMatchObject({
        displayName: null,
        timeoutMinutes: 60,
        onSuccess: null,
        trigger: pullRequest(),
        createdAt: created.body.createdAt,
        updatedAt: new Date(Date.parse(created.body.createdAt) + 60_000).toISOString(),
      });
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).body).toEqual(response.body);
    });

    it('400 when the body renames, names an unknown type or state, or sends the redaction marker back; 404 for an unknown action', async () => {
      const name = freshName('put');
      expect((await create(name, { trigger: webhook({ auth: { type: 'bearer', token: 'literal' } }) })).status).toBe(201);
      const put = (body: unknown, target = name) => api.call('PUT', `${path}/${target}`, { token: admin, body });
      expectError(await put(actionBody('other-name')), 400, 'validation_failed');
      expectError(await put(actionBody(name, { entityType: 'nope' })), 400, 'invalid_reference');
      expectError(await put(actionBody(name, { onFailure: 'nope' })), 400, 'invalid_reference');
      const shown = (await api.call('GET', `${path}/${name}`, { token: viewer })).body;
      const { orgId: _o, projectId: _p, createdAt: _c, updatedAt: _u, entityType, ...fields } = shown;
      expectError(await put({ kind: 'Action', ...fields, entityType }), 400, 'validation_failed');
      expectError(await put(actionBody('missing'), 'missing'), 404, 'not_found');
      expectError(await api.call('PUT', `${path}/${name}`, { token: viewer, body: actionBody(name) }), 403, 'forbidden');
    });
  });

  describe('DELETE', () => {
    it('deletes, then the action is gone (404); 403 for a viewer', async () => {
      const name = freshName('del');
      expect((await create(name)).status).toBe(201);
      expectError(await api.call('DELETE', `${path}/${name}`, { token: viewer }), 403, 'forbidden');
      const response = await api.call('DELETE', `${path}/${name}`, { token: admin });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ deleted: true, name });
      expectError(await api.call('GET', `${path}/${name}`, { token: viewer }), 404, 'not_found');
      expectError(await api.call('DELETE', `${path}/${name}`, { token: admin }), 404, 'not_found');
    });

    it('an entity type with actions cannot be deleted: 409 still_referenced, and it can once they are gone', async () => {
      const typePath = `${proj}/entity-types`;
      const typeName = freshName('acted-on');
      const type = await api.call('POST', typePath, {
        token: admin,
        body: { kind: 'EntityType', name: typeName, states: ['a'], initialState: 'a' },
      });
      expect(type.status).toBe(201);
      const name = freshName('uses-type');
      expect((await create(name, { entityType: typeName })).status).toBe(201);
      const refused = await api.call('DELETE', `${typePath}/${typeName}`, { token: admin });
      expectError(refused, 409, 'still_referenced');
      expect(refused.body.error).toContain(`"${name}"`);
      expect((await api.call('GET', `${path}/${name}`, { token: viewer })).status).toBe(200);
      expect((await api.call('DELETE', `${path}/${name}`, { token: admin })).status).toBe(200);
      expect((await api.call('DELETE', `${typePath}/${typeName}`, { token: admin })).status).toBe(200);
    });
  });

  it('an entity type cannot drop a state an action moves entities into: 409 still_referenced', async () => {
    const typePath = `${proj}/entity-types`;
    const typeName = freshName('stateful');
    const definition = (states: string[]) => ({ kind: 'EntityType', name: typeName, states, initialState: 'idle' });
    expect((await api.call('POST', typePath, { token: admin, body: definition(['idle', 'deployed', 'broken']) })).status).toBe(201);
    const name = freshName('deploys');
    expect((await create(name, { entityType: typeName, onSuccess: 'deployed', onFailure: 'broken' })).status).toBe(201);
    for (const states of [['idle', 'broken'], ['idle', 'deployed']]) {
      const refused = await api.call('PUT', `${typePath}/${typeName}`, { token: admin, body: definition(states) });
      expectError(refused, 409, 'still_referenced');
      expect(refused.body.error).toContain(`"${name}"`);
    }
    // adding a state is fine
    expect((await api.call('PUT', `${typePath}/${typeName}`, { token: admin, body: definition(['idle', 'deployed', 'broken', 'paused']) })).status).toBe(200);
  });

  it('documents the routes and the definition schemas in /openapi.json', async () => {
    const response = await api.call('GET', '/openapi.json');
    expect(response.status).toBe(200);
    expect(Object.keys(response.body.paths)).toEqual(
      expect.arrayContaining(['/{o}/{p}/actions', '/{o}/{p}/actions/{name}', '/{o}/{p}/envs/{envName}/entities/{name}/actions']),
    );
    expect(Object.keys(response.body.components.schemas)).toEqual(
      expect.arrayContaining(['Action', 'ActionRequest', 'ActionTrigger', 'ActionWebhookAuth', 'AvailableAction']),
    );
  });

  describe('GET ENV/entities/{name}/actions', () => {
    const typeName = 'server';
    const available = (entity: string, token = viewer, env = 'default') =>
      api.call('GET', `${proj}/envs/${env}/entities/${encodeURIComponent(entity)}/actions`, { token });

    beforeAll(async () => {
      const type = await api.call('POST', `${proj}/entity-types`, {
        token: admin,
        body: {
          kind: 'EntityType',
          name: typeName,
          states: ['up', 'down'],
          initialState: 'up',
          properties: [{ name: 'tier', type: 'string' }],
          metrics: [{ name: 'cpu' }],
        },
      });
      expect(type.status, JSON.stringify(type.body)).toBe(201);
      const define = async (name: string, fields: Record<string, unknown>) => {
        const response = await create(name, { entityType: typeName, ...fields });
        expect(response.status, JSON.stringify(response.body)).toBe(201);
      };
      await define('s-always', { displayName: 'Always', description: 'No conditions', trigger: pullRequest() });
      await define('s-when-up', {
        conditions: [{ key: 'state', operator: 'eq', value: 'up' }],
        parameters: [{ name: 'reason', type: 'string' }],
      });
      await define('s-when-down', { conditions: [{ key: 'state', operator: 'eq', value: 'down' }] });
      await define('s-team-payments', { conditions: [{ key: 'labels.team', operator: 'eq', value: 'payments' }] });
      await define('s-hot', { conditions: [{ key: 'metrics.cpu', operator: 'gt', value: 80 }] });
      await define('s-gold-and-up', {
        conditions: [
          { key: 'properties.tier', operator: 'eq', value: 'gold' },
          { key: 'state', operator: 'eq', value: 'up' },
        ],
      });
    });

    const setCpu = async (entityId: string, value: number) => {
      await api.db
        .insert(entityMetrics)
        .values({ entityId, name: 'cpu', value })
        .onConflictDoUpdate({ target: [entityMetrics.entityId, entityMetrics.name], set: { value } });
    };

    it('lists, by name, the actions of the entity type whose conditions all hold', async () => {
      const entity = await createEntity(freshName('srv'), { entityType: typeName });
      const response = await available(entity.name);
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toEqual([
        {
          name: 's-always',
          displayName: 'Always',
          description: 'No conditions',
          parameters: [],
          triggerType: 'pull-request',
        },
        {
          name: 's-when-up',
          displayName: null,
          description: null,
          parameters: [{ name: 'reason', type: 'string' }],
          triggerType: 'webhook',
        },
      ]);
    });

    it('evaluates state, labels, properties and metrics (gt)', async () => {
      const entity = await createEntity(freshName('srv'), {
        entityType: typeName,
        state: 'down',
        labels: { team: 'payments' },
        properties: { tier: 'gold' },
      });
      const names = async () => (await available(entity.name)).body.map((a: { name: string }) => a.name);
      expect(await names()).toEqual(['s-always', 's-team-payments', 's-when-down']);
      await setCpu(entity.id, 80);
      expect(await names()).not.toContain('s-hot');
      await setCpu(entity.id, 80.5);
      expect(await names()).toEqual(['s-always', 's-hot', 's-team-payments', 's-when-down']);
      await api.db.update(entities).set({ state: 'up' }).where(eq(entities.id, entity.id));
      expect(await names()).toEqual(['s-always', 's-gold-and-up', 's-hot', 's-team-payments', 's-when-up']);
    });

    it('an entity of a type without actions has none; actions of other types are not offered', async () => {
      const entity = await createEntity(freshName('vm'), { state: 'running' });
      const response = await available(entity.name);
      expect(response.status).toBe(200);
      const names = response.body.map((a: { name: string }) => a.name);
      expect(names).toContain('restart');
      expect(names.some((n: string) => n.startsWith('s-'))).toBe(false);
      const lone = await api.call('POST', `${proj}/entity-types`, {
        token: admin,
        body: { kind: 'EntityType', name: 'lonely', states: ['x'], initialState: 'x' },
      });
      expect(lone.status).toBe(201);
      await createEntity('lonely-1', { entityType: 'lonely' });
      expect((await available('lonely-1')).body).toEqual([]);
    });

    it('404 for a missing entity, one in another environment, another tenant, or one outside the caller\'s cells', async () => {
      const entity = await createEntity(freshName('srv'), { entityType: typeName });
      expectError(await available('nope'), 404, 'not_found');
      expectError(await available(entity.name, viewer, 'staging'), 404, 'not_found');
      expectError(await available(entity.name, otherOwner), 404, 'not_found');
      const cell = await api.call('POST', `${proj}/cells`, { token: admin, body: { kind: 'Cell', name: 'empty-cell', entityType: typeName } });
      expect(cell.status, JSON.stringify(cell.body)).toBe(201);
      const scoped = await mintToken(api, tenant, { role: 'admin', cellScopes: ['empty-cell'], as: admin });
      expectError(await available(entity.name, scoped), 404, 'not_found');
    });

    it('403 forbidden for a token pinned to another environment', async () => {
      const entity = await createEntity(freshName('srv'), { entityType: typeName });
      const pinned = await mintToken(api, tenant, { role: 'viewer', envName: 'staging', as: admin });
      expectError(await available(entity.name, pinned), 403, 'forbidden');
    });

    it('401 without a token', async () => {
      expectError(await api.call('GET', `${proj}/envs/default/entities/x/actions`), 401, 'unauthorized');
    });
  });
});
