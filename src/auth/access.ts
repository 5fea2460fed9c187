import { and, eq, gt, inArray, isNull, or, sql, type SQL } from 'drizzle-orm';
import type { Caller, ServiceContext } from '../context';
import type { Queryable } from '../db/client';
import { environments, orgs, projects, serviceTokens } from '../db/schema';
import { ApiError, notFound } from '../http/errors';
import { resolveCaller, tokenCaller, tokenCallerColumns, tokenPrincipalColumns, type CallerState } from './caller';
import { grantEnvName, tokenGrantColumns, type Grants } from './grants';
import { settleMembership } from './memberships';
import { isUuid } from '../modules/names';
import { ROLES, roleAllows, type Permission, type Role } from './permissions';

/**
 * Tenancy and authorization in one place. Every lookup filters by the
 * caller's tenant keys: a token of another organization or project sees a
 * 404, never a 403, so existence does not leak across tenants.
 *
 * A presented token is looked up here, joined with the organization, the
 * project and the environment the path names: one query settles who is
 * calling and what they address. When that finds nothing, the slow path
 * tells the cases apart (unknown token: 401; someone else's project: 404).
 */

export type OrgRow = typeof orgs.$inferSelect;
export type ProjectRow = typeof projects.$inferSelect;
export type EnvironmentRow = typeof environments.$inferSelect;

/** What a project-scoped path names: organization and project, each by id or slug. */
export type ProjectRef = { org: string; project: string };
/** What an environment-scoped path names. */
export type EnvRef = ProjectRef & { env: string };

const orgMatches = (ref: string): SQL => (isUuid(ref) ? eq(orgs.id, ref) : eq(orgs.slug, ref));
const projectMatches = (ref: string): SQL => (isUuid(ref) ? eq(projects.id, ref) : eq(projects.slug, ref));

export function requirePermission(caller: Caller, permission: Permission): void {
  const { grants } = caller;
  if (grants.scope === 'unrestricted') return;
  if (!roleAllows(grants.role, permission)) {
    throw new ApiError('forbidden', `role "${grants.role}" lacks the permission ${permission}`);
  }
}

function assertNotSuspended(org: OrgRow): void {
  if (org.suspendedAt) throw new ApiError('org_suspended', `organization "${org.slug}" is suspended`);
}

/** An organization by id or slug, visible to the caller and not suspended. */
export async function loadOrg(ctx: ServiceContext, ref: string, db: Queryable = ctx.db): Promise<OrgRow> {
  const state = ctx.callerState;
  if (!state.resolved && state.tokenHash !== undefined) {
    const [row] = await db
      .select({ ...tokenCallerColumns, grantEnvName, org: orgs })
      .from(serviceTokens)
      .innerJoin(orgs, eq(orgs.id, tokenGrantColumns.grantOrgId))
      .where(and(eq(serviceTokens.tokenHash, state.tokenHash), isNull(serviceTokens.revokedAt), orgMatches(ref), isNull(orgs.deletedAt)))
      .limit(1);
    if (row) {
      state.settle(tokenCaller(row, ctx.clock));
      assertNotSuspended(row.org);
      return row.org;
    }
    await resolveCaller(state, db, ctx.clock);
  }
  const [org] = await db.select().from(orgs).where(and(orgMatches(ref), isNull(orgs.deletedAt))).limit(1);
  const hidden = () => notFound(`organization "${ref}"`);
  if (!org) throw hidden();
  await settleMembership(state, db, org.id, hidden);
  if (!grantsReachOrg(ctx.caller.grants, org.id)) throw hidden();
  assertNotSuspended(org);
  return org;
}

/** Whether grants reach into an organization at all (a token: its own; a member: its organization). */
const grantsReachOrg = (grants: Grants, orgId: string): boolean => grants.scope === 'unrestricted' || grants.orgId === orgId;

interface Tenancy {
  org: OrgRow;
  project: ProjectRow;
  /** The environment named in the lookup, or null when it does not exist (or none was named). */
  env: EnvironmentRow | null;
}

const placeholderMatch = <T extends { id: any; slug: any }>(table: T, byId: boolean, name: string): SQL =>
  byId ? eq(table.id, sql.placeholder(name)) : eq(table.slug, sql.placeholder(name));

