import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditEvents, graphViews, notifications, orgMembers, serviceTokens, users } from '../../src/db/schema';
import type { MailMessage } from '../../src/platform';
import { expectError, uniqueSlug } from '../support/fixtures';
import { createTestApi, TEST_API_BASE_URL, type TestApi } from '../support/node-app';
import { createUserTenant, linkIn, signIn, signUp, type TestUser } from '../support/people';
import { SmtpSink } from '../support/smtp-sink';

/**
 * Organization members (SPEC Organizations; DECISIONS §5, §8;
 * docs/people/members.md): listing, provisioning with invitations, role
 * changes, removal, leaving, deleting an organization, GET /orgs, and what
 * a membership change does to the member's personal tokens.
 */

type Tenant = Awaited<ReturnType<typeof createUserTenant>>;

const NEW_PASSWORD = 'invited and chosen 1234';

/** The invitation link of the last mail to `email`. */
function invitationTo(mails: MailMessage[], email: string): MailMessage {
  const mail = mails.filter((m) => m.to === email).at(-1);
  expect(mail, `a mail to ${email}`).toBeDefined();
  return mail!;
}

/**
 * Follows an invitation link as a browser would (the link checks its token
 * and redirects to the landing page with `token` added), then sets the
 * password with that token, as the landing page does.
 */
async function acceptInvitation(api: TestApi, link: string, orgSlug: string, password = NEW_PASSWORD): Promise<void> {
  const url = new URL(link);
  const followed = await api.call('GET', `${url.pathname}${url.search}`);
  expect(followed.status, JSON.stringify(followed.body)).toBe(302);
  const landing = new URL(followed.headers.get('location')!);
  expect(landing.searchParams.get('invitation')).toBe(orgSlug);
  const token = landing.searchParams.get('token');
  expect(token).toBeTruthy();
  const reset = await api.call('POST', '/api/auth/reset-password', { body: { newPassword: password, token } });
  expect(reset.status, JSON.stringify(reset.body)).toBe(200);
}

