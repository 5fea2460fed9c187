import { exports } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';

/**
 * One entity's whole life through the real Worker entry in workerd, against
 * the Neon driver: its type, create, read, update, list, sync stamp and
 * drift, delete. Uses the tenant the global setup seeded (bootstrap mode is
 * the foundation file's business).
 */

const BASE = 'http://cellplane.test';
const tenant = inject('seededTenant');
const ENV = `/${tenant.org}/${tenant.project}/envs/default`;

async function call(method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${tenant.token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await exports.default.fetch(`${BASE}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
}

describe.sequential('an entity lifecycle on the Worker', () => {
  it('defines the entity type', async () => {
    const created = await call('POST', `/${tenant.org}/${tenant.project}/entity-types`, {
      kind: 'EntityType',
      name: 'service',
      states: ['planned', 'running', 'retired'],
      initialState: 'planned',
      properties: [{ name: 'tier', type: 'string', enum: ['gold', 'silver'], default: 'silver' }],
      metrics: [{ name: 'cpu', capacity: 100 }],
      constraints: [{ kind: 'transition', from: 'planned', to: ['running'] }],
      syncTracked: true,
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'service', initialState: 'planned', syncTracked: true });
  });

  it('creates, reads and lists the entity', async () => {
    const created = await call('POST', `${ENV}/entities`, {
      kind: 'Entity',
      entityType: 'service',
      name: 'checkout',
      labels: { team: 'payments' },
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      name: 'checkout',
      entityTypeName: 'service',
      state: 'planned',
      properties: { tier: 'silver' },
      labels: { team: 'payments' },
      lastSyncedAt: null,
    });
    const read = await call('GET', `${ENV}/entities/checkout`);
    expect(read.status).toBe(200);
    expect(read.body).toEqual(created.body);
    const listed = await call('GET', `${ENV}/entities?entityType=service&label=team:payments`);
    expect(listed.status).toBe(200);
    expect(listed.body.map((e: { name: string }) => e.name)).toEqual(['checkout']);
  });

  it('updates it within the type’s transitions', async () => {
    const refused = await call('PUT', `${ENV}/entities/checkout`, { state: 'retired' });
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 409, code: 'transition_not_allowed' });
    const updated = await call('PUT', `${ENV}/entities/checkout`, { state: 'running', properties: { tier: 'gold' } });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ state: 'running', properties: { tier: 'gold' } });
  });

  it('takes a metric and a sync stamp, and reports drift', async () => {
    const metric = await call('PUT', `${ENV}/entities/checkout/metrics/cpu`, { value: 42 });
    expect(metric.status).toBe(200);
    expect(metric.body).toMatchObject({ entityName: 'checkout', metric: 'cpu', value: 42 });
    expect((await call('GET', `${ENV}/entities/checkout/metrics`)).body).toEqual({ cpu: 42 });
    expect((await call('GET', `${ENV}/entities/checkout/drift`)).body.driftStatus).toBe('never-synced');
    const stamp = await call('POST', `${ENV}/entities/checkout/sync-stamp`, { source: 'terraform' });
    expect(stamp.status).toBe(200);
    expect(stamp.body).toMatchObject({ name: 'checkout', syncSource: 'terraform' });
    expect((await call('GET', `${ENV}/entities/checkout/drift`)).body).toMatchObject({ driftStatus: 'in-sync', syncSource: 'terraform' });
  });

  it('deletes it', async () => {
    const deleted = await call('DELETE', `${ENV}/entities/checkout`);
    expect(deleted).toMatchObject({ status: 200, body: { deleted: true, name: 'checkout' } });
    const gone = await call('GET', `${ENV}/entities/checkout`);
    expect({ status: gone.status, code: gone.body.code }).toEqual({ status: 404, code: 'not_found' });
  });
});
