import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { EntityType, EntityTypeDeleted, EntityTypeParams, EntityTypeRequest, ProjectParams } from './schemas';
import { createEntityType, deleteEntityType, getEntityType, listEntityTypes, updateEntityType } from './service';

export const entityTypeRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Entity types'];

entityTypeRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/entity-types',
    tags: TAGS,
    summary: "List a project's entity types",
    description: 'Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams },
    responses: {
      200: jsonResponse(z.array(EntityType), 'Entity types, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await listEntityTypes(c.get('services'), { org: o, project: p }), 200);
  },
);

entityTypeRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/entity-types',
    tags: TAGS,
    summary: 'Create an entity type',
    description:
      'Needs catalog:write. `initialState` must be one of `states`; unique constraints name declared properties and transition constraints declared states (400 validation_failed). A name already taken is 409 already_exists.',
    security: TokenOrSessionSecurity,
    request: { params: ProjectParams, body: jsonBody(EntityTypeRequest) },
    responses: {
      201: jsonResponse(EntityType, 'The new entity type'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await createEntityType(c.get('services'), { org: o, project: p }, c.req.valid('json')), 201);
  },
);

entityTypeRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/entity-types/{name}',
    tags: TAGS,
    summary: 'Get an entity type',
    description: 'Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: EntityTypeParams },
    responses: {
      200: jsonResponse(EntityType, 'The entity type'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await getEntityType(c.get('services'), { org: o, project: p }, name), 200);
  },
);

entityTypeRoutes.openapi(
  createRoute({
    method: 'put',
    path: '/{o}/{p}/entity-types/{name}',
    tags: TAGS,
    summary: 'Replace an entity type',
    description:
      "Needs catalog:write. The body replaces the whole definition: omitted fields return to their defaults. The body's `name` must equal the path's (types are not renamed). 409 still_referenced when entities are in a state the update removes, or when the unique constraints change while entities of the type exist.",
    security: TokenOrSessionSecurity,
    request: { params: EntityTypeParams, body: jsonBody(EntityTypeRequest) },
    responses: {
      200: jsonResponse(EntityType, 'The updated entity type'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await updateEntityType(c.get('services'), { org: o, project: p }, name, c.req.valid('json')), 200);
  },
);

entityTypeRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/entity-types/{name}',
    tags: TAGS,
    summary: 'Delete an entity type',
    description:
      'Needs catalog:write. 409 still_referenced while entities of the type exist in any environment of the project, or a relationship type or a cell names it.',
    security: TokenOrSessionSecurity,
    request: { params: EntityTypeParams },
    responses: {
      200: jsonResponse(EntityTypeDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404, 409),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await deleteEntityType(c.get('services'), { org: o, project: p }, name), 200);
  },
);