function buildTokenTenancyQuery(db: Queryable, orgById: boolean, projectById: boolean, name: string) {
  return db
    .select({ ...tokenCallerColumns, grantEnvName, org: orgs, project: projects, env: environments })
    .from(serviceTokens)
    .innerJoin(projects, eq(projects.id, tokenGrantColumns.grantProjectId))
    .innerJoin(orgs, eq(orgs.id, projects.orgId))
    .leftJoin(environments, and(eq(environments.projectId, projects.id), eq(environments.name, sql.placeholder('env'))))
    .where(tokenTenancyMatches({ orgById, projectById }))
    .limit(1)
    .prepare(name);
}

/**
 * The token and the organization and project the path names, as placeholders
 * (tokenHash, org, project): the one lookup every token-authenticated path
 * starts from, here and in plainEnvironmentAccess.
 */
function tokenTenancyMatches(shape: { orgById: boolean; projectById: boolean }, ...more: (SQL | undefined)[]): SQL {
  return and(
    eq(serviceTokens.tokenHash, sql.placeholder('tokenHash')),
    isNull(serviceTokens.revokedAt),
    placeholderMatch(orgs, shape.orgById, 'org'),
    placeholderMatch(projects, shape.projectById, 'project'),
    isNull(orgs.deletedAt),
    ...more,
  )!;
}

const preparedTenancy = new WeakMap<Queryable, Map<string, ReturnType<typeof buildTokenTenancyQuery>>>();

/**
 * The token+tenancy lookup runs on every request, so it is built once per
 * database handle and shape (id or slug for the organization and the
 * project): drizzle does not rebuild its SQL text on every call, and where
 * the platform allows (Platform.namedStatements) Postgres keeps its plan.
 */
function tokenTenancyQuery(db: Queryable, orgById: boolean, projectById: boolean, named: boolean) {
  let byShape = preparedTenancy.get(db);
  if (!byShape) preparedTenancy.set(db, (byShape = new Map()));
  const shape = `${orgById ? 'id' : 'slug'}_${projectById ? 'id' : 'slug'}`;
  let query = byShape.get(shape);
  if (!query) {
    query = buildTokenTenancyQuery(db, orgById, projectById, named ? `cellplane_token_tenancy_${shape}` : '');
    byShape.set(shape, query);
  }
  return query;
}

/** The organization, project and (optionally) environment a path names, visible to the caller. */
async function loadTenancy(
  ctx: ServiceContext,
  ref: { org: string; project: string; env?: string },
  db: Queryable,
): Promise<Tenancy> {
  const state = ctx.callerState;
  if (!state.resolved && state.tokenHash !== undefined) {
    const [row] = await tokenTenancyQuery(db, isUuid(ref.org), isUuid(ref.project), ctx.namedStatements).execute({
      tokenHash: state.tokenHash!,
      org: ref.org,
      project: ref.project,
      env: ref.env ?? '',
    });
    if (row) {
      state.settle(tokenCaller(row, ctx.clock));
      assertNotSuspended(row.org);
      return { org: row.org, project: row.project, env: row.env };
    }
    await resolveCaller(state, db, ctx.clock);
  }
  // the slow path: bootstrap mode, a user, or a token the prepared lookup did not match
  const [row] = await db
    .select({ org: orgs, project: projects, env: environments })
    .from(projects)
    .innerJoin(orgs, eq(orgs.id, projects.orgId))
    .leftJoin(environments, and(eq(environments.projectId, projects.id), eq(environments.name, ref.env ?? '')))
    .where(and(orgMatches(ref.org), projectMatches(ref.project), isNull(orgs.deletedAt)))
    .limit(1);
  // same answer whether the project is missing or belongs to someone else
  const hidden = () => notFound(`project "${ref.project}"`);
  if (!row) {
    await loadOrg(ctx, ref.org, db);
    throw hidden();
  }
  await settleMembership(state, db, row.org.id, hidden);
  const { grants } = ctx.caller;
  if (!grantsReachOrg(grants, row.org.id) || (grants.scope === 'project' && grants.projectId !== row.project.id)) throw hidden();
  assertNotSuspended(row.org);
  return row;
}

