import type { z } from '@hono/zod-openapi';
import { loadOrg, type OrgRow } from '../../auth/access';
import { callerPrincipal } from '../../auth/caller';
import type { ServiceContext } from '../../context';
import { orgMembers, orgs } from '../../db/schema';
import { actorOf, recordAudit } from '../audit/service';
import { ApiError } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import type { Organization, OrganizationCreate } from './schemas';

export const toOrganization = (org: OrgRow): z.infer<typeof Organization> => ({
  id: org.id,
  name: org.name,
  slug: org.slug,
  createdAt: timestamp(org.createdAt),
});

export async function createOrg(
  ctx: ServiceContext,
  input: z.infer<typeof OrganizationCreate>,
): Promise<z.infer<typeof Organization>> {
  // Service tokens belong to one project of one organization: creating
  // another organization is outside any token's scope (docs/decisions.md).
  const principal = await callerPrincipal(ctx.callerState, ctx.db, ctx.clock);
  if (principal.kind === 'service-token') {
    throw new ApiError(
      'forbidden',
      'service tokens are scoped to one project; creating an organization needs bootstrap mode or a user session',
    );
  }
  const org = await ctx.db.transaction(async (tx) => {
    const [created] = await tx
      .insert(orgs)
      .values({ name: input.name, slug: input.slug })
      .onConflictDoNothing({ target: orgs.slug })
      .returning();
    if (!created) throw new ApiError('already_exists', `organization slug "${input.slug}" is taken`);
    // a user creating an organization is its first owner
    if (principal.kind === 'user-session') {
      await tx.insert(orgMembers).values({ orgId: created.id, userId: principal.userId, role: 'owner' });
    }
    await recordAudit(tx, {
      action: 'org.created',
      actor: actorOf(principal),
      orgId: created.id,
      target: { type: 'org', id: created.id },
      data: { slug: created.slug, name: created.name },
    });
    return created;
  });
  return toOrganization(org);
}

export async function getOrg(ctx: ServiceContext, ref: string): Promise<z.infer<typeof Organization>> {
  return toOrganization(await loadOrg(ctx, ref));
}
