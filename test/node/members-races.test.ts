import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { orgMembers, users } from '../../src/db/schema';
import { uniqueSlug } from '../support/fixtures';
import { createTestApi, type ApiResponse, type TestApi } from '../support/node-app';
import { usingPostgres } from '../support/node-database';
import { signUp, type TestUser } from '../support/people';

/**
 * Membership changes raced (docs/people/members.md, The last owner). Two
 * owners demoting each other, removing each other, both leaving, or one
 * leaving while the other steps down: whatever the interleaving, exactly one
 * owner remains, and the loser is told why. Each change locks the
 * organization's row and reads the actor's role again under the lock;
 * without that, both changes see two owners and both commit.
 *
 * Truly concurrent only on a real Postgres server (TEST_DATABASE_URL), with
 * many rounds; on PGlite, one session, the requests take turns, so a few
 * rounds only check the outcome.
 */

const ROUNDS = usingPostgres() ? 25 : 3;

describe('membership races', () => {
  let api: TestApi;
  let a: TestUser;
  let b: TestUser;

  beforeAll(async () => {
    api = await createTestApi();
    a = await signUp(api, { name: 'Ann' });
    b = await signUp(api, { name: 'Ben' });
  });
  afterAll(() => api.close());

  /** A fresh organization owned by both `a` and `b`. */
  async function twoOwners(): Promise<{ id: string; path: string }> {
    const slug = uniqueSlug('race');
    const org = await api.call('POST', '/orgs', { token: a.token, body: { name: 'Race', slug } });
    expect(org.status).toBe(201);
    const added = await api.call('POST', `/orgs/${slug}/users`, { token: a.token, body: { email: b.email, name: b.name, role: 'owner' } });
    expect(added.status).toBe(201);
    return { id: org.body.id, path: `/orgs/${slug}` };
  }

  async function owners(orgId: string): Promise<string[]> {
    const rows = await api.db
      .select({ userId: orgMembers.userId })
      .from(orgMembers)
      .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.role, 'owner')));
    return rows.map((row) => row.userId);
  }

  const outcome = (responses: ApiResponse[]) =>
    responses.map((r) => (r.status === 200 ? 'ok' : `${r.status} ${r.body?.code}`)).sort();

  /**
   * Runs `race` ROUNDS times on fresh organizations; every round must end
   * with one owner and the outcomes `expected` (sorted).
   */
  async function rounds(race: (org: { id: string; path: string }) => Promise<ApiResponse[]>, expected: string[]) {
    for (let round = 0; round < ROUNDS; round++) {
      const org = await twoOwners();
      const responses = await race(org);
      expect(await owners(org.id), `round ${round}: ${JSON.stringify(outcome(responses))}`).toHaveLength(1);
      expect(outcome(responses), `round ${round}`).toEqual(expected);
    }
  }

  it('two owners demoting each other at once leave one owner', async () => {
    // the loser is no longer an owner or admin when its turn comes: 403
    await rounds(
      (org) =>
        Promise.all([
          api.call('PATCH', `${org.path}/users/${b.id}`, { token: a.token, body: { role: 'member' } }),
          api.call('PATCH', `${org.path}/users/${a.id}`, { token: b.token, body: { role: 'member' } }),
        ]),
      ['403 forbidden', 'ok'],
    );
  });

  it('two owners removing each other at once leave one owner', async () => {
    // the loser is no longer a member when its turn comes: 404
    await rounds(
      (org) =>
        Promise.all([
          api.call('DELETE', `${org.path}/users/${b.id}`, { token: a.token }),
          api.call('DELETE', `${org.path}/users/${a.id}`, { token: b.token }),
        ]),
      ['404 not_found', 'ok'],
    );
  });

  it('two owners leaving at once leave one owner', async () => {
    await rounds(
      (org) =>
        Promise.all([
          api.call('POST', `${org.path}/leave`, { token: a.token }),
          api.call('POST', `${org.path}/leave`, { token: b.token }),
        ]),
      ['400 last_owner', 'ok'],
    );
  });

  it('one owner leaving while the other steps down leaves one owner', async () => {
    await rounds(
      (org) =>
        Promise.all([
          api.call('POST', `${org.path}/leave`, { token: a.token }),
          api.call('PATCH', `${org.path}/users/${b.id}`, { token: b.token, body: { role: 'admin' } }),
        ]),
      ['400 last_owner', 'ok'],
    );
  });

  it('provisioning one new address concurrently, into one organization and into two, makes one user', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const first = await twoOwners();
      const second = await twoOwners();
      const email = `${uniqueSlug('twice')}@example.com`;
      const body = { email, name: 'Twice', role: 'member' };
      const responses = await Promise.all([
        api.call('POST', `${first.path}/users`, { token: a.token, body }),
        api.call('POST', `${first.path}/users`, { token: b.token, body }),
        api.call('POST', `${second.path}/users`, { token: a.token, body }),
      ]);
      expect(responses.map((r) => r.status)).toEqual([201, 201, 201]);
      const created = await api.db.select({ id: users.id }).from(users).where(eq(users.email, email));
      expect(created).toHaveLength(1);
      expect(new Set(responses.map((r) => r.body.userId))).toEqual(new Set([created[0]!.id]));
      for (const org of [first, second]) {
        const rows = await api.db
          .select()
          .from(orgMembers)
          .where(and(eq(orgMembers.orgId, org.id), eq(orgMembers.userId, created[0]!.id)));
        expect(rows).toHaveLength(1);
      }
    }
  });

  it('a personal token minted while its user is demoted never outranks the new role', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const org = await twoOwners();
      const project = await api.call('POST', `${org.path}/projects`, { token: a.token, body: { name: 'P', slug: 'p' } });
      expect(project.status).toBe(201);
      const [demoted, minted] = await Promise.all([
        api.call('PATCH', `${org.path}/users/${b.id}`, { token: a.token, body: { role: 'member' } }),
        api.call('POST', `${org.path}/projects/p/tokens`, { token: b.token, body: { name: 'mine', role: 'owner', personal: true } }),
      ]);
      expect(demoted.status).toBe(200);
      // either the mint came first (and the demotion lowered its token) or it saw the demotion (403)
      if (minted.status === 201) {
        const listed = await api.call('GET', `${org.path}/projects/p/tokens`, { token: a.token });
        const token = listed.body.find((row: { id: string }) => row.id === minted.body.id);
        expect(token.role, `round ${round}`).toBe('member');
      } else {
        expect(minted.status, `round ${round}: ${JSON.stringify(minted.body)}`).toBe(403);
      }
    }
  });
});
