import type { Role } from '../../src/auth/permissions';
import type { Tenant } from './fixtures';
import type { ApiResponse, TestApi } from './node-app';

/**
 * One row per route: how to call it for a tenant, and the least role it
 * needs (`none` for routes no service token may use). The shared matrix in
 * test/node/security-matrix.test.ts runs every row against every caller kind;
 * later resources add their rows here.
 */
export interface SecuredRoute {
  name: string;
  minRole: Role | 'none';
  /** True when a token pinned to another environment must be refused. */
  environmentScoped: boolean;
  call(api: TestApi, tenant: Tenant, token: string | undefined): Promise<ApiResponse>;
  success: number;
}

let n = 0;
const fresh = (base: string) => `${base}-${(++n).toString(36)}`;

export const SECURED_ROUTES: SecuredRoute[] = [
  {
    name: 'POST /orgs',
    minRole: 'none',
    environmentScoped: false,
    success: 201,
    call: (api, _t, token) => api.call('POST', '/orgs', { token, body: { name: 'X', slug: fresh('matrix-org') } }),
  },
  {
    name: 'GET /orgs/{id}',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}`, { token }),
  },
  {
    name: 'GET /orgs/{o}/projects',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}/projects`, { token }),
  },
  {
    name: 'POST /orgs/{o}/projects',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', `/orgs/${t.org.slug}/projects`, { token, body: { name: 'P', slug: fresh('matrix-project') } }),
  },
  {
    name: 'GET /{o}/{p}/envs',
    minRole: 'viewer',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/${t.org.slug}/${t.project.slug}/envs`, { token }),
  },
  {
    name: 'POST /{o}/{p}/envs',
    minRole: 'admin',
    environmentScoped: true,
    success: 201,
    call: (api, t, token) => api.call('POST', `/${t.org.slug}/${t.project.slug}/envs`, { token, body: { name: fresh('env') } }),
  },
  {
    name: 'DELETE /{o}/{p}/envs/{name}',
    minRole: 'admin',
    environmentScoped: true,
    success: 200,
    call: async (api, t, token) => {
      const name = fresh('gone');
      // created with the matrix's own owner token, kept on the api for this purpose
      await api.call('POST', `/${t.org.slug}/${t.project.slug}/envs`, { token: matrixOwner.get(api), body: { name } });
      return api.call('DELETE', `/${t.org.slug}/${t.project.slug}/envs/${name}`, { token });
    },
  },
  {
    name: 'GET /orgs/{orgId}/projects/{projectId}/tokens',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: (api, t, token) => api.call('GET', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, { token }),
  },
  {
    name: 'POST /orgs/{orgId}/projects/{projectId}/tokens',
    minRole: 'admin',
    environmentScoped: false,
    success: 201,
    call: (api, t, token) =>
      api.call('POST', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, { token, body: { name: 'm', role: 'viewer' } }),
  },
  {
    name: 'DELETE /orgs/{orgId}/projects/{projectId}/tokens/{id}',
    minRole: 'admin',
    environmentScoped: false,
    success: 200,
    call: async (api, t, token) => {
      const path = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      const victim = await api.call('POST', path, { token: matrixOwner.get(api), body: { name: 'victim', role: 'viewer' } });
      // when the fixture cannot be made (a suspended organization), any id shows the gate
      return api.call('DELETE', `${path}/${victim.body?.id ?? crypto.randomUUID()}`, { token });
    },
  },
];

/** The owner token each matrix run sets up, for routes that need a fixture made first. */
export const matrixOwner = new WeakMap<TestApi, string>();
