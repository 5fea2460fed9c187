import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { CellConstraint, DerivedFrom } from '../catalog-items';
import { DisplayName, ResourceName } from '../names';

export const PLACEMENT_POLICIES = ['least-loaded', 'round-robin', 'random'] as const;
export type PlacementPolicy = (typeof PLACEMENT_POLICIES)[number];
export const DEFAULT_PLACEMENT_POLICY: PlacementPolicy = 'least-loaded';

/** Request `membership` (DECISIONS §2): explicit by default, or derived from a selector or a relationship. */
export const CellMembership = z
  .discriminatedUnion('mode', [
    z.strictObject({ mode: z.literal('explicit') }),
    z.strictObject({ mode: z.literal('derived'), derivedFrom: DerivedFrom }),
  ])
  .openapi('CellMembership', {
    description: 'Defaults to `{ "mode": "explicit" }`. Derived members are evaluated on every read, so they are always current.',
  });
export type CellMembership = z.infer<typeof CellMembership>;

/**
 * Create and update body (SPEC Resources, Cell request). References to other
 * catalog items (entity type, relationship type, parent cells) are checked by
 * the service, after authorization.
 */
export const CellRequest = z
  .strictObject({
    kind: z.literal('Cell'),
    name: ResourceName.openapi({ example: 'eu-west' }),
    displayName: DisplayName.optional().openapi({ example: 'EU West' }),
    entityType: ResourceName.openapi({ description: 'The entity type of the members', example: 'cluster' }),
    placementPolicy: z.enum(PLACEMENT_POLICIES).optional().openapi({ description: 'Defaults to least-loaded' }),
    constraints: z
      .array(CellConstraint)
      .max(100)
      .optional()
      .openapi({ description: 'Which members are eligible placement targets; all must hold' }),
    parentCells: z
      .array(ResourceName)
      .max(100)
      .optional()
      .openapi({ description: 'Existing cells this one sits beneath; no cycles', example: ['eu'] }),
    membership: CellMembership.optional(),
    deploymentTarget: z.string().trim().min(1).max(1000).optional().openapi({ example: 'k8s://eu-west-1' }),
  })
  .openapi('CellRequest');
export type CellRequest = z.infer<typeof CellRequest>;

/** The Cell response: exactly SPEC's fields; unset optional ones are null. */
export const Cell = z
  .object({
    name: z.string(),
    displayName: z.string().nullable(),
    placementPolicy: z.enum(PLACEMENT_POLICIES),
    constraints: z.array(CellConstraint),
    parentCells: z.array(z.string()),
    deploymentTarget: z.string().nullable(),
    entityTypeName: z.string(),
    membershipMode: z.enum(['explicit', 'derived']),
    // a union, not DerivedFrom.nullable(): that would mark the shared component itself nullable in the document
    membershipDerivedFrom: z
      .union([DerivedFrom, z.null()])
      .openapi({ description: 'The request\'s `membership.derivedFrom`, or null for explicit cells' }),
    orgId: z.uuid(),
    projectId: z.uuid(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('Cell');
export type Cell = z.infer<typeof Cell>;

export const CellDeleted = z.object({ deleted: z.literal(true), name: z.string() }).openapi('CellDeleted');

export const CellProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
});

export const CellParams = CellProjectParams.extend({
  name: z.string().min(1).openapi({ description: 'Cell name (URL-encode / and :)', example: 'eu-west' }),
});

export const CellMemberParams = CellParams.extend({
  entityName: z.string().min(1).openapi({ description: 'Entity name (URL-encode / and :)', example: 'cluster-1' }),
});

/** How the cell member and recommendation routes choose the environment (DECISIONS §2). */
export const CellEnvQuery = z.object({
  envName: ResourceName.optional().openapi({ description: 'Environment name; `default` when neither envName nor envId is given' }),
  envId: z.uuid().optional().openapi({ description: 'Environment id; when both are given they must name the same environment' }),
});
export type CellEnvQuery = z.infer<typeof CellEnvQuery>;

export const CellMemberAdd = z
  .strictObject({
    entityName: ResourceName.openapi({ example: 'cluster-1' }),
    entityTypeName: ResourceName.openapi({ description: "Must be the entity's type and the cell's", example: 'cluster' }),
    envId: z.uuid().optional().openapi({ description: 'Overrides the query parameter' }),
    envName: ResourceName.optional().openapi({ description: 'Overrides the query parameter' }),
  })
  .openapi('CellMemberAdd');
export type CellMemberAdd = z.infer<typeof CellMemberAdd>;

export const CellRecommendation = z
  .object({
    rank: z.number().int().min(1),
    entityName: z.string(),
    entityId: z.uuid(),
    score: z.number().openapi({
      description: 'least-loaded: the load (Σ metric/capacity); round-robin and random: the position, from 0. Lower ranks first.',
    }),
    eligible: z.boolean(),
    reasons: z.array(z.string()).openapi({ description: 'The constraints an ineligible member fails' }),
  })
  .openapi('CellRecommendation');
export type CellRecommendation = z.infer<typeof CellRecommendation>;

export const CellRecommendations = z
  .object({
    cell: z.string(),
    placementPolicy: z.enum(PLACEMENT_POLICIES),
    envName: z.string(),
    recommendations: z.array(CellRecommendation),
  })
  .openapi('CellRecommendations');
export type CellRecommendations = z.infer<typeof CellRecommendations>;
