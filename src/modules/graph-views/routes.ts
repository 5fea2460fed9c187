import { createRoute, z } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { errorResponses, jsonBody, jsonResponse, TokenOrSessionSecurity } from '../../http/openapi';
import { GraphView, GraphViewCreate, GraphViewDeleted, GraphViewParams, GraphViewProjectParams, GraphViewUpdate } from './schemas';
import {
  createGraphView,
  deleteGraphView,
  getDefaultGraphView,
  getGraphView,
  listGraphViews,
  setDefaultGraphView,
  updateGraphView,
} from './service';

export const graphViewRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Graph views'];
const PATH = '/{o}/{p}/graph-views';
const VISIBILITY = "A personal view of another user is 404, as if absent, whatever the caller's role.";
const CHANGE_RULES = `Needs graph:write; a project view also needs graph:manage (admin or owner), else 403. ${VISIBILITY}`;

graphViewRoutes.openapi(
  createRoute({
    method: 'get',
    path: PATH,
    tags: TAGS,
    summary: "List the project's views and the caller's personal views",
    description: 'Needs graph:read. Project views first, then personal ones, each by name.',
    security: TokenOrSessionSecurity,
    request: { params: GraphViewProjectParams },
    responses: {
      200: jsonResponse(z.array(GraphView), 'Views the caller may see'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await listGraphViews(c.get('services'), { org: o, project: p }), 200);
  },
);

graphViewRoutes.openapi(
  createRoute({
    method: 'post',
    path: PATH,
    tags: TAGS,
    summary: 'Save a view',
    description:
      'Needs graph:write. A personal (`user`) view needs a user session: a service token or bootstrap mode gets 401. A project view needs graph:manage (admin or owner): 403. A new view is never the default; PATCH .../default makes it one.',
    security: TokenOrSessionSecurity,
    request: { params: GraphViewProjectParams, body: jsonBody(GraphViewCreate) },
    responses: {
      201: jsonResponse(GraphView, 'The new view'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await createGraphView(c.get('services'), { org: o, project: p }, c.req.valid('json')), 201);
  },
);

// before `/{id}`: `default` is a path of its own, not a view id
graphViewRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${PATH}/default`,
    tags: TAGS,
    summary: 'The view to open first',
    description:
      'Needs graph:read. The caller\'s personal default, else the project default, else a synthetic view named `Fleet` (id, createdAt and updatedAt null, scope `project`, isDefault true, config `{}`, pinnedPositions null).',
    security: TokenOrSessionSecurity,
    request: { params: GraphViewProjectParams },
    responses: {
      200: jsonResponse(GraphView, 'The default view'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p } = c.req.valid('param');
    return c.json(await getDefaultGraphView(c.get('services'), { org: o, project: p }), 200);
  },
);

graphViewRoutes.openapi(
  createRoute({
    method: 'get',
    path: `${PATH}/{id}`,
    tags: TAGS,
    summary: 'Read a view',
    description: `Needs graph:read. ${VISIBILITY}`,
    security: TokenOrSessionSecurity,
    request: { params: GraphViewParams },
    responses: {
      200: jsonResponse(GraphView, 'The view'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, id } = c.req.valid('param');
    return c.json(await getGraphView(c.get('services'), { org: o, project: p }, id), 200);
  },
);

graphViewRoutes.openapi(
  createRoute({
    method: 'put',
    path: `${PATH}/{id}`,
    tags: TAGS,
    summary: 'Change a view',
    description: `${CHANGE_RULES} Only the fields sent change; \`pinnedPositions: null\` unpins every node.`,
    security: TokenOrSessionSecurity,
    request: { params: GraphViewParams, body: jsonBody(GraphViewUpdate) },
    responses: {
      200: jsonResponse(GraphView, 'The view'),
      ...errorResponses(400, 401, 403, 404, 413),
    },
  }),
  async (c) => {
    const { o, p, id } = c.req.valid('param');
    return c.json(await updateGraphView(c.get('services'), { org: o, project: p }, id, c.req.valid('json')), 200);
  },
);

graphViewRoutes.openapi(
  createRoute({
    method: 'delete',
    path: `${PATH}/{id}`,
    tags: TAGS,
    summary: 'Delete a view',
    description: `${CHANGE_RULES} Deleting a default leaves its group without one: GET .../default falls back.`,
    security: TokenOrSessionSecurity,
    request: { params: GraphViewParams },
    responses: {
      200: jsonResponse(GraphViewDeleted, 'Deleted'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, id } = c.req.valid('param');
    return c.json(await deleteGraphView(c.get('services'), { org: o, project: p }, id), 200);
  },
);

graphViewRoutes.openapi(
  createRoute({
    method: 'patch',
    path: `${PATH}/{id}/default`,
    tags: TAGS,
    summary: 'Make a view the default of its group',
    description: `${CHANGE_RULES} The group is the project's views, or one user's personal views in the project; its previous default is cleared in the same transaction. Idempotent.`,
    security: TokenOrSessionSecurity,
    request: { params: GraphViewParams },
    responses: {
      200: jsonResponse(GraphView, 'The view, now the default'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => {
    const { o, p, id } = c.req.valid('param');
    return c.json(await setDefaultGraphView(c.get('services'), { org: o, project: p }, id), 200);
  },
);
