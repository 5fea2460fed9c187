import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse, jsonText } from '../../http/openapi';
import { announceNextPage } from '../../http/pagination';
import {
  BatchMetricsQuery,
  BatchMetricValues,
  Entity,
  EntityCreate,
  EntityDeleted,
  EntityDriftStatus,
  EntityListQuery,
  EntityMetricParams,
  EntityParams,
  EntityUpdate,
  EnvParams,
  MetricSet,
  MetricValue,
  MetricValues,
  SyncStamp,
  SyncStampResult,
} from './schemas';
import { getBatchMetrics, getEntityMetrics, setEntityMetric } from './metrics';
import { createEntity, deleteEntity, getEntity, listEntities, updateEntity } from './service';
import { getEntityDrift, stampEntitySync } from './sync';

export const entityRoutes = new ApiRoutes<AppEnv>();

const ENTITIES = '/{o}/{p}/envs/{envName}/entities';
const ENTITY = `${ENTITIES}/{name}`;
const TAGS = ['Entities'];
const CELL_SCOPE_READ = 'A cell-scoped token sees only entities in its cells; others are 404.';
const CELL_SCOPE_WRITE = 'A cell-scoped token gets 403 cell_scope_violation for an entity outside its cells.';

const envRef = (params: { o: string; p: string; envName: string }) => ({ org: params.o, project: params.p, env: params.envName });

entityRoutes.openapi(
  createRoute({
    method: 'get',
    path: ENTITIES,
    tags: TAGS,
    summary: "List an environment's entities",
    description:
      'Name order, keyset-paginated: when there is a next page, `X-Next-Cursor` and `Link: <…>; rel="next"` carry it. ' +
      'Filters combine with AND. A cell-scoped token lists only entities in its cells. Needs data:read.',
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, query: EntityListQuery },
    responses: {
      200: {
        ...jsonResponse(z.array(Entity), 'One page of entities, by name'),
        headers: {
          'X-Next-Cursor': { description: 'Cursor of the next page (absent on the last page)', schema: { type: 'string' } },
          Link: { description: '`<url>; rel="next"` (absent on the last page)', schema: { type: 'string' } },
        },
      },
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { page, next } = await listEntities(c.get('services'), envRef(c.req.valid('param')), c.req.valid('query'));
    announceNextPage(c, next);
    return c.json(page, 200);
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'post',
    path: ENTITIES,
    tags: TAGS,
    summary: 'Create an entity',
    description:
      "`state` defaults to the type's initialState; properties are validated against the type and defaults filled. " +
      'A cell-scoped token may only create entities that fall in its cells (403 cell_scope_violation). Needs data:write.',
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, body: jsonBody(EntityCreate) },
    responses: {
      201: jsonResponse(Entity, 'The new entity'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => c.json(await createEntity(c.get('services'), envRef(c.req.valid('param')), c.req.valid('json')), 201),
);

// before ENTITY: `metrics` is a route, not an entity name (ENTITIES/stream is kept free likewise)
entityRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${ENTITIES}/metrics`,
    tags: TAGS,
    summary: 'Read metric values of many entities',
    description:
      'Unknown names, and names outside a cell-scoped token\'s cells, are left out; an entity without values maps to `{}`. Needs data:read.',
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, query: BatchMetricsQuery },
    responses: {
      200: jsonResponse(BatchMetricValues, 'Metric values by entity name'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => c.json(await getBatchMetrics(c.get('services'), envRef(c.req.valid('param')), c.req.valid('query')), 200),
);

entityRoutes.openapi(
  createRoute({
    method: 'get',
    path: ENTITY,
    tags: TAGS,
    summary: 'Read an entity',
    description: `${CELL_SCOPE_READ} Needs data:read.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityParams },
    responses: {
      200: jsonResponse(Entity, 'The entity'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { name, ...env } = c.req.valid('param');
    // the Entity's JSON as Postgres wrote it (src/modules/entities/driver-rows.ts)
    return jsonText<Entity>(c, await getEntity(c.get('services'), envRef(env), name));
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'put',
    path: ENTITY,
    tags: TAGS,
    summary: 'Update an entity',
    description:
      '`properties` and `labels`, when given, replace the stored ones. A state change must be declared by the type and, ' +
      'when the type declares transitions, listed (409 transition_not_allowed). `name` renames. ' +
      `${CELL_SCOPE_WRITE} The entity must stay in the token's cells too. Needs data:write.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityParams, body: jsonBody(EntityUpdate) },
    responses: {
      200: jsonResponse(Entity, 'The updated entity'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { name, ...env } = c.req.valid('param');
    return c.json(await updateEntity(c.get('services'), envRef(env), name, c.req.valid('json')), 200);
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'delete',
    path: ENTITY,
    tags: TAGS,
    summary: 'Delete an entity',
    description: `Its metric values, cell memberships and relationships go with it. ${CELL_SCOPE_WRITE} Needs data:write.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityParams },
    responses: {
      200: jsonResponse(EntityDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { name, ...env } = c.req.valid('param');
    return c.json(await deleteEntity(c.get('services'), envRef(env), name), 200);
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${ENTITY}/metrics`,
    tags: TAGS,
    summary: "Read an entity's metric values",
    description: `${CELL_SCOPE_READ} Needs data:read.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityParams },
    responses: {
      200: jsonResponse(MetricValues, 'Values by metric name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { name, ...env } = c.req.valid('param');
    return c.json(await getEntityMetrics(c.get('services'), envRef(env), name), 200);
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'put',
    path: `${ENTITY}/metrics/{metricName}`,
    tags: TAGS,
    summary: 'Set a metric value',
    description:
      'The metric must be declared by the entity type (400 unknown_metric) and the value within its min/max (400 validation_failed). ' +
      `Metric values are not entity changes: no change event, updatedAt unchanged. ${CELL_SCOPE_WRITE} Needs data:write.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityMetricParams, body: jsonBody(MetricSet) },
    responses: {
      200: jsonResponse(MetricValue, 'The stored value'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { name, metricName, ...env } = c.req.valid('param');
    return c.json(await setEntityMetric(c.get('services'), envRef(env), name, metricName, c.req.valid('json').value), 200);
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'post',
    path: `${ENTITY}/sync-stamp`,
    tags: TAGS,
    summary: 'Record that a source saw the entity in sync',
    description:
      '`observedAt` defaults to now and may be at most 5 minutes ahead of the server clock. lastSyncedAt never moves backwards: ' +
      `an older stamp changes nothing. An applied stamp is an entity update (change event). ${CELL_SCOPE_WRITE} Needs data:write.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityParams, body: jsonBody(SyncStamp) },
    responses: {
      200: jsonResponse(SyncStampResult, 'The sync fields now stored'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { name, ...env } = c.req.valid('param');
    return c.json(await stampEntitySync(c.get('services'), envRef(env), name, c.req.valid('json')), 200);
  },
);

entityRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${ENTITY}/drift`,
    tags: TAGS,
    summary: "Read an entity's sync drift",
    description:
      "`untracked` (type not syncTracked), `never-synced`, `in-sync` (lastSyncedAt within the type's syncFreshness.maxAgeSeconds, " +
      `default 3600) or \`stale\`. ${CELL_SCOPE_READ} Needs data:read.`,
    security: TokenOrSessionSecurity,
    request: { params: EntityParams },
    responses: {
      200: jsonResponse(EntityDriftStatus, 'Drift status'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { name, ...env } = c.req.valid('param');
    return c.json(await getEntityDrift(c.get('services'), envRef(env), name), 200);
  },
);
