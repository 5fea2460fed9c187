import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { ResourceName } from '../names';

/** DECISIONS §2: a view's `config` serializes to at most 64 KB (UTF-8 bytes of its JSON). */
export const MAX_CONFIG_BYTES = 64 * 1024;

export const GRAPH_VIEW_SCOPES = ['user', 'project'] as const;
export type GraphViewScope = (typeof GRAPH_VIEW_SCOPES)[number];

const utf8 = new TextEncoder();
export const serializedBytes = (value: unknown): number => utf8.encode(JSON.stringify(value)).length;

const NameList = (what: string) =>
  z.array(ResourceName).max(1000).openapi({ description: `${what} names the view shows; absent means all` });

/**
 * DECISIONS §2 names the documented keys of `config`; their types are this
 * implementation's (docs/people/graph-views.md). Any other key is kept as
 * sent: config is free-form for clients (DECISIONS §1).
 */
export const GraphViewConfig = z
  .looseObject({
    entityTypes: NameList('Entity type').optional(),
    relationshipTypes: NameList('Relationship type').optional(),
    cells: NameList('Cell').optional(),
    labels: z
      .record(z.string().min(1).max(128), z.string().max(1024))
      .optional()
      .openapi({ description: 'Label selector: entities carrying every one of these labels' }),
    layout: z.string().min(1).max(64).optional().openapi({ description: 'Layout the client draws with, e.g. `force`', example: 'force' }),
    depth: z.int().min(0).max(100).optional().openapi({ description: 'Relationship hops shown around the selected entities' }),
  })
  .refine((config) => serializedBytes(config) <= MAX_CONFIG_BYTES, {
    message: `must serialize to at most ${MAX_CONFIG_BYTES} bytes of JSON`,
  })
  .openapi('GraphViewConfig', {
    description:
      'Free-form JSON object, at most 64 KB serialized. Documented keys (typed): entityTypes, relationshipTypes, cells, labels, layout, depth; any other key is kept as sent.',
    example: { entityTypes: ['cluster', 'service'], layout: 'force', depth: 2 },
  });

const Position = z.strictObject({ x: z.number(), y: z.number() });

export const PinnedPositions = z
  .record(ResourceName, Position)
  .openapi('GraphViewPinnedPositions', {
    description: 'Pinned node positions by entity name (DECISIONS §2)',
    example: { 'cluster-1': { x: 120, y: -40 } },
  });

const ViewName = z.string().trim().min(1).max(128).openapi({ example: 'Payments fleet' });

export const GraphView = z
  .object({
    id: z.uuid().nullable().openapi({ description: 'null only for the synthetic `Fleet` view of GET PROJ/graph-views/default' }),
    orgId: z.uuid(),
    projectId: z.uuid(),
    scope: z.enum(GRAPH_VIEW_SCOPES).openapi({ description: '`user`: a personal view, visible to its owner only; `project`: shared by the project' }),
    ownerUserId: z.uuid().nullable().openapi({ description: 'The owner of a personal view; null for project views' }),
    name: z.string(),
    isDefault: z.boolean(),
    config: z.record(z.string(), z.unknown()),
    pinnedPositions: z.union([PinnedPositions, z.null()]),
    createdAt: Timestamp.nullable().openapi({ description: 'null only for the synthetic `Fleet` view' }),
    updatedAt: Timestamp.nullable().openapi({ description: 'null only for the synthetic `Fleet` view' }),
  })
  .openapi('GraphView');
export type GraphView = z.infer<typeof GraphView>;

export const GraphViewCreate = z
  .strictObject({
    name: ViewName,
    scope: z.enum(GRAPH_VIEW_SCOPES).openapi({ description: '`user` needs a user session; `project` needs graph:manage (admin or owner)' }),
    config: GraphViewConfig,
    pinnedPositions: z.union([PinnedPositions, z.null()]).optional(),
  })
  .openapi('GraphViewCreate');
export type GraphViewCreate = z.infer<typeof GraphViewCreate>;

export const GraphViewUpdate = z
  .strictObject({
    name: ViewName.optional(),
    config: GraphViewConfig.optional(),
    pinnedPositions: z.union([PinnedPositions, z.null()]).optional().openapi({ description: 'null unpins every node' }),
  })
  .openapi('GraphViewUpdate');
export type GraphViewUpdate = z.infer<typeof GraphViewUpdate>;

export const GraphViewDeleted = z.object({ deleted: z.literal(true), id: z.uuid() }).openapi('GraphViewDeleted');

export const GraphViewProjectParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug or id', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug or id', example: 'platform' }),
});

export const GraphViewParams = GraphViewProjectParams.extend({
  id: z.string().min(1).openapi({ description: 'Graph view id' }),
});
