import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { Entity } from '../entities/schemas';
import { recommendPlacement } from './recommendations';
import {
  Cell,
  CellDeleted,
  CellEnvQuery,
  CellMemberAdd,
  CellMemberParams,
  CellParams,
  CellProjectParams,
  CellRecommendations,
  CellRequest,
} from './schemas';
import { addCellMember, createCell, deleteCell, listCellMembers, listCells, readCell, removeCellMember, replaceCell } from './service';

export const cellRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Cells'];
const ENV_CHOICE =
  'The environment is the query `envName` (default `default`) or `envId`; an unknown one is 400 environment_not_found, and a token pinned to another is 403.';

cellRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/cells',
    tags: TAGS,
    summary: "List a project's cells",
    description: 'Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: CellProjectParams },
    responses: {
      200: jsonResponse(z.array(Cell), 'Cells, by name'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await listCells(c.get('services'), { org: o, project: p }), 200);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/cells',
    tags: TAGS,
    summary: 'Create a cell',
    description:
      'Needs catalog:write. 400 invalid_reference: the entity type or the derived membership\'s relationship type does not exist (or does not lead to the entity type), a selector state is not a state of the type, or the parents would form a cycle. 404: a parent cell does not exist. 409 already_exists.',
    security: TokenOrSessionSecurity,
    request: { params: CellProjectParams, body: jsonBody(CellRequest) },
    responses: {
      201: jsonResponse(Cell, 'The new cell'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await createCell(c.get('services'), { org: o, project: p }, c.req.valid('json')), 201);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/cells/{name}',
    tags: TAGS,
    summary: 'Read a cell',
    description: 'Needs catalog:read.',
    security: TokenOrSessionSecurity,
    request: { params: CellParams },
    responses: {
      200: jsonResponse(Cell, 'The cell'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await readCell(c.get('services'), { org: o, project: p }, name), 200);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'put',
    path: '/{o}/{p}/cells/{name}',
    tags: TAGS,
    summary: 'Replace a cell',
    description:
      "Needs catalog:write. Replaces the definition wholesale: omitted fields take their defaults. The body's name must be the path's (cells are not renamed). References are checked as on create. Explicit members are dropped when the cell turns derived or its entity type changes.",
    security: TokenOrSessionSecurity,
    request: { params: CellParams, body: jsonBody(CellRequest) },
    responses: {
      200: jsonResponse(Cell, 'The cell as stored'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await replaceCell(c.get('services'), { org: o, project: p }, name, c.req.valid('json')), 200);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/cells/{name}',
    tags: TAGS,
    summary: 'Delete a cell',
    description: 'Needs catalog:write. A cell that is the parent of another is 409 still_referenced. Its explicit memberships go with it.',
    security: TokenOrSessionSecurity,
    request: { params: CellParams },
    responses: {
      200: jsonResponse(CellDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404, 409),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await deleteCell(c.get('services'), { org: o, project: p }, name), 200);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/cells/{name}/members',
    tags: TAGS,
    summary: "List a cell's members in an environment",
    description: `Needs catalog:read. Explicit or derived members, by name; derived membership is evaluated now. ${ENV_CHOICE} A cell-scoped token sees only members inside its cells.`,
    security: TokenOrSessionSecurity,
    request: { params: CellParams, query: CellEnvQuery },
    responses: {
      200: jsonResponse(z.array(Entity), 'Members, by name'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await listCellMembers(c.get('services'), { org: o, project: p }, name, c.req.valid('query')), 200);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/cells/{name}/members',
    tags: TAGS,
    summary: 'Add an entity to an explicit cell',
    description: `Needs catalog:write. The body's envId/envName, when given, override the query. ${ENV_CHOICE} Adding a member again is a no-op (201). 400 type_mismatch: entityTypeName is not the entity's type or the cell's. 409 membership_derived: the cell derives its members. 403 cell_scope_violation: a cell-scoped token names an entity outside its cells.`,
    security: TokenOrSessionSecurity,
    request: { params: CellParams, query: CellEnvQuery, body: jsonBody(CellMemberAdd) },
    responses: {
      201: { description: 'Added (no body)' },
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    await addCellMember(c.get('services'), { org: o, project: p }, name, c.req.valid('query'), c.req.valid('json'));
    return c.body(null, 201);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/{o}/{p}/cells/{name}/members/{entityName}',
    tags: TAGS,
    summary: 'Remove an entity from an explicit cell',
    description: `Needs catalog:write. ${ENV_CHOICE} Removing an entity that is not a member is a no-op (200); an entity missing from the environment is 404. 409 membership_derived: the cell derives its members. 403 cell_scope_violation: a cell-scoped token names an entity outside its cells, or one the removal would take out of them.`,
    security: TokenOrSessionSecurity,
    request: { params: CellMemberParams, query: CellEnvQuery },
    responses: {
      200: { description: 'Removed (no body)' },
      ...errorResponses(400, 401, 403, 404, 409),
    },
  }),
  async (c) => {
    const { o, p, name, entityName } = c.req.valid('param');
    await removeCellMember(c.get('services'), { org: o, project: p }, name, entityName, c.req.valid('query'));
    return c.body(null, 200);
  },
);

cellRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/{o}/{p}/cells/{name}/recommendations',
    tags: TAGS,
    summary: "Rank a cell's members as placement targets",
    description: `Needs catalog:read. ${ENV_CHOICE} Members for which every constraint holds rank first, in the order of the placement policy: least-loaded by load (Σ metric/capacity over the type's metrics with a capacity; lower first, ties by name), round-robin by rotating the members (by name) one step per call, random by a uniform shuffle. Ineligible members follow with eligible false and the constraints they fail. A round-robin call advances the cell's counter, whoever calls.`,
    security: TokenOrSessionSecurity,
    request: { params: CellParams, query: CellEnvQuery },
    responses: {
      200: jsonResponse(CellRecommendations, 'Ranked members'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, name } = c.req.valid('param');
    return c.json(await recommendPlacement(c.get('services'), { org: o, project: p }, name, c.req.valid('query')), 200);
  },
);
