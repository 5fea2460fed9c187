import { and, asc, eq, or, sql } from 'drizzle-orm';
import type { Queryable } from '../db/client';
import { githubInstallations } from '../db/schema';

/**
 * GitHub's id of the organization's active installation that grants the
 * repository `owner/name` now: listed in its granted_repos, or (repository
 * selection `all`) owned by its account. Null when none does. The oldest
 * such installation wins when several do. Used by the repository links
 * (src/modules/github) and by whatever resolves a pull-request trigger's
 * credentials (SPEC Authentication 13, case 1); `owner` and `name` are
 * compared lowercased, as GitHub compares them.
 */
export async function grantingInstallation(db: Queryable, orgId: string, owner: string, name: string): Promise<number | null> {
  const lowerOwner = owner.toLowerCase();
  const fullName = `${lowerOwner}/${name.toLowerCase()}`;
  const [row] = await db
    .select({ installationId: githubInstallations.installationId })
    .from(githubInstallations)
    .where(
      and(
        eq(githubInstallations.orgId, orgId),
        eq(githubInstallations.status, 'active'),
        or(
          sql`${githubInstallations.grantedRepos} @> ${JSON.stringify([fullName])}::jsonb`,
          and(eq(githubInstallations.repositorySelection, 'all'), sql`lower(${githubInstallations.accountLogin}) = ${lowerOwner}`),
        ),
      ),
    )
    .orderBy(asc(githubInstallations.createdAt), asc(githubInstallations.id))
    .limit(1);
  return row?.installationId ?? null;
}
