import { and, eq, isNull } from 'drizzle-orm';
import type { Caller, ServiceContext } from '../context';
import type { Queryable } from '../db/client';
import { environments, orgs, projects } from '../db/schema';
import { ApiError, notFound } from '../http/errors';
import { roleAllows, type Permission } from './permissions';

/**
 * Tenancy and authorization in one place. Every lookup filters by the
 * caller's tenant keys: a token of another organization or project sees a
 * 404, never a 403, so existence does not leak across tenants.
 */

export type OrgRow = typeof orgs.$inferSelect;
export type ProjectRow = typeof projects.$inferSelect;
export type EnvironmentRow = typeof environments.$inferSelect;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (value: string) => UUID.test(value);

export function requirePermission(caller: Caller, permission: Permission): void {
  if (caller.kind === 'bootstrap') return;
  if (!roleAllows(caller.role, permission)) {
    throw new ApiError('forbidden', `role "${caller.role}" lacks the permission ${permission}`);
  }
}

/** An organization by id or slug, visible to the caller and not suspended. */
export async function loadOrg(ctx: ServiceContext, ref: string, db: Queryable = ctx.db): Promise<OrgRow> {
  const [org] = await db
    .select()
    .from(orgs)
    .where(and(isUuid(ref) ? eq(orgs.id, ref) : eq(orgs.slug, ref), isNull(orgs.deletedAt)))
    .limit(1);
  if (!org || (ctx.caller.kind === 'token' && ctx.caller.orgId !== org.id)) throw notFound(`organization "${ref}"`);
  if (org.suspendedAt) throw new ApiError('org_suspended', `organization "${org.slug}" is suspended`);
  return org;
}

/** A project by id or slug inside an organization, visible to the caller. */
export async function loadProject(
  ctx: ServiceContext,
  orgRef: string,
  projectRef: string,
  db: Queryable = ctx.db,
): Promise<{ org: OrgRow; project: ProjectRow }> {
  const [row] = await db
    .select({ org: orgs, project: projects })
    .from(projects)
    .innerJoin(orgs, eq(orgs.id, projects.orgId))
    .where(
      and(
        isUuid(orgRef) ? eq(orgs.id, orgRef) : eq(orgs.slug, orgRef),
        isUuid(projectRef) ? eq(projects.id, projectRef) : eq(projects.slug, projectRef),
        isNull(orgs.deletedAt),
      ),
    )
    .limit(1);
  const caller = ctx.caller;
  if (!row || (caller.kind === 'token' && caller.projectId !== row.project.id)) {
    // same answer whether the project is missing or belongs to someone else
    if (!row) await loadOrg(ctx, orgRef, db);
    throw notFound(`project "${projectRef}"`);
  }
  if (row.org.suspendedAt) throw new ApiError('org_suspended', `organization "${row.org.slug}" is suspended`);
  return row;
}

/** Project-scoped access: the project is visible and the caller's role holds `permission`. */
export async function authorizeProject(
  ctx: ServiceContext,
  ref: { org: string; project: string },
  permission: Permission,
  db: Queryable = ctx.db,
): Promise<{ org: OrgRow; project: ProjectRow }> {
  const found = await loadProject(ctx, ref.org, ref.project, db);
  requirePermission(ctx.caller, permission);
  return found;
}

/** Environment-scoped access: project access plus the token's environment pin. */
export async function authorizeEnvironment(
  ctx: ServiceContext,
  ref: { org: string; project: string; env: string },
  permission: Permission,
  db: Queryable = ctx.db,
): Promise<{ org: OrgRow; project: ProjectRow; env: EnvironmentRow }> {
  const { org, project } = await authorizeProject(ctx, ref, permission, db);
  const [env] = await db
    .select()
    .from(environments)
    .where(and(eq(environments.projectId, project.id), eq(environments.name, ref.env)))
    .limit(1);
  if (!env) throw notFound(`environment "${ref.env}"`);
  assertEnvironmentPin(ctx.caller, env);
  return { org, project, env };
}

export function assertEnvironmentPin(caller: Caller, env: { id: string; name: string }): void {
  if (caller.kind === 'token' && caller.envId !== null && caller.envId !== env.id) {
    throw new ApiError('forbidden', `token is pinned to environment "${caller.envName}"`);
  }
}
