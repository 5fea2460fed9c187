import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHANGE_RETENTION_MS } from '../../src/stream/feed';
import { createTenant, expectError, mintToken } from '../support/fixtures';
import { createTestApi, manualClock, type TestApi } from '../support/node-app';

/** The change log keeps at least 24 h (DECISIONS §6); the Node host's housekeeping prunes past its retention. */
describe('change log retention', () => {
  // starts at the real time: change rows take their time from the database's clock
  const clock = manualClock(new Date());
  let api: TestApi;
  let token: string;
  let env: string;

  beforeAll(async () => {
    api = await createTestApi({ clock });
    const tenant = await createTenant(api);
    token = await mintToken(api, tenant, { role: 'owner' });
    const proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const type = await api.call('POST', `${proj}/entity-types`, { token, body: { kind: 'EntityType', name: 'vm', states: ['a'], initialState: 'a' } });
    expect(type.status).toBe(201);
    expect((await api.call('POST', `${env}/entities`, { token, body: { kind: 'Entity', entityType: 'vm', name: 'old' } })).status).toBe(201);
  });
  afterAll(() => api.close());

  it('keeps changes for at least 24 hours', async () => {
    expect(CHANGE_RETENTION_MS).toBeGreaterThanOrEqual(24 * 60 * 60 * 1000);
    clock.advance(24 * 60 * 60 * 1000);
    await api.jobs.reap();
    const page = await api.call('GET', `${env}/changes?after=0`, { token });
    expect(page.status).toBe(200);
    expect(page.body.changes.map((c: { entity: { name: string } }) => c.entity.name)).toEqual(['old']);
  });

  it('prunes past the retention at the housekeeping tick; resuming from before it is 410 resync_required', async () => {
    clock.advance(CHANGE_RETENTION_MS);
    await api.jobs.reap();
    expectError(await api.call('GET', `${env}/changes?after=0`, { token }), 410, 'resync_required');
    // from the latest sequence all is well
    const latest = await api.call('GET', `${env}/changes?after=1`, { token });
    expect(latest.body).toEqual({ changes: [], next: 1 });
  });
});
