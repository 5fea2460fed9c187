import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import {
  ProjectParams,
  RelationshipType,
  RelationshipTypeDeleted,
  RelationshipTypeParams,
  RelationshipTypeRequest,
} from './schemas';
import {
  createRelationshipType,
  deleteRelationshipType,
  getRelationshipType,
  listRelationshipTypes,
  updateRelationshipType,
} from './service';

export const relationshipTypeRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Relationship types'];

relationshipTypeRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/relationship-types',
    tags: TAGS,
    summary: "List a project's relationship types",
    description: 'Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams },
    responses: {
      200: jsonResponse(z.array(RelationshipType), 'Relationship types, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await listRelationshipTypes(c.get('services'), { org: o, project: p }), 200);
  },
);

relationshipTypeRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/relationship-types',
    tags: TAGS,
    summary: 'Create a relationship type',
    description:
      'Needs catalog:write. `from` and `to` must name entity types of the project (400 invalid_reference). A name already taken is 409 already_exists.',
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams, body: jsonBody(RelationshipTypeRequest) },
    responses: {
      201: jsonResponse(RelationshipType, 'The new relationship type'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await createRelationshipType(c.get('services'), { org: o, project: p }, c.req.valid('json')), 201);
  },
);

relationshipTypeRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/relationship-types/{name}',
    tags: TAGS,
    summary: 'Get a relationship type',
    description: 'Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: RelationshipTypeParams },
    responses: {
      200: jsonResponse(RelationshipType, 'The relationship type'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await getRelationshipType(c.get('services'), { org: o, project: p }, name), 200);
  },
);

relationshipTypeRoutes.openapi(
  createRoute({
    method: 'put',
    path: '/{o}/{p}/relationship-types/{name}',
    tags: TAGS,
    summary: 'Replace a relationship type',
    description:
      "Needs catalog:write. The body replaces the whole definition: omitted fields return to their defaults. The body's `name` must equal the path's (types are not renamed). While relationships of the type exist, `from`, `to` and `cardinality` cannot change and no state in use can be removed (409 still_referenced).",
    security: TokenOrSessionSecurity,
    request: { params: RelationshipTypeParams, body: jsonBody(RelationshipTypeRequest) },
    responses: {
      200: jsonResponse(RelationshipType, 'The updated relationship type'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await updateRelationshipType(c.get('services'), { org: o, project: p }, name, c.req.valid('json')), 200);
  },
);

relationshipTypeRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/relationship-types/{name}',
    tags: TAGS,
    summary: 'Delete a relationship type and its relationships',
    description: 'Needs catalog:write. The relationships of the type, in every environment, are deleted with it.',
    security: TokenOrSessionSecurity,
    request: { params: RelationshipTypeParams },
    responses: {
      200: jsonResponse(RelationshipTypeDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await deleteRelationshipType(c.get('services'), { org: o, project: p }, name), 200);
  },
);
