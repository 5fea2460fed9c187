import type { z } from '@hono/zod-openapi';
import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import { authorizeProject, type ProjectRef } from '../../auth/access';
import { roleCovers } from '../../auth/permissions';
import { generateServiceToken, hashServiceToken } from '../../auth/service-token';
import type { ServiceContext } from '../../context';
import { environments, serviceTokens, systemState } from '../../db/schema';
import { ApiError, notFound } from '../../http/errors';
import { optionalTimestamp, timestamp } from '../../http/openapi';
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
  createdAt: timestamp(row.createdAt),
});

const unauthorized = (message: string) => new ApiError('unauthorized', message);

export async function listTokens(ctx: ServiceContext, ref: ProjectRef): Promise<z.infer<typeof ServiceToken>[]> {
  const { project } = await authorizeProject(ctx, ref, 'tokens:manage');
  const rows = await ctx.db
    .select({ token: serviceTokens, envName: environments.name })
    .from(serviceTokens)
    .leftJoin(environments, eq(environments.id, serviceTokens.envId))
    .where(and(eq(serviceTokens.projectId, project.id), isNull(serviceTokens.revokedAt)))
    .orderBy(asc(serviceTokens.createdAt), asc(serviceTokens.id));
  return rows.map((row) => toServiceToken(row.token, row.envName));
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
  const caller = ctx.caller;
  const now = ctx.clock.now();
  const expiresAt = input.expiresAt ? new Date(input.expiresAt) : null;
  if (expiresAt && expiresAt.getTime() <= now.getTime()) {
    throw new ApiError('validation_failed', 'expiresAt must be in the future', [
      { path: 'expiresAt', message: 'must be in the future' },
    ]);
  }
  let envName = input.envName ?? null;
  let cellScopes = [...new Set(input.cellScopes ?? [])];
  if (caller.kind === 'token') {
    if (!roleCovers(caller.role, input.role)) {
      throw new ApiError('forbidden', `a "${caller.role}" token cannot mint a "${input.role}" token`);
    }
    if (caller.envName !== null) {
      envName ??= caller.envName;
      if (envName !== caller.envName) {
        throw new ApiError('forbidden', `a token pinned to "${caller.envName}" can only mint tokens pinned to it`);
      }
    }
    if (caller.cellScopes.length > 0) {
      if (cellScopes.length === 0) cellScopes = [...caller.cellScopes];
      const outside = cellScopes.filter((cell) => !caller.cellScopes.includes(cell));
      if (outside.length > 0) {
        throw new ApiError('forbidden', `cells outside the minting token's scopes: ${outside.join(', ')}`);
      }
    }
  }

  const { token, prefix } = generateServiceToken();
  const tokenHash = hashServiceToken(token);
  const row = await ctx.db.transaction(async (tx) => {
    const [state] = await tx.select().from(systemState).for('update');
    if (caller.kind === 'bootstrap' && state?.bootstrapClosedAt) {
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
      })
      .returning();
    await tx.update(systemState).set({ bootstrapClosedAt: sql`now()` }).where(isNull(systemState.bootstrapClosedAt));
    return inserted!;
  });
  ctx.bootstrap.closed = true;
  ctx.logger.info('service token minted', { requestId: ctx.requestId, tokenId: row.id, projectId: project.id, role: row.role });
  return { ...toServiceToken(row, envName), token };
}

/** Revocation is a timestamp: authentication filters it out on the very next request. */
export async function revokeToken(ctx: ServiceContext, ref: ProjectRef, id: string): Promise<{ revoked: true; id: string }> {
  const { project } = await authorizeProject(ctx, ref, 'tokens:manage');
  const revoked = await ctx.db
    .update(serviceTokens)
    .set({ revokedAt: ctx.clock.now() })
    .where(and(eq(serviceTokens.id, id), eq(serviceTokens.projectId, project.id), isNull(serviceTokens.revokedAt)))
    .returning({ id: serviceTokens.id });
  if (revoked.length === 0) throw notFound(`token "${id}"`);
  ctx.logger.info('service token revoked', { requestId: ctx.requestId, tokenId: id, projectId: project.id });
  return { revoked: true, id };
}
