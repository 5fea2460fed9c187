import { and, eq } from 'drizzle-orm';
import { entities, entityMetrics, entityTypes, environments, relationships, relationshipTypes } from '../../src/db/schema';
import type { MetricDefinition } from '../../src/modules/catalog-items';
import type { Tenant } from './fixtures';
import type { TestApi } from './node-app';

/**
 * Small factories for the cell suites: catalog and runtime rows inserted
 * directly, so the cell tests do not depend on the entity and relationship
 * modules' routes.
 */
export function cellFactories(api: TestApi, tenant: Tenant) {
  const keys = { orgId: tenant.org.id, projectId: tenant.project.id };
  const envIds = new Map<string, string>();

  const envId = async (name = 'default'): Promise<string> => {
    const known = envIds.get(name);
    if (known) return known;
    const [env] = await api.db
      .select()
      .from(environments)
      .where(and(eq(environments.projectId, tenant.project.id), eq(environments.name, name)));
    if (!env) throw new Error(`no environment ${name}`);
    envIds.set(name, env.id);
    return env.id;
  };

  return {
    envId,
    async entityType(name: string, overrides: { states?: string[]; metrics?: MetricDefinition[] } = {}) {
      const states = overrides.states ?? ['active', 'draining', 'retired'];
      await api.db.insert(entityTypes).values({ ...keys, name, states, initialState: states[0]!, metrics: overrides.metrics ?? [] });
      return name;
    },
    async relationshipType(name: string, from: string, to: string) {
      await api.db
        .insert(relationshipTypes)
        .values({ ...keys, name, fromEntityTypeName: from, toEntityTypeName: to, cardinality: 'many-to-many', states: ['active'] });
      return name;
    },
    async entity(
      name: string,
      type: string,
      fields: { state?: string; labels?: Record<string, string>; properties?: Record<string, unknown>; env?: string } = {},
    ) {
      const [row] = await api.db
        .insert(entities)
        .values({
          ...keys,
          envId: await envId(fields.env),
          entityTypeName: type,
          name,
          state: fields.state ?? 'active',
          labels: fields.labels ?? {},
          properties: fields.properties ?? {},
        })
        .returning();
      return row!;
    },
    async relate(type: string, from: { id: string; envId: string }, to: { id: string }) {
      const [row] = await api.db
        .insert(relationships)
        .values({ ...keys, envId: from.envId, relationshipTypeName: type, fromEntityId: from.id, toEntityId: to.id, state: 'active' })
        .returning();
      return row!;
    },
    async metric(entity: { id: string }, name: string, value: number) {
      await api.db.insert(entityMetrics).values({ entityId: entity.id, name, value });
    },
  };
}
