import { expect } from 'vitest';
import type { Role } from '../../src/auth/permissions';
import { generateServiceToken, hashServiceToken } from '../../src/auth/service-token';
import { serviceTokens, systemState } from '../../src/db/schema';
import type { ApiResponse, TestApi } from './node-app';

/** Asserts the shape every error has: `{ error, code }` with the given status and code. */
export function expectError(response: ApiResponse, status: number, code: string): void {
  expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
  expect(typeof response.body.error).toBe('string');
  expect(response.body.error.length).toBeGreaterThan(0);
}

let counter = 0;
export const uniqueSlug = (base: string) => `${base}-${(++counter).toString(36)}-${Math.random().toString(36).slice(2, 6)}`;

export interface Tenant {
  org: { id: string; slug: string };
  project: { id: string; slug: string };
}

/** Creates an organization and a project through the API (bootstrap mode, or a caller allowed to). */
export async function createTenant(
  api: TestApi,
  options: { org?: string; project?: string; token?: string } = {},
): Promise<Tenant> {
  const orgSlug = options.org ?? uniqueSlug('org');
  const org = await api.call('POST', '/orgs', { body: { name: `Org ${orgSlug}`, slug: orgSlug } });
  expect(org.status).toBe(201);
  const project = await api.call('POST', `/orgs/${orgSlug}/projects`, {
    token: options.token,
    body: { name: 'Project', slug: options.project ?? 'platform' },
  });
  expect(project.status).toBe(201);
  return { org: org.body, project: project.body };
}

export async function mintToken(
  api: TestApi,
  tenant: Tenant,
  options: { role?: Role; envName?: string; cellScopes?: string[]; expiresAt?: string; name?: string; as?: string } = {},
): Promise<string> {
  const { as, name, ...fields } = options;
  const response = await api.call('POST', `/orgs/${tenant.org.slug}/projects/${tenant.project.slug}/tokens`, {
    token: as,
    body: { name: name ?? `${options.role ?? 'member'}-token`, ...fields },
  });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body.token;
}

/**
 * A token row inserted directly, closing bootstrap as a mint would: for
 * setting up several tenants' tokens once bootstrap mode no longer lets the
 * API mint the first one. `expiresAt` may lie in the past (an expired
 * token, which the API refuses to mint).
 */
export async function seedToken(
  api: TestApi,
  tenant: Tenant,
  role: Role = 'owner',
  options: { expiresAt?: Date } = {},
): Promise<string> {
  const { token, prefix } = generateServiceToken();
  await api.db.insert(serviceTokens).values({
    orgId: tenant.org.id,
    projectId: tenant.project.id,
    name: `seeded-${role}`,
    prefix,
    tokenHash: await hashServiceToken(token),
    role,
    expiresAt: options.expiresAt ?? null,
  });
  await api.db.update(systemState).set({ bootstrapClosedAt: new Date() });
  return token;
}

export interface TenantWithRival {
  tenant: Tenant;
  /** Another organization whose project has the same slug as `tenant`'s. */
  other: Tenant;
  /** One token of `tenant` per role, the owner minted through the API (which closes bootstrap mode). */
  tokens: Record<Role, string>;
  /** An owner token of `other`, seeded. */
  otherOwner: string;
}

/**
 * The usual setup of a resource's tests: a tenant with a token per role, and a
 * rival organization with a same-slug project for the cross-tenant cases.
 * `environments` are created besides `default` while bootstrap mode is open.
 */
export async function createTenantWithRival(api: TestApi, options: { environments?: string[] } = {}): Promise<TenantWithRival> {
  const tenant = await createTenant(api);
  const other = await createTenant(api, { project: tenant.project.slug });
  for (const name of options.environments ?? []) {
    const env = await api.call('POST', `/${tenant.org.slug}/${tenant.project.slug}/envs`, { body: { name } });
    expect(env.status).toBe(201);
  }
  const owner = await mintToken(api, tenant, { role: 'owner' });
  const tokens = { owner } as Record<Role, string>;
  for (const role of ['admin', 'member', 'viewer'] as const) tokens[role] = await mintToken(api, tenant, { role, as: owner });
  return { tenant, other, tokens, otherOwner: await seedToken(api, other, 'owner') };
}