describe('organization members', () => {
  let api: TestApi;
  let owner: TestUser;
  let admin: TestUser;
  let member: TestUser;
  let outsider: TestUser;
  let outsiderTenant: Tenant;
  /** A non-personal owner token of a tenant of `owner`'s: service tokens are refused on every route here. */
  let serviceToken: string;

  const add = async (as: TestUser, orgSlug: string, user: Pick<TestUser, 'email' | 'name'>, role: string) => {
    const response = await api.call('POST', `/orgs/${orgSlug}/users`, { token: as.token, body: { email: user.email, name: user.name, role } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    return response.body;
  };

  /** A fresh organization of `owner` with `admin` and `member` in it. */
  const orgWithTeam = async (): Promise<Tenant & { path: string }> => {
    const tenant = await createUserTenant(api, owner);
    await add(owner, tenant.org.slug, admin, 'admin');
    await add(owner, tenant.org.slug, member, 'member');
    return { ...tenant, path: `/orgs/${tenant.org.slug}` };
  };

  const roleOf = async (orgId: string, userId: string) => {
    const [row] = await api.db
      .select({ role: orgMembers.role })
      .from(orgMembers)
      .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, userId)));
    return row?.role ?? null;
  };

  const auditOf = (orgId: string, action: string) =>
    api.db.select().from(auditEvents).where(and(eq(auditEvents.orgId, orgId), eq(auditEvents.action, action)));

  const notificationsOf = (userId: string, orgId: string) =>
    api.db.select().from(notifications).where(and(eq(notifications.userId, userId), eq(notifications.orgId, orgId)));

  beforeAll(async () => {
    api = await createTestApi();
    owner = await signUp(api, { name: 'Olga Owner' });
    admin = await signUp(api, { name: 'Adam Admin' });
    member = await signUp(api, { name: 'Mia Member' });
    outsider = await signUp(api, { name: 'Otto Outsider' });
    outsiderTenant = await createUserTenant(api, outsider);
    const base = await createUserTenant(api, owner);
    const minted = await api.call('POST', `/orgs/${base.org.slug}/projects/${base.project.slug}/tokens`, {
      token: owner.token,
      body: { name: 'ci', role: 'owner' },
    });
    expect(minted.status, JSON.stringify(minted.body)).toBe(201);
    serviceToken = minted.body.token;
  });
  afterAll(() => api.close());

  /** The 401s every route here gives: no credentials, and a service token (with a message naming the user session). */
  async function expectSessionOnly(method: string, path: string, body?: unknown) {
    expectError(await api.call(method, path, { body }), 401, 'unauthorized');
    const withToken = await api.call(method, path, { token: serviceToken, body });
    expectError(withToken, 401, 'unauthorized');
    expect(withToken.body.error).toMatch(/user session/);
  }

  describe('GET /orgs/{id}/users', () => {
    it('lists the members to any member, by slug or by id, with the fields of DECISIONS §5', async () => {
      const t = await orgWithTeam();
      for (const ref of [t.org.slug, t.org.id]) {
        const response = await api.call('GET', `/orgs/${ref}/users`, { token: member.token });
        expect(response.status, JSON.stringify(response.body)).toBe(200);
        expect(response.body.map((m: { email: string; role: string }) => [m.email, m.role])).toEqual([
          [owner.email, 'owner'],
          [admin.email, 'admin'],
          [member.email, 'member'],
        ]);
        const row = response.body[0];
        expect(Object.keys(row).sort()).toEqual(['email', 'joinedAt', 'name', 'role', 'userId']);
        expect(row).toMatchObject({ userId: owner.id, name: 'Olga Owner' });
        expect(row.joinedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      }
    });

    it('is 401 without a session and for a service token, 404 to a non-member and for an unknown organization', async () => {
      const t = await orgWithTeam();
      await expectSessionOnly('GET', `${t.path}/users`);
      expectError(await api.call('GET', `${t.path}/users`, { token: outsider.token }), 404, 'not_found');
      expectError(await api.call('GET', `/orgs/${t.org.id}/users`, { token: outsider.token }), 404, 'not_found');
      expectError(await api.call('GET', '/orgs/no-such-org/users', { token: owner.token }), 404, 'not_found');
    });
  });

  describe('POST /orgs/{id}/users', () => {
    it('provisions a new user without a password and mails an invitation that sets one', async () => {
      const t = await orgWithTeam();
      const email = `${uniqueSlug('invitee')}@Example.com`;
      const response = await api.call('POST', `${t.path}/users`, { token: admin.token, body: { email, name: 'Ivy Invitee', role: 'member' } });
      expect(response.status, JSON.stringify(response.body)).toBe(201);
      const address = email.toLowerCase();
      expect(response.body).toMatchObject({ email: address, name: 'Ivy Invitee', role: 'member' });

      // a user without any account: no password to sign in with yet
      const [user] = await api.db.select().from(users).where(eq(users.email, address));
      expect(user).toMatchObject({ id: response.body.userId, emailVerified: false });
      const refused = await api.call('POST', '/api/auth/sign-in/email', { body: { email: address, password: NEW_PASSWORD } });
      expect(refused.status).toBe(401);

      const mail = invitationTo(api.mails, address);
      expect(mail.subject).toMatch(/invited/i);
      await acceptInvitation(api, linkIn(mail.text), t.org.slug);

      const invitee = await signIn(api, { email: address, password: NEW_PASSWORD, name: 'Ivy Invitee' });
      // the link came to the address by mail: setting the password through it verified the address
      const [verified] = await api.db.select({ emailVerified: users.emailVerified }).from(users).where(eq(users.id, invitee.id));
      expect(verified!.emailVerified).toBe(true);
      const mine = await api.call('GET', '/orgs', { token: invitee.token });
      expect(mine.body).toEqual([expect.objectContaining({ id: t.org.id, slug: t.org.slug, role: 'member' })]);

      // told, and audited, in the transaction that added them
      const told = await notificationsOf(invitee.id, t.org.id);
      expect(told.map((n) => n.kind)).toEqual(['org.member_added']);
      expect(told[0]!.data).toMatchObject({ orgId: t.org.id, role: 'member' });
      const audit = await auditOf(t.org.id, 'member.added');
      expect(audit.find((a) => a.targetId === invitee.id)).toMatchObject({ actorType: 'user', actorId: admin.id, data: { role: 'member', userCreated: true } });
    });

    it('words a reset as an invitation only for a user who has no password, whatever the request says', async () => {
      const someone = await signUp(api);
      const asked = await api.call('POST', '/api/auth/request-password-reset', {
        body: { email: someone.email, redirectTo: `${TEST_API_BASE_URL}/?invitation=forged` },
      });
      expect(asked.status, JSON.stringify(asked.body)).toBe(200);
      const mail = api.mails.filter((message) => message.to === someone.email).at(-1)!;
      expect(mail.subject).toMatch(/reset your cellplane password/i);
      expect(mail.subject).not.toMatch(/invited/i);
    });

    it('a used invitation link cannot set the password again', async () => {
      const t = await orgWithTeam();
      const email = `${uniqueSlug('once')}@example.com`;
      await add(owner, t.org.slug, { email, name: 'Once' }, 'member');
      const link = new URL(linkIn(invitationTo(api.mails, email).text));
      const token = link.pathname.split('/').at(-1);
      expect((await api.call('POST', '/api/auth/reset-password', { body: { newPassword: NEW_PASSWORD, token } })).status).toBe(200);
      const again = await api.call('POST', '/api/auth/reset-password', { body: { newPassword: 'another password 5678', token } });
      expect(again.status).toBe(400);
    });

    it('invites a provisioned user again while they have not signed in, and never a user who has', async () => {
      const t = await orgWithTeam();
      const email = `${uniqueSlug('again')}@example.com`;
      await add(owner, t.org.slug, { email, name: 'Again' }, 'member');
      await add(owner, t.org.slug, { email, name: 'Again' }, 'member');
      expect(api.mails.filter((m) => m.to === email)).toHaveLength(2);

      const before = api.mails.length;
      await add(owner, t.org.slug, outsider, 'member');
      expect(api.mails.slice(before).filter((m) => m.to === outsider.email)).toEqual([]);
    });

    it('upserts an existing user: added, then given the role asked for, keeping its own name', async () => {
      const t = await createUserTenant(api, owner);
      const added = await api.call('POST', `/orgs/${t.org.slug}/users`, {
        token: owner.token,
        body: { email: outsider.email.toUpperCase(), name: 'Somebody Else', role: 'member' },
      });
      expect(added.status).toBe(201);
      expect(added.body).toMatchObject({ userId: outsider.id, email: outsider.email, name: 'Otto Outsider', role: 'member' });

      const promoted = await api.call('POST', `/orgs/${t.org.slug}/users`, {
        token: owner.token,
        body: { email: outsider.email, name: 'Otto Outsider', role: 'admin' },
      });
      expect(promoted.status).toBe(201);
      expect(promoted.body).toMatchObject({ userId: outsider.id, role: 'admin', joinedAt: added.body.joinedAt });
      expect(await roleOf(t.org.id, outsider.id)).toBe('admin');
      expect((await notificationsOf(outsider.id, t.org.id)).map((n) => n.kind).sort()).toEqual(['org.member_added', 'org.role_changed']);
      expect(await auditOf(t.org.id, 'member.role_changed')).toEqual([
        expect.objectContaining({ targetId: outsider.id, data: expect.objectContaining({ from: 'member', to: 'admin' }) }),
      ]);

      // the same role again changes nothing and tells nobody
      const same = await api.call('POST', `/orgs/${t.org.slug}/users`, { token: owner.token, body: { email: outsider.email, name: 'x', role: 'admin' } });
      expect(same.status).toBe(201);
      expect(await notificationsOf(outsider.id, t.org.id)).toHaveLength(2);
    });

    it('defaults the role to member', async () => {
      const t = await orgWithTeam();
      const response = await api.call('POST', `${t.path}/users`, { token: owner.token, body: { email: outsider.email, name: 'O' } });
      expect(response.status).toBe(201);
      expect(response.body.role).toBe('member');
    });

    it('only an owner grants owner: an admin gets 403, for a new user or an existing one', async () => {
      const t = await orgWithTeam();
      const fresh = `${uniqueSlug('would-be-owner')}@example.com`;
      const refused = await api.call('POST', `${t.path}/users`, { token: admin.token, body: { email: fresh, name: 'W', role: 'owner' } });
      expectError(refused, 403, 'forbidden');
      expect(await api.db.select().from(users).where(eq(users.email, fresh))).toEqual([]);
      expect(api.mails.filter((m) => m.to === fresh)).toEqual([]);
      expectError(
        await api.call('POST', `${t.path}/users`, { token: admin.token, body: { email: member.email, name: 'M', role: 'owner' } }),
        403,
        'forbidden',
      );
      // nor can an admin demote an owner through the upsert
      expectError(
        await api.call('POST', `${t.path}/users`, { token: admin.token, body: { email: owner.email, name: 'O', role: 'member' } }),
        403,
        'forbidden',
      );
      const made = await api.call('POST', `${t.path}/users`, { token: owner.token, body: { email: member.email, name: 'M', role: 'owner' } });
      expect(made.status).toBe(201);
      expect(made.body.role).toBe('owner');
    });

    it('demoting the last owner through the upsert is 400 last_owner', async () => {
      const t = await orgWithTeam();
      expectError(
        await api.call('POST', `${t.path}/users`, { token: owner.token, body: { email: owner.email, name: 'O', role: 'admin' } }),
        400,
        'last_owner',
      );
      expect(await roleOf(t.org.id, owner.id)).toBe('owner');
    });

    it('is 403 for a member, 404 to a non-member, 401 without a session or with a service token, 400 for a bad body', async () => {
      const t = await orgWithTeam();
      const body = { email: `${uniqueSlug('x')}@example.com`, name: 'X', role: 'member' };
      expectError(await api.call('POST', `${t.path}/users`, { token: member.token, body }), 403, 'forbidden');
      expectError(await api.call('POST', `${t.path}/users`, { token: outsider.token, body }), 404, 'not_found');
      await expectSessionOnly('POST', `${t.path}/users`, body);
      expectError(await api.call('POST', `${t.path}/users`, { token: owner.token, body: { ...body, email: 'not-an-address' } }), 400, 'validation_failed');
      expectError(await api.call('POST', `${t.path}/users`, { token: owner.token, body: { ...body, role: 'viewer' } }), 400, 'validation_failed');
      expectError(await api.call('POST', `${t.path}/users`, { token: owner.token, body: { ...body, extra: 1 } }), 400, 'validation_failed');
      expectError(await api.call('POST', `${t.path}/users`, { token: owner.token, body: { email: body.email } }), 400, 'validation_failed');
      expect(await api.db.select().from(users).where(eq(users.email, body.email))).toEqual([]);
    });
  });

  describe('PATCH /orgs/{id}/users/{userId}', () => {
    it('changes a role, tells the member, and audits it', async () => {
      const t = await orgWithTeam();
      const response = await api.call('PATCH', `${t.path}/users/${member.id}`, { token: admin.token, body: { role: 'admin' } });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toMatchObject({ userId: member.id, email: member.email, role: 'admin' });
      const told = await notificationsOf(member.id, t.org.id);
      expect(told.map((n) => n.kind).sort()).toEqual(['org.member_added', 'org.role_changed']);
      expect(told.find((n) => n.kind === 'org.role_changed')!.data).toMatchObject({ from: 'member', to: 'admin' });
      expect(await auditOf(t.org.id, 'member.role_changed')).toEqual([
        expect.objectContaining({ actorId: admin.id, targetId: member.id, data: expect.objectContaining({ from: 'member', to: 'admin' }) }),
      ]);
    });

    it('an owner makes owners and demotes owners while another owner remains', async () => {
      const t = await orgWithTeam();
      expect((await api.call('PATCH', `${t.path}/users/${admin.id}`, { token: owner.token, body: { role: 'owner' } })).body.role).toBe('owner');
      const demoted = await api.call('PATCH', `${t.path}/users/${owner.id}`, { token: owner.token, body: { role: 'member' } });
      expect(demoted.status).toBe(200);
      expect(await roleOf(t.org.id, owner.id)).toBe('member');
      // changing your own role tells nobody
      expect((await notificationsOf(owner.id, t.org.id)).filter((n) => n.kind === 'org.role_changed')).toEqual([]);
    });

    it('an admin can neither touch an owner nor promote to owner', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('PATCH', `${t.path}/users/${owner.id}`, { token: admin.token, body: { role: 'admin' } }), 403, 'forbidden');
      expectError(await api.call('PATCH', `${t.path}/users/${member.id}`, { token: admin.token, body: { role: 'owner' } }), 403, 'forbidden');
      expectError(await api.call('PATCH', `${t.path}/users/${admin.id}`, { token: admin.token, body: { role: 'owner' } }), 403, 'forbidden');
      expect(await roleOf(t.org.id, owner.id)).toBe('owner');
      expect(await roleOf(t.org.id, member.id)).toBe('member');
    });

    it('demoting the last owner is 400 last_owner', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('PATCH', `${t.path}/users/${owner.id}`, { token: owner.token, body: { role: 'admin' } }), 400, 'last_owner');
      expect(await roleOf(t.org.id, owner.id)).toBe('owner');
    });

    it('is 404 for an unknown member, 403 for a member, 404 to a non-member, 401 without a session or with a token, 400 for a bad body', async () => {
      const t = await orgWithTeam();
      expectError(
        await api.call('PATCH', `${t.path}/users/${crypto.randomUUID()}`, { token: owner.token, body: { role: 'admin' } }),
        404,
        'not_found',
      );
      // a user who exists but is not a member of this organization
      expectError(await api.call('PATCH', `${t.path}/users/${outsider.id}`, { token: owner.token, body: { role: 'admin' } }), 404, 'not_found');
      expectError(await api.call('PATCH', `${t.path}/users/${member.id}`, { token: member.token, body: { role: 'admin' } }), 403, 'forbidden');
      expectError(await api.call('PATCH', `${t.path}/users/${member.id}`, { token: outsider.token, body: { role: 'admin' } }), 404, 'not_found');
      await expectSessionOnly('PATCH', `${t.path}/users/${member.id}`, { role: 'admin' });
      expectError(await api.call('PATCH', `${t.path}/users/not-a-uuid`, { token: owner.token, body: { role: 'admin' } }), 400, 'validation_failed');
      expectError(await api.call('PATCH', `${t.path}/users/${member.id}`, { token: owner.token, body: { role: 'boss' } }), 400, 'validation_failed');
      expect(await roleOf(t.org.id, member.id)).toBe('member');
    });
  });

  describe('DELETE /orgs/{id}/users/{userId}', () => {
    it("removes the member with its personal views, its notifications of the organization and its personal tokens", async () => {
      const t = await orgWithTeam();
      const other = await createUserTenant(api, owner);
      await add(owner, other.org.slug, member, 'member');
      const tokens = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      await api.call('PATCH', `${t.path}/users/${member.id}`, { token: owner.token, body: { role: 'admin' } });
      const personal = await api.call('POST', tokens, { token: member.token, body: { name: 'mine', role: 'member', personal: true } });
      const shared = await api.call('POST', tokens, { token: member.token, body: { name: 'team', role: 'member' } });
      expect([personal.status, shared.status]).toEqual([201, 201]);
      const view = (ownerUserId: string, scope: 'user' | 'project', name: string) => ({
        orgId: t.org.id,
        projectId: t.project.id,
        scope,
        ownerUserId: scope === 'user' ? ownerUserId : null,
        name,
        config: {},
      });
      await api.db.insert(graphViews).values([view(member.id, 'user', 'mine'), view(admin.id, 'user', 'theirs'), view(member.id, 'project', 'team')]);
      const env = `/${t.org.slug}/${t.project.slug}/envs`;
      expect((await api.call('GET', env, { token: personal.body.token })).status).toBe(200);

      const response = await api.call('DELETE', `${t.path}/users/${member.id}`, { token: admin.token });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toEqual({ removed: true, userId: member.id });

      expect(await roleOf(t.org.id, member.id)).toBeNull();
      expectError(await api.call('GET', t.path, { token: member.token }), 404, 'not_found');
      const views = await api.db.select({ name: graphViews.name }).from(graphViews).where(eq(graphViews.orgId, t.org.id));
      expect(views.map((v) => v.name).sort()).toEqual(['team', 'theirs']);
      expect(await notificationsOf(member.id, t.org.id)).toEqual([]);
      // the other organization's notifications and membership are untouched
      expect((await notificationsOf(member.id, other.org.id)).length).toBeGreaterThan(0);
      expect(await roleOf(other.org.id, member.id)).toBe('member');
      // the personal token is revoked; a project token the member minted stays the project's
      expectError(await api.call('GET', env, { token: personal.body.token }), 401, 'unauthorized');
      expect((await api.call('GET', env, { token: shared.body.token })).status).toBe(200);
      expect(await auditOf(t.org.id, 'member.removed')).toEqual([
        expect.objectContaining({ actorId: admin.id, targetId: member.id, data: { role: 'admin', personalTokensRevoked: [personal.body.id] } }),
      ]);
    });

    it('only an owner removes an owner, and never the last one', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('DELETE', `${t.path}/users/${owner.id}`, { token: admin.token }), 403, 'forbidden');
      expectError(await api.call('DELETE', `${t.path}/users/${owner.id}`, { token: owner.token }), 400, 'last_owner');
      await api.call('PATCH', `${t.path}/users/${admin.id}`, { token: owner.token, body: { role: 'owner' } });
      const removed = await api.call('DELETE', `${t.path}/users/${owner.id}`, { token: admin.token });
      expect(removed.status).toBe(200);
      expect(await roleOf(t.org.id, owner.id)).toBeNull();
      expect(await roleOf(t.org.id, admin.id)).toBe('owner');
    });

    it('is 404 for an unknown member, 403 for a member, 404 to a non-member, 401 without a session or with a token', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('DELETE', `${t.path}/users/${crypto.randomUUID()}`, { token: owner.token }), 404, 'not_found');
      expectError(await api.call('DELETE', `${t.path}/users/${admin.id}`, { token: member.token }), 403, 'forbidden');
      expectError(await api.call('DELETE', `${t.path}/users/${admin.id}`, { token: outsider.token }), 404, 'not_found');
      await expectSessionOnly('DELETE', `${t.path}/users/${admin.id}`);
      expect(await roleOf(t.org.id, admin.id)).toBe('admin');
    });
  });

  describe('POST /orgs/{id}/leave', () => {
    it('the member leaves, with the cascade of a removal', async () => {
      const t = await orgWithTeam();
      const tokens = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      const personal = await api.call('POST', tokens, { token: admin.token, body: { name: 'mine', role: 'admin', personal: true } });
      expect(personal.status).toBe(201);
      const response = await api.call('POST', `${t.path}/leave`, { token: admin.token });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toEqual({ left: true, orgId: t.org.id });
      expect(await roleOf(t.org.id, admin.id)).toBeNull();
      expect(await notificationsOf(admin.id, t.org.id)).toEqual([]);
      expectError(await api.call('GET', tokens, { token: personal.body.token }), 401, 'unauthorized');
      expect(await auditOf(t.org.id, 'member.left')).toEqual([
        expect.objectContaining({ actorId: admin.id, targetId: admin.id, data: { role: 'admin', personalTokensRevoked: [personal.body.id] } }),
      ]);
      // once gone, the organization is someone else's: 404
      expectError(await api.call('POST', `${t.path}/leave`, { token: admin.token }), 404, 'not_found');
    });

    it('the last owner cannot leave; an owner can once another owner exists', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('POST', `${t.path}/leave`, { token: owner.token }), 400, 'last_owner');
      expect(await roleOf(t.org.id, owner.id)).toBe('owner');
      await api.call('PATCH', `${t.path}/users/${member.id}`, { token: owner.token, body: { role: 'owner' } });
      expect((await api.call('POST', `${t.path}/leave`, { token: owner.token })).status).toBe(200);
    });

    it('is 404 to a non-member, 401 without a session or with a token', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('POST', `${t.path}/leave`, { token: outsider.token }), 404, 'not_found');
      await expectSessionOnly('POST', `${t.path}/leave`);
    });
  });

  describe('DELETE /orgs/{id}', () => {
    it('an owner soft-deletes the organization: 404 everywhere afterwards, the slug stays taken', async () => {
      const t = await orgWithTeam();
      const projectToken = await api.call('POST', `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`, {
        token: owner.token,
        body: { name: 'deploy', role: 'owner' },
      });
      const response = await api.call('DELETE', `/orgs/${t.org.id}`, { token: owner.token });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body).toEqual({ deleted: true, id: t.org.id });

      for (const path of [t.path, `/orgs/${t.org.id}`, `${t.path}/users`, `${t.path}/projects`]) {
        expectError(await api.call('GET', path, { token: owner.token }), 404, 'not_found');
      }
      expectError(await api.call('GET', `/${t.org.slug}/${t.project.slug}/envs`, { token: projectToken.body.token }), 404, 'not_found');
      expectError(await api.call('DELETE', t.path, { token: owner.token }), 404, 'not_found');
      expectError(await api.call('POST', `${t.path}/leave`, { token: member.token }), 404, 'not_found');
      expect((await api.call('GET', '/orgs', { token: owner.token })).body.map((o: { id: string }) => o.id)).not.toContain(t.org.id);
      expectError(await api.call('POST', '/orgs', { token: owner.token, body: { name: 'Again', slug: t.org.slug } }), 409, 'already_exists');
      expect(await auditOf(t.org.id, 'org.deleted')).toEqual([
        expect.objectContaining({ actorId: owner.id, targetId: t.org.id, data: expect.objectContaining({ slug: t.org.slug }) }),
      ]);
    });

    it('is 403 for an admin and a member, 404 to a non-member, 401 without a session or with a token', async () => {
      const t = await orgWithTeam();
      expectError(await api.call('DELETE', t.path, { token: admin.token }), 403, 'forbidden');
      expectError(await api.call('DELETE', t.path, { token: member.token }), 403, 'forbidden');
      expectError(await api.call('DELETE', t.path, { token: outsider.token }), 404, 'not_found');
      await expectSessionOnly('DELETE', t.path);
      expect((await api.call('GET', t.path, { token: member.token })).status).toBe(200);
    });
  });

  describe('GET /orgs', () => {
    it("lists the user's organizations with its role, by slug", async () => {
      const t = await orgWithTeam();
      const response = await api.call('GET', '/orgs', { token: admin.token });
      expect(response.status).toBe(200);
      const row = response.body.find((o: { id: string }) => o.id === t.org.id);
      expect(row).toEqual({ id: t.org.id, name: `Org ${t.org.slug}`, slug: t.org.slug, createdAt: expect.any(String), role: 'admin' });
      const slugs = response.body.map((o: { slug: string }) => o.slug);
      expect(slugs).toEqual([...slugs].sort());
      expect(slugs).not.toContain(outsiderTenant.org.slug);
      const fresh = await signUp(api);
      expect((await api.call('GET', '/orgs', { token: fresh.token })).body).toEqual([]);
    });

    it('is 401 without a session and with a service token', async () => {
      await expectSessionOnly('GET', '/orgs');
    });
  });

  describe('personal tokens (DECISIONS §8)', () => {
    it("come down to the user's new role on a demotion, in the same change, and never go up again", async () => {
      const t = await orgWithTeam();
      const tokens = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      const mint = async (body: Record<string, unknown>) => {
        const response = await api.call('POST', tokens, { token: admin.token, body: { name: uniqueSlug('t'), ...body } });
        expect(response.status, JSON.stringify(response.body)).toBe(201);
        return response.body as { id: string; token: string };
      };
      const personalAdmin = await mint({ role: 'admin', personal: true });
      const personalViewer = await mint({ role: 'viewer', personal: true });
      const projectAdmin = await mint({ role: 'admin' });
      expect((await api.call('GET', tokens, { token: personalAdmin.token })).status).toBe(200);

      expect((await api.call('PATCH', `${t.path}/users/${admin.id}`, { token: owner.token, body: { role: 'member' } })).status).toBe(200);
      expectError(await api.call('GET', tokens, { token: personalAdmin.token }), 403, 'forbidden');
      const roles = async () =>
        Object.fromEntries(
          (await api.db.select({ id: serviceTokens.id, role: serviceTokens.role }).from(serviceTokens).where(eq(serviceTokens.createdByUserId, admin.id))).map(
            (row) => [row.id, row.role],
          ),
        );
      expect(await roles()).toMatchObject({ [personalAdmin.id]: 'member', [personalViewer.id]: 'viewer', [projectAdmin.id]: 'admin' });
      // still the member it is now: reads and member writes work
      expect((await api.call('GET', `/${t.org.slug}/${t.project.slug}/envs`, { token: personalAdmin.token })).status).toBe(200);
      const audit = await auditOf(t.org.id, 'member.role_changed');
      expect(audit[0]!.data).toMatchObject({ personalTokensLowered: [personalAdmin.id] });

      // a promotion does not raise them back
      await api.call('PATCH', `${t.path}/users/${admin.id}`, { token: owner.token, body: { role: 'admin' } });
      expect((await roles())[personalAdmin.id]).toBe('member');
      expectError(await api.call('GET', tokens, { token: personalAdmin.token }), 403, 'forbidden');
    });

    it('stop working (401) once the user is removed', async () => {
      const t = await orgWithTeam();
      const tokens = `/orgs/${t.org.slug}/projects/${t.project.slug}/tokens`;
      const minted = await api.call('POST', tokens, { token: admin.token, body: { name: 'mine', role: 'admin', personal: true } });
      expect((await api.call('GET', tokens, { token: minted.body.token })).status).toBe(200);
      expect((await api.call('DELETE', `${t.path}/users/${admin.id}`, { token: owner.token })).status).toBe(200);
      expectError(await api.call('GET', tokens, { token: minted.body.token }), 401, 'unauthorized');
      const [row] = await api.db.select().from(serviceTokens).where(eq(serviceTokens.id, minted.body.id));
      expect(row!.revokedAt).not.toBeNull();
    });
  });

  it("isolation: a member of one organization sees nothing of another's (404)", async () => {
    const theirs = `/orgs/${outsiderTenant.org.slug}`;
    const [outsiderRow] = await api.db.select().from(orgMembers).where(eq(orgMembers.orgId, outsiderTenant.org.id));
    const target = outsiderRow!.userId;
    const calls: [string, string, unknown?][] = [
      ['GET', `${theirs}/users`],
      ['POST', `${theirs}/users`, { email: `${uniqueSlug('nope')}@example.com`, name: 'N', role: 'member' }],
      ['PATCH', `${theirs}/users/${target}`, { role: 'member' }],
      ['DELETE', `${theirs}/users/${target}`],
      ['POST', `${theirs}/leave`],
      ['DELETE', theirs],
      ['GET', theirs],
    ];
    for (const [method, path, body] of calls) {
      for (const ref of [path, path.replace(outsiderTenant.org.slug, outsiderTenant.org.id)]) {
        expectError(await api.call(method, ref, { token: owner.token, body }), 404, 'not_found');
      }
    }
    expect(await roleOf(outsiderTenant.org.id, outsider.id)).toBe('owner');
  });
});

