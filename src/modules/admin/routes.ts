import { superAdminOnly } from '../../auth/memberships';
import { createRoute } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { errorResponses, jsonResponse, UserSessionSecurity } from '../../http/openapi';
import {
  AdminAuditList,
  AdminAuditQuery,
  AdminGithubInstallationList,
  AdminMetricsOverview,
  AdminOrgDetail,
  AdminOrgList,
  AdminOrgParam,
  AdminOrgSuspendResult,
  NukeParams,
  NukeResult,
} from './schemas';
import {
  getOrgDetail,
  listAudit,
  listGithubInstallations,
  listOrgs,
  metricsOverview,
  nukeProject,
  setOrgSuspension,
} from './service';

export const adminRoutes = new ApiRoutes<AppEnv>();

const TAGS = ['Super-admin'];
const WHO =
  'Super-admins only: a user session whose verified email is in SUPER_ADMIN_EMAILS. Without a session (service tokens included) 401; any other user 403.';

adminRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/admin/orgs',
    tags: TAGS,
    summary: 'List every organization',
    description: `Every organization except soft-deleted ones, newest first, with member and project counts. ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    responses: {
      200: jsonResponse(AdminOrgList, 'Organizations'),
      ...errorResponses(401, 403),
    },
  }),
  async (c) => c.json(await listOrgs(c.get('services')), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/admin/orgs/{id}',
    tags: TAGS,
    summary: 'Get an organization with its members and projects',
    description: `By id or slug; soft-deleted organizations too (deletedAt set). ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    request: { params: AdminOrgParam },
    responses: {
      200: jsonResponse(AdminOrgDetail, 'The organization'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await getOrgDetail(c.get('services'), c.req.valid('param').id), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/admin/orgs/{id}/suspend',
    tags: TAGS,
    summary: 'Suspend an organization',
    description: `Its users and tokens then get 403 org_suspended on its resources. Idempotent: suspending a suspended organization keeps its first suspendedAt and records nothing. The transition is audited (org.suspended) in its transaction. A soft-deleted organization is 404. ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    request: { params: AdminOrgParam },
    responses: {
      200: jsonResponse(AdminOrgSuspendResult, 'Suspended'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await setOrgSuspension(c.get('services'), c.req.valid('param').id, true), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/admin/orgs/{id}/unsuspend',
    tags: TAGS,
    summary: 'Unsuspend an organization',
    description: `Restores access at once. Idempotent; the transition is audited (org.unsuspended) in its transaction. ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    request: { params: AdminOrgParam },
    responses: {
      200: jsonResponse(AdminOrgSuspendResult, 'Active (suspendedAt null)'),
      ...errorResponses(401, 403, 404),
    },
  }),
  async (c) => c.json(await setOrgSuspension(c.get('services'), c.req.valid('param').id, false), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/admin/audit',
    tags: TAGS,
    summary: 'List control-plane audit events',
    description: `Newest first. Filters combine (AND); \`since\` is inclusive, \`until\` exclusive; \`total\` counts every event matching the filters. ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    request: { query: AdminAuditQuery },
    responses: {
      200: jsonResponse(AdminAuditList, 'A page of events'),
      ...errorResponses(400, 401, 403),
    },
  }),
  async (c) => c.json(await listAudit(c.get('services'), c.req.valid('query')), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/admin/metrics/overview',
    tags: TAGS,
    summary: 'User and session counts',
    description: `Users, sign-ups over the last 24 hours, 7 and 30 days, unexpired sessions, and distinct users with a session created or refreshed in the last 30 days. ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    responses: {
      200: jsonResponse(AdminMetricsOverview, 'The counts'),
      ...errorResponses(401, 403),
    },
  }),
  async (c) => c.json(await metricsOverview(c.get('services')), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'delete',
    path: '/admin/projects/{projectId}/nuke',
    tags: TAGS,
    summary: "Wipe a project's catalog and runtime data",
    description: `Deletes every entity type, relationship type, cell, action, entity, relationship, metric value, change-log entry and action run of the project, in one transaction. Keeps the project, its members, repository links, tokens, environments, secrets and graph views. Idempotent (a second call deletes nothing); audited (project.nuked). ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    request: { params: NukeParams },
    responses: {
      200: jsonResponse(NukeResult, 'What was deleted'),
      ...errorResponses(400, 401, 403, 404),
    },
  }),
  async (c) => c.json(await nukeProject(c.get('services'), c.req.valid('param').projectId), 200),
);

adminRoutes.openapi(
  createRoute({
    method: 'get',
    path: '/admin/integrations/github-installations',
    tags: TAGS,
    summary: 'List code-hosting app installations',
    description: `Across every organization; no pagination. ${WHO}`,
    security: UserSessionSecurity,
    middleware: superAdminOnly,
    responses: {
      200: jsonResponse(AdminGithubInstallationList, 'Installations'),
      ...errorResponses(401, 403),
    },
  }),
  async (c) => c.json(await listGithubInstallations(c.get('services')), 200),
);