/** A project by id or slug inside an organization, visible to the caller. */
export async function loadProject(
  ctx: ServiceContext,
  orgRef: string,
  projectRef: string,
  db: Queryable = ctx.db,
): Promise<{ org: OrgRow; project: ProjectRow }> {
  const { org, project } = await loadTenancy(ctx, { org: orgRef, project: projectRef }, db);
  return { org, project };
}

/** Project-scoped access: the project is visible and the caller's role holds `permission`. */
export async function authorizeProject(
  ctx: ServiceContext,
  ref: ProjectRef,
  permission: Permission,
  db: Queryable = ctx.db,
): Promise<{ org: OrgRow; project: ProjectRow }> {
  const found = await loadProject(ctx, ref.org, ref.project, db);
  requirePermission(ctx.caller, permission);
  return found;
}

/** Environment-scoped access: project access plus the grants' environment pin. */
export async function authorizeEnvironment(
  ctx: ServiceContext,
  ref: EnvRef,
  permission: Permission,
  db: Queryable = ctx.db,
): Promise<{ org: OrgRow; project: ProjectRow; env: EnvironmentRow }> {
  const { org, project, env } = await loadTenancy(ctx, ref, db);
  requirePermission(ctx.caller, permission);
  if (!env) throw notFound(`environment "${ref.env}"`);
  assertEnvironmentPin(ctx.caller, env);
  return { org, project, env };
}

export function assertEnvironmentPin(caller: Caller, env: { id: string; name: string }): void {
  const { grants } = caller;
  if (grants.scope === 'project' && grants.envId !== null && grants.envId !== env.id) {
    throw new ApiError('forbidden', `token is pinned to environment "${grants.envName}"`);
  }
}

// --- one round trip: the rules above as SQL -----------------------------------

const rolesWith = (permission: Permission) => ROLES.filter((role) => roleAllows(role, permission));

/**
 * What plainEnvironmentAccess selects: the token columns a caller is built
 * from (tokenCaller) and the tenancy keys of the path, so the query can be a
 * subquery or a WITH item of a larger statement. Drizzle refers to such
 * columns by their alias alone, so each alias is one no table has.
 */
const plainAccessFields = {
  tokenId: sql<string>`${tokenPrincipalColumns.tokenId}`.as('caller_token_id'),
  grantOrgId: sql<string>`${tokenGrantColumns.grantOrgId}`.as('caller_token_org_id'),
  grantProjectId: sql<string>`${tokenGrantColumns.grantProjectId}`.as('caller_token_project_id'),
  grantRole: sql<Role>`${tokenGrantColumns.grantRole}`.as('caller_token_role'),
  grantEnvId: sql<string | null>`${tokenGrantColumns.grantEnvId}`.as('caller_token_env_id'),
  // as a timestamp column maps it; null stays null
  tokenExpiresAt: (sql`${tokenPrincipalColumns.tokenExpiresAt}`.mapWith(serviceTokens.expiresAt) as SQL<Date | null>).as(
    'caller_token_expires_at',
  ),
  orgId: sql<string>`${projects.orgId}`.as('caller_org_id'),
  projectId: sql<string>`${projects.id}`.as('caller_project_id'),
  envId: sql<string>`${environments.id}`.as('caller_env_id'),
};

/**
 * authorizeEnvironment as SQL, for the statements that answer a whole
 * request in one round trip (src/modules/entities/fast-paths.ts): the token
 * joined with the project, organization and environment the path names,
 * matching only a caller the checks above would let through unchanged.
 * Each condition is one of those checks (named beside it); whatever it does
 * not match — a revoked, expired or unknown token, another tenant, a role
 * without `permission`, another environment's pin, a cell-scoped token, a
 * suspended organization, a missing environment — finds no row, and the
 * request goes the usual way (authorizeEnvironment and the service's own
 * queries), which gives the answer: 401, 403, 404 or a scoped one. So these
 * conditions may be stricter than the checks above but never looser:
 * test/node/fast-paths.test.ts holds each case to the slow path's answer.
 * At most one row: token hashes are unique, and so are a project's slug in
 * its organization and an environment's name in its project.
 *
 * Placeholders: tokenHash, org, project, env, and now (ISO time: a token
 * expiring at or before it is expired, as in tokenCaller).
 */
