import type { TestApi } from '../node-app';
import { freshName, type PeopleRoute, type PeopleWorld } from './route';

/**
 * Members, GET /orgs and organization deletion (src/modules/members,
 * src/modules/orgs). All of them need a user session: a service token gets
 * 401 (docs/people/members.md), so none is in the token matrix.
 */

/** Provisions a fresh address into the world's organization as `role` (world.owner), returning its user id. */
async function freshMember(api: TestApi, world: PeopleWorld, role: 'member' | 'admin' | 'owner' = 'member', org = world.org.slug): Promise<string> {
  const response = await api.call('POST', `/orgs/${org}/users`, {
    token: world.owner.token,
    body: { email: `${freshName('matrix-member')}@example.com`, name: 'Matrix Member', role },
  });
  if (response.status !== 201) throw new Error(`could not provision a member: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body.userId;
}

/**
 * A fresh organization of world.owner's with world.admin and world.member in
 * their roles, and a second owner, so that the route under test can delete
 * it, or let world.owner leave it, without spoiling the world for other rows.
 */
async function freshOrganization(api: TestApi, world: PeopleWorld): Promise<string> {
  const slug = freshName('matrix-org');
  const created = await api.call('POST', '/orgs', { token: world.owner.token, body: { name: 'Matrix', slug } });
  if (created.status !== 201) throw new Error(`could not create an organization: ${created.status} ${JSON.stringify(created.body)}`);
  for (const [user, role] of [
    [world.admin, 'admin'],
    [world.member, 'member'],
  ] as const) {
    const added = await api.call('POST', `/orgs/${slug}/users`, { token: world.owner.token, body: { email: user.email, name: user.name, role } });
    if (added.status !== 201) throw new Error(`could not add ${role}: ${added.status} ${JSON.stringify(added.body)}`);
  }
  await freshMember(api, world, 'owner', slug);
  return slug;
}

export const MEMBERS_PEOPLE_ROUTES: PeopleRoute[] = [
  {
    method: 'GET',
    path: '/orgs',
    access: 'any-user',
    tokens: 401,
    success: 200,
    call: (api, _world, credential) => api.call('GET', '/orgs', { token: credential }),
  },
  {
    method: 'DELETE',
    path: '/orgs/{id}',
    access: 'owner',
    tokens: 401,
    success: 200,
    call: async (api, world, credential) => {
      const slug = await freshOrganization(api, world);
      return api.call('DELETE', `/orgs/${slug}`, { token: credential });
    },
  },
  {
    method: 'GET',
    path: '/orgs/{id}/users',
    access: 'member',
    tokens: 401,
    success: 200,
    call: (api, world, credential) => api.call('GET', `/orgs/${world.org.slug}/users`, { token: credential }),
  },
  {
    method: 'POST',
    path: '/orgs/{id}/users',
    access: 'admin',
    tokens: 401,
    success: 201,
    call: (api, world, credential) =>
      api.call('POST', `/orgs/${world.org.slug}/users`, {
        token: credential,
        body: { email: `${freshName('matrix-invitee')}@example.com`, name: 'Matrix Invitee', role: 'member' },
      }),
  },
  {
    method: 'PATCH',
    path: '/orgs/{id}/users/{userId}',
    access: 'admin',
    tokens: 401,
    success: 200,
    call: async (api, world, credential) => {
      const userId = await freshMember(api, world);
      return api.call('PATCH', `/orgs/${world.org.slug}/users/${userId}`, { token: credential, body: { role: 'admin' } });
    },
  },
  {
    method: 'DELETE',
    path: '/orgs/{id}/users/{userId}',
    access: 'admin',
    tokens: 401,
    success: 200,
    call: async (api, world, credential) => {
      const userId = await freshMember(api, world);
      return api.call('DELETE', `/orgs/${world.org.slug}/users/${userId}`, { token: credential });
    },
  },
  {
    method: 'POST',
    path: '/orgs/{id}/leave',
    access: 'member',
    tokens: 401,
    success: 200,
    // in a fresh organization: leaving the world's would take the caller out of it for the rows after
    call: async (api, world, credential) => {
      const slug = await freshOrganization(api, world);
      return api.call('POST', `/orgs/${slug}/leave`, { token: credential });
    },
  },
];
