import type { z } from '@hono/zod-openapi';
import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import { authorizeProject, type ProjectRef } from '../../auth/access';
import { roleCovers, type Role } from '../../auth/permissions';
import { generateServiceToken, hashServiceToken } from '../../auth/service-token';
import type { Grants } from '../../auth/grants';
import type { ServiceContext } from '../../context';
import { environments, orgMembers, orgs, serviceTokens, systemState } from '../../db/schema';
import type { Tx } from '../../db/client';
import { ApiError, notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
import { recordAudit } from '../../db/audit';
import { actorOf } from '../../auth/actor';
import type { MintedServiceToken, ServiceToken, ServiceTokenCreate } from './schemas';

type TokenRow = typeof serviceTokens.$inferSelect;

const toServiceToken = (row: TokenRow, envName: string | null): z.infer<typeof ServiceToken> => ({
  id: row.id,
  name: row.name,
  prefix: row.prefix,
  role: row.role,
  envName,
  cellScopes: row.cellScopes,
  expiresAt: optionalTimestamp(row.expiresAt),
  personal: row.personal,
  createdAt: timestamp(row.createdAt),
});

const unauthorized = (message: string) => new ApiError('unauthorized', message);

/**
 * What stops a caller with `grants` from minting, or revoking, a token of this shape; null
 * when nothing does. A token manages only what it could have minted: a role it
 * covers, its own environment when it is pinned (an unpinned token reaches
 * every environment), and cells within its own when it is cell-scoped (an
 * unscoped token reaches every cell). Bootstrap mode holds everything.
 */
function exceedsCaller(
  grants: Grants,
  verb: 'mint' | 'revoke',
  target: { role: Role; envName: string | null; cellScopes: readonly string[] },
): string | null {
  if (grants.scope === 'unrestricted') return null;
  const who = grants.scope === 'organization' ? 'member' : 'token';
  if (!roleCovers(grants.role, target.role)) return `a "${grants.role}" ${who} cannot ${verb} a "${target.role}" token`;
  if (grants.envName !== null && target.envName !== grants.envName) {
    return `a token pinned to "${grants.envName}" can only ${verb} tokens pinned to it`;
  }
  if (grants.cellScopes.length > 0) {
    if (target.cellScopes.length === 0) return `a cell-scoped token cannot ${verb} a token of every cell`;
    const outside = target.cellScopes.filter((cell) => !grants.cellScopes.includes(cell));
    if (outside.length > 0) return `cells outside the ${verb === 'mint' ? 'minting' : 'revoking'} token's scopes: ${outside.join(', ')}`;
  }
  return null;
}

/**
 * The project's live tokens that the caller could have minted, and so may
 * revoke: an environment-pinned or cell-scoped admin does not see, even as
 * metadata, the tokens above it (an unpinned owner's, another pin's).
 */
export async function listTokens(ctx: ServiceContext, ref: ProjectRef): Promise<z.infer<typeof ServiceToken>[]> {
  const { project } = await authorizeProject(ctx, ref, 'tokens:manage');
  const rows = await ctx.db
    .select({ token: serviceTokens, envName: environments.name })
    .from(serviceTokens)
    .leftJoin(environments, eq(environments.id, serviceTokens.envId))
    .where(and(eq(serviceTokens.projectId, project.id), isNull(serviceTokens.revokedAt)))
    .orderBy(asc(serviceTokens.createdAt), asc(serviceTokens.id));
  return rows
    .filter((row) => exceedsCaller(ctx.caller.grants, 'revoke', { ...row.token, envName: row.envName }) === null)
    .map((row) => toServiceToken(row.token, row.envName));
}

/**
 * Mints a token. A minter never hands out more than it holds: not a higher
 * role, not another environment, not cells outside its own scopes.
 *
 * The first mint closes bootstrap mode. The singleton `system_state` row is
 * locked for the transaction, so of two concurrent unauthenticated mints on a
 * fresh database exactly one commits; the other finds bootstrap closed and is
 * refused.
 */
export async function mintToken(
  ctx: ServiceContext,
  ref: ProjectRef,
  input: z.infer<typeof ServiceTokenCreate>,
): Promise<z.infer<typeof MintedServiceToken>> {
  const { project } = await authorizeProject(ctx, ref, 'tokens:manage');
  const { principal, grants } = ctx.caller;
  const now = ctx.clock.now();
  const expiresAt = input.expiresAt ? new Date(input.expiresAt) : null;
  if (expiresAt && expiresAt.getTime() <= now.getTime()) {
    throw new ApiError('validation_failed', 'expiresAt must be in the future', [
      { path: 'expiresAt', message: 'must be in the future' },
    ]);
  }
  if (input.personal && principal.kind !== 'user-session') {
    throw new ApiError('validation_failed', 'only a user session mints a personal token', [
      { path: 'personal', message: 'needs a user session' },
    ]);
  }
  let envName = input.envName ?? null;
  let cellScopes = [...new Set(input.cellScopes ?? [])];
  if (grants.scope === 'project') {
    // omitted, the pin and the cell scopes are inherited from the minter
    if (grants.envName !== null) envName ??= grants.envName;
    if (grants.cellScopes.length > 0 && cellScopes.length === 0) cellScopes = [...grants.cellScopes];
  }
  const refusal = exceedsCaller(grants, 'mint', { role: input.role, envName, cellScopes });
  if (refusal) throw new ApiError('forbidden', refusal);

  const { token, prefix } = generateServiceToken();
  const tokenHash = hashServiceToken(token);
  const row = await ctx.db.transaction(async (tx) => {
    // a user mints as its membership stands now: a demotion committed since the request began wins (members/service.ts locks the organization row the same way)
    if (principal.kind === 'user-session') await assertMembershipStillCovers(tx, project.orgId, principal.userId, { role: input.role, envName, cellScopes });
    const [state] = await tx.select().from(systemState).for('update');
    if (principal.kind === 'bootstrap' && state?.bootstrapClosedAt) {
      throw unauthorized('bootstrap mode is closed: a token has been minted; authenticate with a token');
    }
    let envId: string | null = null;
    if (envName !== null) {
      const [env] = await tx
        .select({ id: environments.id })
        .from(environments)
        .where(and(eq(environments.projectId, project.id), eq(environments.name, envName)));
      if (!env) throw new ApiError('environment_not_found', `environment "${envName}" not found`);
      envId = env.id;
    }
    const [inserted] = await tx
      .insert(serviceTokens)
      .values({
        orgId: project.orgId,
        projectId: project.id,
        name: input.name,
        prefix,
        tokenHash,
        role: input.role,
        envId,
        cellScopes,
        expiresAt,
        createdByUserId: principal.kind === 'user-session' ? principal.userId : null,
        personal: input.personal,
      })
      .returning();
    await tx.update(systemState).set({ bootstrapClosedAt: sql`now()` }).where(isNull(systemState.bootstrapClosedAt));
    await recordAudit(tx, {
      action: 'token.minted',
      actor: actorOf(principal),
      orgId: project.orgId,
      target: { type: 'token', id: inserted!.id },
      data: { projectId: project.id, name: input.name, prefix, role: input.role, envName, cellScopes, personal: input.personal },
    });
    return inserted!;
  });
  ctx.bootstrap.closed = true;
  ctx.logger.info('service token minted', { requestId: ctx.requestId, tokenId: row.id, projectId: project.id, role: row.role });
  return { ...toServiceToken(row, envName), token };
}

/**
 * Revocation is a timestamp: authentication filters it out on the very next
 * request. A token revokes only what it could have minted (`exceedsCaller`),
 * else 403: the target is in the caller's own project, so naming it leaks
 * nothing. A token's role, pin and scopes never change, so the check needs no
 * lock; the guarded UPDATE makes a concurrent second revocation a 404.
 */
export async function revokeToken(ctx: ServiceContext, ref: ProjectRef, id: string): Promise<{ revoked: true; id: string }> {
  const { project } = await authorizeProject(ctx, ref, 'tokens:manage');
  const live = and(eq(serviceTokens.id, id), eq(serviceTokens.projectId, project.id), isNull(serviceTokens.revokedAt));
  const [target] = await ctx.db
    .select({ role: serviceTokens.role, cellScopes: serviceTokens.cellScopes, envName: environments.name })
    .from(serviceTokens)
    .leftJoin(environments, eq(environments.id, serviceTokens.envId))
    .where(live);
  if (!target) throw notFound(`token "${id}"`);
  const refusal = exceedsCaller(ctx.caller.grants, 'revoke', target);
  if (refusal) throw new ApiError('forbidden', refusal);
  await ctx.db.transaction(async (tx) => {
    const revoked = await tx
      .update(serviceTokens)
      .set({ revokedAt: ctx.clock.now() })
      .where(live)
      .returning({ id: serviceTokens.id, prefix: serviceTokens.prefix });
    if (revoked.length === 0) throw notFound(`token "${id}"`);
    await recordAudit(tx, {
      action: 'token.revoked',
      actor: actorOf(ctx.caller.principal),
      orgId: project.orgId,
      target: { type: 'token', id },
      data: { projectId: project.id, prefix: revoked[0]!.prefix },
    });
  });
  ctx.logger.info('service token revoked', { requestId: ctx.requestId, tokenId: id, projectId: project.id });
  return { revoked: true, id };
}

/**
 * Inside the mint's transaction: the minting user's role, read under a
 * share lock of the organization row (which every membership change takes
 * exclusively first), still covers the token. Without it, a mint racing a
 * demotion could store a personal token above the user's new role.
 */
async function assertMembershipStillCovers(
  tx: Tx,
  orgId: string,
  userId: string,
  target: { role: Role; envName: string | null; cellScopes: readonly string[] },
): Promise<void> {
  await tx.select({ id: orgs.id }).from(orgs).where(eq(orgs.id, orgId)).for('share');
  const [member] = await tx
    .select({ role: orgMembers.role })
    .from(orgMembers)
    .where(and(eq(orgMembers.orgId, orgId), eq(orgMembers.userId, userId)));
  if (!member) throw notFound('organization');
  const grants: Grants = { scope: 'organization', orgId, role: member.role, envId: null, envName: null, cellScopes: [] };
  const refusal = exceedsCaller(grants, 'mint', target);
  if (refusal) throw new ApiError('forbidden', refusal);
}
