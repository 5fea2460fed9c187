import type { z } from '@hono/zod-openapi';
import { loadOrg, type OrgRow } from '../../auth/access';
import { resolveCaller } from '../../auth/caller';
import type { ServiceContext } from '../../context';
import { orgs } from '../../db/schema';
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
  const { principal } = await resolveCaller(ctx.callerState, ctx.db, ctx.clock);
  if (principal.kind === 'service-token') {
    throw new ApiError(
      'forbidden',
      'service tokens are scoped to one project; creating an organization needs bootstrap mode or a user session',
    );
  }
  const [org] = await ctx.db
    .insert(orgs)
    .values({ name: input.name, slug: input.slug })
    .onConflictDoNothing({ target: orgs.slug })
    .returning();
  if (!org) throw new ApiError('already_exists', `organization slug "${input.slug}" is taken`);
  return toOrganization(org);
}

export async function getOrg(ctx: ServiceContext, ref: string): Promise<z.infer<typeof Organization>> {
  return toOrganization(await loadOrg(ctx, ref));
}
