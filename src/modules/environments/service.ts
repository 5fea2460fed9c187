import type { z } from '@hono/zod-openapi';
import { and, asc, eq } from 'drizzle-orm';
import { authorizeProject, type EnvironmentRow, type ProjectRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import { environments } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import { DEFAULT_ENVIRONMENT } from '../projects/service';
import type { Environment } from './schemas';

const toEnvironment = (env: EnvironmentRow): z.infer<typeof Environment> => ({
  id: env.id,
  name: env.name,
  orgId: env.orgId,
  projectId: env.projectId,
  createdAt: timestamp(env.createdAt),
});

function refuseIfPinned(ctx: ServiceContext, action: string): void {
  const { grants } = ctx.caller;
  if (grants.scope === 'project' && grants.envId !== null) {
    throw new ApiError('forbidden', `a token pinned to environment "${grants.envName}" cannot ${action}`);
  }
}

/** A token pinned to one environment lists only that one. */
export async function listEnvironments(ctx: ServiceContext, ref: ProjectRef): Promise<z.infer<typeof Environment>[]> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const { grants } = ctx.caller;
  const pin = grants.scope === 'project' && grants.envId !== null ? eq(environments.id, grants.envId) : undefined;
  const rows = await ctx.db
    .select()
    .from(environments)
    .where(and(eq(environments.projectId, project.id), pin))
    .orderBy(asc(environments.name));
  return rows.map(toEnvironment);
}

export async function createEnvironment(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
): Promise<z.infer<typeof Environment>> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  refuseIfPinned(ctx, 'create environments');
  const [env] = await ctx.db
    .insert(environments)
    .values({ orgId: project.orgId, projectId: project.id, name })
    .onConflictDoNothing({ target: [environments.projectId, environments.name] })
    .returning();
  if (!env) throw new ApiError('already_exists', `environment "${name}" exists`);
  return toEnvironment(env);
}

/** Deleting an environment deletes its runtime data and the tokens pinned to it (foreign keys cascade). */
export async function deleteEnvironment(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
): Promise<{ deleted: true; name: string }> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  refuseIfPinned(ctx, 'delete environments');
  if (name === DEFAULT_ENVIRONMENT) {
    throw new ApiError('default_environment_protected', 'the "default" environment cannot be deleted');
  }
  const deleted = await ctx.db
    .delete(environments)
    .where(and(eq(environments.projectId, project.id), eq(environments.name, name)))
    .returning({ id: environments.id });
  if (deleted.length === 0) throw notFound(`environment "${name}"`);
  return { deleted: true, name };
}
