import { sql } from 'drizzle-orm';
import { serviceTokens } from '../db/schema';
import type { Role } from './permissions';
import type { Principal } from './principal';

/**
 * What a caller may do, apart from who it is (./principal.ts): a role, an
 * environment pin and cell scopes, for a project. The authorize* helpers
 * (./access.ts), the one-statement fast paths and the cell-scope filter
 * (src/modules/cells/membership.ts) read grants, never a credential's fields.
 */
export type Grants = ProjectGrants | OrganizationGrants | UnrestrictedGrants;

/** A role in one project of one organization, narrowed by an environment pin and cell scopes. */
export interface ProjectGrants {
  scope: 'project';
  orgId: string;
  projectId: string;
  role: Role;
  /** The environment the grants are pinned to, or null for all environments. */
  envId: string | null;
  envName: string | null;
  /** Cell names the grants are restricted to; empty means every cell. */
  cellScopes: string[];
}

/**
 * A user's membership: one role in every project of one organization
 * (DECISIONS §5), with no environment pin and no cell scopes.
 */
export interface OrganizationGrants {
  scope: 'organization';
  orgId: string;
  role: Role;
  envId: null;
  envName: null;
  cellScopes: string[];
}

/** Everything, in every organization: bootstrap mode. */
export interface UnrestrictedGrants {
  scope: 'unrestricted';
}

const UNRESTRICTED: UnrestrictedGrants = { scope: 'unrestricted' };

/**
 * Where a service token's grants live: columns of its own row. Every query
 * that resolves a token together with the tenancy selects, joins and filters
 * on these, never on `service_tokens` directly, so another source of grants
 * (an organization membership's role, for a user session) is a second set of
 * columns of the same keys, joined beside this one.
 */
export const tokenGrantColumns = {
  grantOrgId: serviceTokens.orgId,
  grantProjectId: serviceTokens.projectId,
  grantRole: serviceTokens.role,
  grantEnvId: serviceTokens.envId,
  grantCellScopes: serviceTokens.cellScopes,
};

/** The name of the pinned environment of tokenGrantColumns, as a column for queries that join the token. */
export const grantEnvName = sql<string | null>`(select pin.name from environments pin where pin.id = ${serviceTokens.envId})`;

/** Values of grant columns as a query returns them (a left join may make any of them null). */
export type GrantRow = { [K in keyof typeof tokenGrantColumns]: (typeof tokenGrantColumns)[K]['_']['data'] | null } & {
  grantEnvName: string | null;
};

/** A user's membership of one organization, as src/auth/memberships.ts reads it. */
export interface MembershipRow {
  membershipOrgId: string;
  membershipRole: Role;
}

/**
 * The one source of grants: what `principal` may do, from the grant columns
 * its lookup selected (none for a principal whose grants need no lookup).
 */
export function grantsOf(principal: Principal, row?: GrantRow | MembershipRow): Grants {
  switch (principal.kind) {
    case 'bootstrap':
    case 'local-operator':
      return UNRESTRICTED;
    case 'user-session':
      if (!row || !('membershipRole' in row)) throw new Error('a user has no grants without its membership');
      return { scope: 'organization', orgId: row.membershipOrgId, role: row.membershipRole, envId: null, envName: null, cellScopes: [] };
    case 'service-token':
      if (!row || !('grantRole' in row)) throw new Error('a service token has no grants without its row');
      return {
        scope: 'project',
        orgId: row.grantOrgId!,
        projectId: row.grantProjectId!,
        role: row.grantRole!,
        envId: row.grantEnvId,
        envName: row.grantEnvName,
        cellScopes: row.grantCellScopes ?? [],
      };
    default:
      throw new Error(`no source of grants for a ${principal.kind} principal yet`);
  }
}
