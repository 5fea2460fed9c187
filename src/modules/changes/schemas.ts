import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';

/** The entity change stream and its JSON catch-up (DECISIONS §6). */

export const DEFAULT_CHANGES_PAGE = 100;
export const MAX_CHANGES_PAGE = 1000;

const Sequence = z.coerce
  .number({ message: 'must be a change sequence (a non-negative integer)' })
  .int({ message: 'must be a change sequence (a non-negative integer)' })
  .min(0, { message: 'must be a change sequence (a non-negative integer)' });

const Filters = {
  entityType: z.string().min(1).optional().openapi({ description: 'Only changes of entities of this type' }),
  cell: z.string().min(1).optional().openapi({ description: 'Only changes of direct members of this cell (404 when it does not exist)' }),
};

export const StreamQuery = z.object({
  ...Filters,
  lastEventId: Sequence.optional().openapi({
    description: 'Resume after this sequence, as the `Last-Event-ID` header does (the header wins when both are sent)',
  }),
});

export const ChangesQuery = z.object({
  ...Filters,
  after: Sequence.default(0).openapi({ description: 'Changes after this sequence (0: from the start of the log)' }),
  limit: z.coerce.number().int().min(1).max(MAX_CHANGES_PAGE).default(DEFAULT_CHANGES_PAGE),
});
export type ChangesQuery = z.infer<typeof ChangesQuery>;

export const EntityChange = z
  .object({
    seq: z.number().int().openapi({ description: "The environment's change sequence (the stream's event id)" }),
    type: z.enum(['entity.created', 'entity.updated', 'entity.deleted']),
    entity: z.record(z.string(), z.unknown()).openapi({ description: 'The Entity; for a delete `{ id, name, entityTypeName }`' }),
    at: Timestamp,
  })
  .openapi('EntityChange');

export const ChangesPage = z
  .object({
    changes: z.array(EntityChange),
    next: z.number().int().openapi({
      description:
        'Pass as `after` for the next page (the last sequence examined, filtered-out changes included); equal to `after` when nothing newer exists yet',
    }),
  })
  .openapi('EntityChangesPage');
export type ChangesPage = z.infer<typeof ChangesPage>;
