import { sql } from 'drizzle-orm';
import { bigint, check, index, jsonb, pgTable, primaryKey, text, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { createdAt, id, optionalTimestamp, updatedAt } from './columns';
import { orgId, projectId } from './tenancy';

/**
 * The code host (SPEC "Code-hosting app integration"): installations of
 * the GitHub App, each claimed by one organization, and the repositories a
 * project calls its own.
 */
export const INSTALLATION_STATUSES = ['active', 'suspended', 'deleted'] as const;

export const githubInstallations = pgTable(
  'github_installations',
  {
    id: id(),
    /** GitHub's installation id. */
    installationId: bigint('installation_id', { mode: 'number' }).notNull(),
    orgId: orgId(),
    /** The account the App is installed on: `login` and `type` (`Organization` or `User`). */
    accountLogin: text('account_login').notNull(),
    accountType: text('account_type').notNull(),
    status: text('status', { enum: INSTALLATION_STATUSES }).notNull().default('active'),
    /** The cached list of repositories the installation was granted, `owner/name`. */
    grantedRepos: jsonb('granted_repos').$type<string[]>().notNull().default(sql`'[]'::jsonb`),
    /** `all` or `selected`, as GitHub says. */
    repositorySelection: text('repository_selection').notNull().default('selected'),
    /** The user whose install callback or recovery claimed it. */
    claimedByUserId: uuid('claimed_by_user_id'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
    deletedAt: optionalTimestamp('deleted_at'),
  },
  (t) => [
    check('github_installations_status_check', sql`${t.status} in ('active', 'suspended', 'deleted')`),
    // one organization claims an installation (409 installation_claimed for any other)
    uniqueIndex('github_installations_installation_unique').on(t.installationId),
    index('github_installations_org_idx').on(t.orgId),
  ],
);

/** A repository a project calls its own (`owner/name`, lowercased as GitHub compares them). */
export const projectGithubRepos = pgTable(
  'project_github_repos',
  {
    orgId: orgId(),
    projectId: projectId(),
    owner: text('owner').notNull(),
    name: text('name').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.projectId, t.owner, t.name] }),
    // a pull_request event of a repository finds its projects
    index('project_github_repos_repo_idx').on(t.owner, t.name),
  ],
);