export function plainEnvironmentAccess(db: Queryable, shape: { orgById: boolean; projectById: boolean }, permission: Permission) {
  return db
    .select(plainAccessFields)
    .from(serviceTokens)
    .innerJoin(projects, eq(projects.id, tokenGrantColumns.grantProjectId))
    .innerJoin(orgs, eq(orgs.id, projects.orgId))
    .innerJoin(environments, and(eq(environments.projectId, projects.id), eq(environments.name, sql.placeholder('env'))))
    .where(
      // the tenancy lookup (loadTenancy), then:
      tokenTenancyMatches(
        shape,
        // tokenCaller: not expired
        or(isNull(tokenPrincipalColumns.tokenExpiresAt), gt(tokenPrincipalColumns.tokenExpiresAt, sql.placeholder('now'))),
        // assertNotSuspended
        isNull(orgs.suspendedAt),
        // the grants, as the helpers above read them:
        ...plainGrantConditions(tokenGrantColumns, permission),
      ),
    );
}

/**
 * Grants that pass requirePermission, assertEnvironmentPin and
 * callerCellScope unchanged, as conditions on grant columns (./grants.ts)
 * in a query that joins `environments` as the path's environment.
 */
function plainGrantConditions(grants: typeof tokenGrantColumns, permission: Permission): SQL[] {
  return [
    // requirePermission
    inArray(grants.grantRole, rolesWith(permission)),
    // assertEnvironmentPin
    or(isNull(grants.grantEnvId), eq(grants.grantEnvId, environments.id))!,
    // callerCellScope: scoped grants' reads and writes are checked against their cells
    sql`cardinality(${grants.grantCellScopes}) = 0`,
  ];
}

export type PlainAccessRow = { [K in keyof typeof plainAccessFields]: (typeof plainAccessFields)[K]['_']['type'] };

/** The columns of plainEnvironmentAccess used as a subquery or WITH item named `from`, as a nested selection. */
export function plainAccessColumns(from: { [K in keyof typeof plainAccessFields]: (typeof plainAccessFields)[K] }) {
  const { tokenId, grantOrgId, grantProjectId, grantRole, grantEnvId, tokenExpiresAt, orgId, projectId, envId } = from;
  return { tokenId, grantOrgId, grantProjectId, grantRole, grantEnvId, tokenExpiresAt, orgId, projectId, envId };
}

/** Settles the caller of a request plainEnvironmentAccess matched, from the columns it selected. */
export function settlePlainCaller(state: CallerState, row: PlainAccessRow, ref: EnvRef, now: Date): void {
  state.settle(plainCaller(row, ref, now));
}

/** The caller plainEnvironmentAccess matched, from the columns it selected, for the path `ref`. */
export function plainCaller(row: PlainAccessRow, ref: EnvRef, now: Date): Caller {
  return tokenCaller(
    {
      ...row,
      // plainEnvironmentAccess matches no cell-scoped grants, and pinned ones only in their own environment: the path's
      grantCellScopes: [],
      grantEnvName: row.grantEnvId === null ? null : ref.env,
    },
    { now: () => now },
  );
}

/**
 * The caller columns of a row as the driver returns it, unmapped (a prepared
 * statement's rows read without drizzle's mapping): each by its alias in
 * plainAccessFields, the expiry as drizzle maps a timestamp column.
 */
export function plainAccessRowOf(row: Record<string, unknown>): PlainAccessRow {
  const value = (field: { fieldAlias: string }) => row[field.fieldAlias];
  const f = plainAccessFields;
  const expiresAt = value(f.tokenExpiresAt);
  return {
    tokenId: value(f.tokenId) as string,
    grantOrgId: value(f.grantOrgId) as string,
    grantProjectId: value(f.grantProjectId) as string,
    grantRole: value(f.grantRole) as Role,
    grantEnvId: value(f.grantEnvId) as string | null,
    tokenExpiresAt: expiresAt === null || expiresAt === undefined ? null : expiresAt instanceof Date ? expiresAt : new Date(expiresAt as string),
    orgId: value(f.orgId) as string,
    projectId: value(f.projectId) as string,
    envId: value(f.envId) as string,
  };
}
