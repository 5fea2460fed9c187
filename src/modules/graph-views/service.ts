import { and, asc, eq, isNull, or, sql, type SQL } from 'drizzle-orm';
import { authorizeProject, requirePermission, type ProjectRef, type ProjectRow } from '../../auth/access';
import { requireUserSession } from '../../auth/memberships';
import type { ServiceContext } from '../../context';
import type { Queryable, Tx } from '../../db/client';
import { graphViews } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { isUuid } from '../names';
import type { GraphView, GraphViewCreate, GraphViewScope, GraphViewUpdate } from './schemas';

/**
 * Saved views of the entity graph (SPEC Graph views). A personal (`user`)
 * view exists for its owner only: to anyone else, whatever their role, it is
 * absent (404), never forbidden, so its existence does not leak. Project
 * views are read by every caller with graph:read and written only with
 * graph:manage (SPEC Authentication 4). docs/people/graph-views.md.
 */

type GraphViewRow = typeof graphViews.$inferSelect;

export const toGraphView = (row: GraphViewRow): GraphView => ({
  id: row.id,
  orgId: row.orgId,
  projectId: row.projectId,
  scope: row.scope,
  ownerUserId: row.ownerUserId,
  name: row.name,
  isDefault: row.isDefault,
  config: row.config as Record<string, unknown>,
  pinnedPositions: row.pinnedPositions as GraphView['pinnedPositions'],
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
});

/** The name of the view GET PROJ/graph-views/default answers when no default is saved (SPEC). */
export const FLEET_VIEW_NAME = 'Fleet';

/** The synthetic fallback: nothing saved, so no id and no timestamps; an empty config shows the whole graph. */
const fleetView = (project: ProjectRow): GraphView => ({
  id: null,
  orgId: project.orgId,
  projectId: project.id,
  scope: 'project',
  ownerUserId: null,
  name: FLEET_VIEW_NAME,
  isDefault: true,
  config: {},
  pinnedPositions: null,
  createdAt: null,
  updatedAt: null,
});

/** The signed-in user calling, or null for a service token or bootstrap mode (which own no personal views). */
const viewerOf = (ctx: ServiceContext): string | null => ctx.callerState.user?.userId ?? null;

/** The views of a project `viewer` may see: the project's own, and the viewer's personal ones. */
function visibleTo(projectId: string, viewer: string | null): SQL {
  const personal = viewer === null ? undefined : and(eq(graphViews.scope, 'user'), eq(graphViews.ownerUserId, viewer));
  return and(eq(graphViews.projectId, projectId), or(eq(graphViews.scope, 'project'), personal))!;
}

/** A view the caller may see, or 404 (an id that cannot name a view too: there is nothing to find). */
async function getVisibleView(
  db: Queryable,
  projectId: string,
  viewer: string | null,
  id: string,
  options: { forUpdate?: boolean } = {},
): Promise<GraphViewRow> {
  if (!isUuid(id)) throw notFound(`graph view "${id}"`);
  const query = db
    .select()
    .from(graphViews)
    .where(and(eq(graphViews.id, id), visibleTo(projectId, viewer)))
    .limit(1);
  const [row] = options.forUpdate ? await query.for('update') : await query;
  if (!row) throw notFound(`graph view "${id}"`);
  return row;
}

/**
 * Changing a visible view: a personal view is visible to its owner only, so
 * seeing it makes the caller its owner; a project view needs graph:manage.
 */
function assertMayChange(ctx: ServiceContext, row: GraphViewRow): void {
  if (row.scope === 'project') requireManage(ctx);
}

function requireManage(ctx: ServiceContext): void {
  try {
    requirePermission(ctx.caller, 'graph:manage');
  } catch (error) {
    if (error instanceof ApiError && error.code === 'forbidden') {
      throw new ApiError('forbidden', 'project-scope graph views need graph:manage (admin or owner)');
    }
    throw error;
  }
}

export async function listGraphViews(ctx: ServiceContext, ref: ProjectRef): Promise<GraphView[]> {
  const { project } = await authorizeProject(ctx, ref, 'graph:read');
  const rows = await ctx.db
    .select()
    .from(graphViews)
    .where(visibleTo(project.id, viewerOf(ctx)))
    // project views first, then personal ones; each by name (byte order: the same on every server's collation)
    .orderBy(sql`${graphViews.scope} = 'user'`, sql`${graphViews.name} collate "C"`, asc(graphViews.createdAt), asc(graphViews.id));
  return rows.map(toGraphView);
}

export async function createGraphView(ctx: ServiceContext, ref: ProjectRef, input: GraphViewCreate): Promise<GraphView> {
  const { project } = await authorizeProject(ctx, ref, 'graph:write');
  // SPEC Authentication 7: a personal view needs someone to own it
  const ownerUserId = input.scope === 'user' ? requireUserSession(ctx).userId : null;
  if (input.scope === 'project') requireManage(ctx);
  const now = ctx.clock.now();
  // new views are never the default: PATCH .../default is the one way to make one, so the switch stays atomic
  const [row] = await ctx.db
    .insert(graphViews)
    .values({
      orgId: project.orgId,
      projectId: project.id,
      scope: input.scope,
      ownerUserId,
      name: input.name,
      config: input.config,
      pinnedPositions: input.pinnedPositions ?? null,
      createdAt: now,
      updatedAt: now,
    })
    .returning();
  return toGraphView(row!);
}

