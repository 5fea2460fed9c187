import { z } from '@hono/zod-openapi';
import { and, eq } from 'drizzle-orm';
import { authorizeProject, type ProjectRef } from '../../auth/access';
import { codehostApp } from '../../codehost/app';
import { grantingInstallation } from '../../codehost/installations';
import type { ServiceContext } from '../../context';
import { projectGithubRepos } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import type { RepoLink, RepoLinkDeleted } from './schemas';
import { deps } from './service';

/** Repositories a project calls its own (DECISIONS §8; docs/codehost.md, Repository links). */

// --- repository links ------------------------------------------------------------

type RepoRef = { owner: string; repo: string };

/** GitHub compares owners and names case-insensitively; links are kept lowercased. */
const normalized = (ref: RepoRef) => ({ owner: ref.owner.toLowerCase(), name: ref.repo.toLowerCase() });

const toRepoLink = (row: typeof projectGithubRepos.$inferSelect, installationId: number | null): z.infer<typeof RepoLink> => ({
  owner: row.owner,
  name: row.name,
  fullName: `${row.owner}/${row.name}`,
  createdAt: timestamp(row.createdAt),
  installationId,
});

const linkWhere = (projectId: string, owner: string, name: string) =>
  and(eq(projectGithubRepos.projectId, projectId), eq(projectGithubRepos.owner, owner), eq(projectGithubRepos.name, name));

/** GET PROJ/github/repos/{owner}/{repo} (catalog:read). */
export async function getRepoLink(ctx: ServiceContext, ref: ProjectRef, repo: RepoRef): Promise<z.infer<typeof RepoLink>> {
  const { org, project } = await authorizeProject(ctx, ref, 'catalog:read');
  await codehostApp(deps(ctx));
  const { owner, name } = normalized(repo);
  const [row] = await ctx.db.select().from(projectGithubRepos).where(linkWhere(project.id, owner, name)).limit(1);
  if (!row) throw notFound(`repository link "${owner}/${name}"`);
  return toRepoLink(row, await grantingInstallation(ctx.db, org.id, owner, name));
}

/**
 * PUT PROJ/github/repos/{owner}/{repo} (catalog:write): the project calls
 * the repository its own. Only a repository an active installation of the
 * organization grants may be linked (400 invalid_reference otherwise), so a
 * project cannot claim a repository its organization has no access to.
 * Idempotent: 201 when linked now, 200 when it already was.
 */
export async function putRepoLink(ctx: ServiceContext, ref: ProjectRef, repo: RepoRef): Promise<{ link: z.infer<typeof RepoLink>; created: boolean }> {
  const { org, project } = await authorizeProject(ctx, ref, 'catalog:write');
  await codehostApp(deps(ctx));
  const { owner, name } = normalized(repo);
  const installationId = await grantingInstallation(ctx.db, org.id, owner, name);
  if (installationId === null) {
    throw new ApiError(
      'invalid_reference',
      `repository ${owner}/${name} is not granted to an active GitHub App installation of this organization: install the App on it (POST /github/install-url) first`,
    );
  }
  const [inserted] = await ctx.db
    .insert(projectGithubRepos)
    .values({ orgId: org.id, projectId: project.id, owner, name, createdAt: ctx.clock.now() })
    .onConflictDoNothing()
    .returning();
  if (inserted) return { link: toRepoLink(inserted, installationId), created: true };
  const [existing] = await ctx.db.select().from(projectGithubRepos).where(linkWhere(project.id, owner, name)).limit(1);
  if (!existing) throw notFound(`repository link "${owner}/${name}"`);
  return { link: toRepoLink(existing, installationId), created: false };
}

/** DELETE PROJ/github/repos/{owner}/{repo} (catalog:write). */
export async function deleteRepoLink(ctx: ServiceContext, ref: ProjectRef, repo: RepoRef): Promise<z.infer<typeof RepoLinkDeleted>> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:write');
  await codehostApp(deps(ctx));
  const { owner, name } = normalized(repo);
  const [deleted] = await ctx.db.delete(projectGithubRepos).where(linkWhere(project.id, owner, name)).returning();
  if (!deleted) throw notFound(`repository link "${owner}/${name}"`);
  return { deleted: true, name: `${owner}/${name}` };
}
