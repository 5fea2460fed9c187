import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { announceNextPage } from '../../http/pagination';
import { EnvParams } from '../entities/schemas';
import {
  EntityRelationship,
  EntityRelationshipsParams,
  Relationship,
  RelationshipCreate,
  RelationshipDeleted,
  RelationshipListQuery,
  RelationshipParams,
  RelationshipUpdate,
} from './schemas';
import {
  createRelationship,
  deleteRelationship,
  getRelationship,
  listEntityRelationships,
  listRelationships,
  updateRelationship,
} from './service';

export const relationshipRoutes = new ApiRoutes<AppEnv>();

const ENV = '/{o}/{p}/envs/{envName}';
const TAGS = ['Relationships'];
const CELL_SCOPE_NOTE =
  'A cell-scoped token sees a relationship when either end entity is in its cells; others answer 404.';

relationshipRoutes.openapi(
  createRoute({
    method: 'post',
    path: `${ENV}/relationships`,
    tags: TAGS,
    summary: 'Create a relationship between two entities',
    description:
      "Needs data:write. `from` and `to` name entities of this environment whose types are the relationship type's (400 type_mismatch). " +
      "`state` defaults to the type's first state. The type's cardinality is enforced (409 cardinality_violation); " +
      'the same type and pair twice is 409 already_exists. A cell-scoped token needs at least one end in its cells (403 cell_scope_violation).',
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, body: jsonBody(RelationshipCreate) },
    responses: {
      201: jsonResponse(Relationship, 'The new relationship'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    return c.json(await createRelationship(c.get('services'), { org: o, project: p, env: envName }, c.req.valid('json')), 201);
  },
);

relationshipRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${ENV}/relationships`,
    tags: TAGS,
    summary: "List an environment's relationships",
    description:
      'Needs data:read. Oldest first; keyset pages: the next page is announced by `X-Next-Cursor` and `Link: rel="next"`. ' +
      `Filters naming no existing type or entity match nothing. ${CELL_SCOPE_NOTE}`,
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, query: RelationshipListQuery },
    responses: {
      200: {
        ...jsonResponse(z.array(Relationship), 'One page of relationships'),
        headers: {
          'X-Next-Cursor': { description: 'Cursor of the next page, when there is one', schema: { type: 'string' } },
          Link: { description: '`<…>; rel="next"`, when there is a next page', schema: { type: 'string' } },
        },
      },
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    const { page, next } = await listRelationships(c.get('services'), { org: o, project: p, env: envName }, c.req.valid('query'));
    announceNextPage(c, next);
    return c.json(page, 200);
  },
);

relationshipRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${ENV}/relationships/{id}`,
    tags: TAGS,
    summary: 'Get a relationship',
    description: `Needs data:read. ${CELL_SCOPE_NOTE}`,
    security: TokenOrSessionSecurity,
    request: { params: RelationshipParams },
    responses: {
      200: jsonResponse(Relationship, 'The relationship'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName, id } = c.req.valid('param');
    return c.json(await getRelationship(c.get('services'), { org: o, project: p, env: envName }, id), 200);
  },
);

relationshipRoutes.openapi(
  createRoute({
    method: 'put',
    path: `${ENV}/relationships/{id}`,
    tags: TAGS,
    summary: "Update a relationship's state, properties or labels",
    description:
      'Needs data:write. Each field given replaces the stored one; the type and both ends are immutable. ' +
      `A state outside the type's states is 400 invalid_state. ${CELL_SCOPE_NOTE}`,
    security: TokenOrSessionSecurity,
    request: { params: RelationshipParams, body: jsonBody(RelationshipUpdate) },
    responses: {
      200: jsonResponse(Relationship, 'The updated relationship'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, envName, id } = c.req.valid('param');
    return c.json(await updateRelationship(c.get('services'), { org: o, project: p, env: envName }, id, c.req.valid('json')), 200);
  },
);

relationshipRoutes.openapi(
  createRoute({
    method: 'delete',
    path: `${ENV}/relationships/{id}`,
    tags: TAGS,
    summary: 'Delete a relationship',
    description: `Needs data:write. ${CELL_SCOPE_NOTE}`,
    security: TokenOrSessionSecurity,
    request: { params: RelationshipParams },
    responses: {
      200: jsonResponse(RelationshipDeleted, 'Deleted'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName, id } = c.req.valid('param');
    return c.json(await deleteRelationship(c.get('services'), { org: o, project: p, env: envName }, id), 200);
  },
);

relationshipRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${ENV}/entities/{name}/relationships`,
    tags: ['Entities', ...TAGS],
    summary: 'List every relationship touching an entity',
    description:
      'Needs data:read. Both directions, oldest first; each row is the Relationship plus `fromEntityName` and `toEntityName`. ' +
      '404 when the entity does not exist or is outside the cell-scoped token’s cells.',
    security: TokenOrSessionSecurity,
    request: { params: EntityRelationshipsParams },
    responses: {
      200: jsonResponse(z.array(EntityRelationship), "The entity's relationships"),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, envName, name } = c.req.valid('param');
    return c.json(await listEntityRelationships(c.get('services'), { org: o, project: p, env: envName }, name), 200);
  },
);
