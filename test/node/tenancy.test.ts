import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApi, type TestApi } from '../support/node-app';
import { createTenant, expectError, mintToken, uniqueSlug } from '../support/fixtures';

const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

describe('organizations, projects and environments (bootstrap mode)', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await createTestApi();
  });
  afterAll(() => api.close());

  it('creates an organization and reads it by slug and by id', async () => {
    const created = await api.call('POST', '/orgs', { body: { name: 'Acme Inc.', slug: 'acme' } });
    expect(created.status).toBe(201);
    expect(Object.keys(created.body).sort()).toEqual(['createdAt', 'id', 'name', 'slug']);
    expect(created.body).toMatchObject({ name: 'Acme Inc.', slug: 'acme' });
    expect(created.body.createdAt).toMatch(RFC3339_MS);
    const bySlug = await api.call('GET', '/orgs/acme');
    const byId = await api.call('GET', `/orgs/${created.body.id}`);
    expect(bySlug.status).toBe(200);
    expect(bySlug.body).toEqual(created.body);
    expect(byId.body).toEqual(created.body);
  });

  it('refuses a duplicate organization slug with 409 already_exists', async () => {
    await api.call('POST', '/orgs', { body: { name: 'One', slug: 'dupe-org' } });
    expectError(await api.call('POST', '/orgs', { body: { name: 'Two', slug: 'dupe-org' } }), 409, 'already_exists');
  });

  it('keeps exactly one of two concurrent creates of the same slug', async () => {
    const results = await Promise.all(
      [1, 2, 3].map((n) => api.call('POST', '/orgs', { body: { name: `Race ${n}`, slug: 'race-org' } })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409]);
  });

  it.each([
    ['uppercase', 'Acme'],
    ['a space', 'ac me'],
    ['a leading hyphen', '-acme'],
    ['a UUID shape', '0b5e8a5e-1111-4222-8333-944445555666'],
    ['a reserved word', 'admin'],
    ['64 characters', 'a'.repeat(64)],
  ])('refuses an organization slug with %s', async (_, slug) => {
    expectError(await api.call('POST', '/orgs', { body: { name: 'X', slug } }), 400, 'validation_failed');
  });

  it('answers 404 for an unknown organization', async () => {
    expectError(await api.call('GET', '/orgs/nobody-here'), 404, 'not_found');
    expectError(await api.call('GET', '/orgs/00000000-0000-4000-8000-000000000000'), 404, 'not_found');
  });

  it('creates a project with its default environment', async () => {
    const org = uniqueSlug('org');
    await api.call('POST', '/orgs', { body: { name: 'Org', slug: org } });
    const project = await api.call('POST', `/orgs/${org}/projects`, { body: { name: 'Platform', slug: 'platform' } });
    expect(project.status).toBe(201);
    expect(Object.keys(project.body).sort()).toEqual(['createdAt', 'id', 'name', 'orgId', 'slug']);
    const envs = await api.call('GET', `/${org}/platform/envs`);
    expect(envs.status).toBe(200);
    expect(envs.body.map((e: { name: string }) => e.name)).toEqual(['default']);
    expect(envs.body[0]).toMatchObject({ orgId: project.body.orgId, projectId: project.body.id });
    const list = await api.call('GET', `/orgs/${org}/projects`);
    expect(list.body).toEqual([project.body]);
  });

  it('scopes project slugs to their organization', async () => {
    const a = await createTenant(api, { project: 'shared' });
    const b = await createTenant(api, { project: 'shared' });
    expect(a.project.id).not.toBe(b.project.id);
    expectError(
      await api.call('POST', `/orgs/${a.org.slug}/projects`, { body: { name: 'again', slug: 'shared' } }),
      409,
      'already_exists',
    );
  });

  it('answers 404 for projects of an unknown organization', async () => {
    expectError(await api.call('GET', '/orgs/ghost-org/projects'), 404, 'not_found');
    expectError(await api.call('POST', '/orgs/ghost-org/projects', { body: { name: 'x', slug: 'x' } }), 404, 'not_found');
    expectError(await api.call('GET', '/ghost-org/platform/envs'), 404, 'not_found');
  });

  it('creates, lists and deletes environments; never the default', async () => {
    const tenant = await createTenant(api);
    const base = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
    const staging = await api.call('POST', base, { body: { name: 'staging' } });
    expect(staging.status).toBe(201);
    expect(staging.body).toMatchObject({ name: 'staging', projectId: tenant.project.id, orgId: tenant.org.id });
    expectError(await api.call('POST', base, { body: { name: 'staging' } }), 409, 'already_exists');
    expectError(await api.call('POST', base, { body: { name: '-bad name' } }), 400, 'validation_failed');
    expectError(await api.call('POST', base, { body: {} }), 400, 'validation_failed');
    const names = (await api.call('GET', base)).body.map((e: { name: string }) => e.name);
    expect(names).toEqual(['default', 'staging']);

    expectError(await api.call('DELETE', `${base}/default`), 400, 'default_environment_protected');
    const deleted = await api.call('DELETE', `${base}/staging`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ deleted: true, name: 'staging' });
    expectError(await api.call('DELETE', `${base}/staging`), 404, 'not_found');
    expect((await api.call('GET', base)).body.map((e: { name: string }) => e.name)).toEqual(['default']);
  });

  it('accepts names with the punctuation DECISIONS allows, URL-encoded in paths', async () => {
    const tenant = await createTenant(api);
    const base = `/${tenant.org.slug}/${tenant.project.slug}/envs`;
    expect((await api.call('POST', base, { body: { name: 'eu-west/prod:blue' } })).status).toBe(201);
    const deleted = await api.call('DELETE', `${base}/${encodeURIComponent('eu-west/prod:blue')}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.name).toBe('eu-west/prod:blue');
  });

  it('with tokens: admins create projects, members cannot; nobody creates organizations', async () => {
    const tenant = await createTenant(api);
    const owner = await mintToken(api, tenant, { role: 'owner' });
    const admin = await mintToken(api, tenant, { role: 'admin', as: owner });
    const member = await mintToken(api, tenant, { role: 'member', as: owner });
    expectError(await api.call('POST', '/orgs', { token: owner, body: { name: 'N', slug: uniqueSlug('n') } }), 403, 'forbidden');
    const made = await api.call('POST', `/orgs/${tenant.org.slug}/projects`, { token: admin, body: { name: 'Second', slug: 'second' } });
    expect(made.status).toBe(201);
    expectError(
      await api.call('POST', `/orgs/${tenant.org.slug}/projects`, { token: member, body: { name: 'Third', slug: 'third' } }),
      403,
      'forbidden',
    );
    // admins see the whole organization; a member token sees only its own project
    const adminList = await api.call('GET', `/orgs/${tenant.org.slug}/projects`, { token: admin });
    expect(adminList.body.map((p: { slug: string }) => p.slug)).toEqual(['platform', 'second']);
    const memberList = await api.call('GET', `/orgs/${tenant.org.slug}/projects`, { token: member });
    expect(memberList.body.map((p: { slug: string }) => p.slug)).toEqual(['platform']);
  });
});