describe('invitations over SMTP', () => {
  let sink: SmtpSink;
  let api: TestApi;

  beforeAll(async () => {
    sink = await SmtpSink.start();
    api = await createTestApi({ env: { SMTP_URL: sink.url, MAIL_FROM: 'cellplane@example.com' } });
  });
  afterAll(async () => {
    await api.close();
    await sink.close();
  });

  it('sends the invitation to a real SMTP server, and its link sets the password', async () => {
    const owner = await signUp(api);
    const { org } = await createUserTenant(api, owner);
    const email = `${uniqueSlug('smtp')}@example.com`;
    const added = await api.call('POST', `/orgs/${org.slug}/users`, { token: owner.token, body: { email, name: 'Sam Smtp', role: 'admin' } });
    expect(added.status).toBe(201);
    expect(api.mails).toEqual([]);

    const mail = await sink.waitFor((m) => m.envelope.to.includes(email) && /invited/i.test(m.subject));
    expect(mail.from).toBe('cellplane@example.com');
    await acceptInvitation(api, linkIn(mail.text), org.slug);
    const invitee = await signIn(api, { email, password: NEW_PASSWORD, name: 'Sam Smtp' });
    const members = await api.call('GET', `/orgs/${org.slug}/users`, { token: invitee.token });
    expect(members.status).toBe(200);
    expect(members.body.find((m: { email: string }) => m.email === email).role).toBe('admin');
  });
});

describe('invitations with a hosted UI', () => {
  let api: TestApi;

  beforeAll(async () => {
    api = await createTestApi({ env: { SERVICE_UI_BASE_URL: 'https://ui.cellplane.test/', TRUSTED_ORIGINS: 'https://ui.cellplane.test' } });
  });
  afterAll(() => api.close());

  it("lands on the UI's accept-invitation page, which sets the password with the token it is given", async () => {
    const owner = await signUp(api);
    const { org } = await createUserTenant(api, owner);
    const email = `${uniqueSlug('ui')}@example.com`;
    expect((await api.call('POST', `/orgs/${org.slug}/users`, { token: owner.token, body: { email, name: 'Uma Ui' } })).status).toBe(201);
    const link = new URL(linkIn(invitationTo(api.mails, email).text));
    const followed = await api.call('GET', `${link.pathname}${link.search}`);
    expect(followed.status).toBe(302);
    const landing = new URL(followed.headers.get('location')!);
    expect(`${landing.origin}${landing.pathname}`).toBe('https://ui.cellplane.test/accept-invitation');
    await acceptInvitation(api, link.href, org.slug);
    expect((await signIn(api, { email, password: NEW_PASSWORD, name: 'Uma Ui' })).token).toBeTruthy();
  });
});
