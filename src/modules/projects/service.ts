import type { z } from '@hono/zod-openapi';
import { asc, eq } from 'drizzle-orm';
import { loadOrg, requirePermission, type ProjectRow } from '../../auth/access';
import { roleAllows } from '../../auth/permissions';
import type { ServiceContext } from '../../context';
import { environments, projects } from '../../db/schema';
import { ApiError } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import type { Project, ProjectCreate } from './schemas';

export const DEFAULT_ENVIRONMENT = 'default';

const toProject = (project: ProjectRow): z.infer<typeof Project> => ({
  id: project.id,
  orgId: project.orgId,
  name: project.name,
  slug: project.slug,
  createdAt: timestamp(project.createdAt),
});

/**
 * Members, and tokens with organization-level powers (admin, owner), list
 * every project of their organization; any other token sees only the
 * project it belongs to.
 */
export async function listProjects(ctx: ServiceContext, orgRef: string): Promise<z.infer<typeof Project>[]> {
  const org = await loadOrg(ctx, orgRef);
  requirePermission(ctx.caller, 'catalog:read');
  const { grants } = ctx.caller;
  const rows = await ctx.db.select().from(projects).where(eq(projects.orgId, org.id)).orderBy(asc(projects.slug));
  const visible =
    grants.scope === 'project' && !roleAllows(grants.role, 'org:manage')
      ? rows.filter((project) => project.id === grants.projectId)
      : rows;
  return visible.map(toProject);
}

export async function createProject(
  ctx: ServiceContext,
  orgRef: string,
  input: z.infer<typeof ProjectCreate>,
): Promise<z.infer<typeof Project>> {
  const org = await loadOrg(ctx, orgRef);
  requirePermission(ctx.caller, 'org:manage');
  return ctx.db.transaction(async (tx) => {
    const [project] = await tx
      .insert(projects)
      .values({ orgId: org.id, name: input.name, slug: input.slug })
      .onConflictDoNothing({ target: [projects.orgId, projects.slug] })
      .returning();
    if (!project) throw new ApiError('already_exists', `project slug "${input.slug}" is taken in "${org.slug}"`);
    // every project has its `default` environment from the start
    await tx.insert(environments).values({ orgId: org.id, projectId: project.id, name: DEFAULT_ENVIRONMENT });
    return toProject(project);
  });
}