/**
 * The view a client opens first: the caller's personal default, else the
 * project's default, else the synthetic `Fleet` view (SPEC).
 */
export async function getDefaultGraphView(ctx: ServiceContext, ref: ProjectRef): Promise<GraphView> {
  const { project } = await authorizeProject(ctx, ref, 'graph:read');
  const [row] = await ctx.db
    .select()
    .from(graphViews)
    .where(and(visibleTo(project.id, viewerOf(ctx)), eq(graphViews.isDefault, true)))
    // at most one default per (scope, owner) group: the personal one, when there is one, wins
    .orderBy(sql`${graphViews.scope} = 'user' desc`)
    .limit(1);
  return row ? toGraphView(row) : fleetView(project);
}

export async function getGraphView(ctx: ServiceContext, ref: ProjectRef, id: string): Promise<GraphView> {
  const { project } = await authorizeProject(ctx, ref, 'graph:read');
  return toGraphView(await getVisibleView(ctx.db, project.id, viewerOf(ctx), id));
}

export async function updateGraphView(ctx: ServiceContext, ref: ProjectRef, id: string, input: GraphViewUpdate): Promise<GraphView> {
  const { project } = await authorizeProject(ctx, ref, 'graph:write');
  const row = await ctx.db.transaction(async (tx) => {
    const current = await getVisibleView(tx, project.id, viewerOf(ctx), id, { forUpdate: true });
    assertMayChange(ctx, current);
    const [updated] = await tx
      .update(graphViews)
      .set({
        ...(input.name !== undefined && { name: input.name }),
        ...(input.config !== undefined && { config: input.config }),
        ...(input.pinnedPositions !== undefined && { pinnedPositions: input.pinnedPositions }),
        updatedAt: ctx.clock.now(),
      })
      .where(eq(graphViews.id, current.id))
      .returning();
    return updated!;
  });
  return toGraphView(row);
}

export async function deleteGraphView(ctx: ServiceContext, ref: ProjectRef, id: string): Promise<{ deleted: true; id: string }> {
  const { project } = await authorizeProject(ctx, ref, 'graph:write');
  const deletedId = await ctx.db.transaction(async (tx) => {
    const current = await getVisibleView(tx, project.id, viewerOf(ctx), id, { forUpdate: true });
    assertMayChange(ctx, current);
    // deleting the default leaves its group without one: GET .../default falls back to the next in line
    await tx.delete(graphViews).where(eq(graphViews.id, current.id));
    return current.id;
  });
  return { deleted: true, id: deletedId };
}

/**
 * Makes a view the default of its (project, scope, owner) group (SPEC:
 * atomically). The partial unique index graph_views_one_default allows one
 * default per group and is checked row by row, so the old default is cleared
 * before the new one is set: the other order would hold two defaults for a
 * moment and fail. Concurrent switches of one group take turns on an
 * advisory lock: without it two could each clear nothing (no default yet, or
 * the same old one) and then both set theirs, and the second would fail on
 * the index instead of winning.
 */
export async function setDefaultGraphView(ctx: ServiceContext, ref: ProjectRef, id: string): Promise<GraphView> {
  const { project } = await authorizeProject(ctx, ref, 'graph:write');
  const viewer = viewerOf(ctx);
  const row = await ctx.db.transaction(async (tx) => {
    const target = await getVisibleView(tx, project.id, viewer, id);
    assertMayChange(ctx, target);
    await lockDefaultGroup(tx, target);
    // re-read under the lock: the view may have been deleted while this waited
    const current = await getVisibleView(tx, project.id, viewer, id, { forUpdate: true });
    await tx
      .update(graphViews)
      .set({ isDefault: false, updatedAt: ctx.clock.now() })
      .where(and(inDefaultGroup(current), eq(graphViews.isDefault, true), sql`${graphViews.id} <> ${current.id}`));
    const [updated] = await tx
      .update(graphViews)
      .set({ isDefault: true, updatedAt: ctx.clock.now() })
      .where(eq(graphViews.id, current.id))
      .returning();
    return updated!;
  });
  return toGraphView(row);
}

/** The views sharing a default with `view`: same project, same scope, same owner (null for project views). */
function inDefaultGroup(view: { projectId: string; scope: GraphViewScope; ownerUserId: string | null }): SQL {
  return and(
    eq(graphViews.projectId, view.projectId),
    eq(graphViews.scope, view.scope),
    view.ownerUserId === null ? isNull(graphViews.ownerUserId) : eq(graphViews.ownerUserId, view.ownerUserId),
  )!;
}

async function lockDefaultGroup(tx: Tx, view: { projectId: string; scope: GraphViewScope; ownerUserId: string | null }): Promise<void> {
  const key = `cellplane:graph-view-default:${view.projectId}:${view.scope}:${view.ownerUserId ?? ''}`;
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${key}, 0))`);
}
