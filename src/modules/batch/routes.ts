import { createRoute } from '@hono/zod-openapi';
import { ApiRoutes } from '../../http/validation';
import type { AppEnv } from '../../context';
import { TokenOrSessionSecurity, errorResponses, jsonBody, jsonResponse } from '../../http/openapi';
import { EnvParams } from '../entities/schemas';
import { BatchRequest, BatchResult, MAX_BATCH_ENTITIES, MAX_BATCH_RELATIONSHIPS } from './schemas';
import { applyBatch } from './service';

export const batchRoutes = new ApiRoutes<AppEnv>();

batchRoutes.openapi(
  createRoute({
    method: 'post',
    path: '/{o}/{p}/envs/{envName}/batch',
    tags: ['Batch'],
    summary: "Upsert and delete one sync source's entities and relationships",
    description: [
      'For sync tools (the Terraform import): one transaction per request, all or nothing; clients send large sets in chunks ',
      `(at most ${MAX_BATCH_ENTITIES} entities, ${MAX_BATCH_RELATIONSHIPS} relationships, and 1 MiB, per request).`,
      '\n\n**Ownership.** Entities are upserted by name: an absent one is created with `syncSource` = `source`; one the source owns is ',
      'updated when it differs from the request (properties and labels replaced, state moved when given) and left unwritten when it does not ',
      '(a re-import of an unchanged state writes nothing); one created by hand or owned by another source is a conflict, reported and left as it is. ',
      '`deleteEntities` deletes only what the source owns (absent names count in `alreadyGone`). A relationship is written only when the source owns ',
      'its `from` entity (as this request leaves it); otherwise it is a conflict.',
      '\n\n**Refusals.** Any item that does not match the catalog (unknown type, undeclared state, invalid properties, a relationship end ',
      'missing or of the wrong type) is 400 validation_failed with one `details` item per problem (`entities.3.properties.size`); a state ',
      "change the type's transitions forbid is 409 transition_not_allowed; a unique value taken 409 constraint_violation; a relationship beyond its ",
      "type's cardinality 409 cardinality_violation. Nothing is written then.",
      '\n\n`dryRun` answers the same and writes nothing. Every written entity is one change (`entity.created`, `entity.updated`, `entity.deleted`) ',
      'on the change stream. Needs data:write; a cell-scoped token is refused (403 cell_scope_violation): batch writes are for unscoped sync tools.',
    ].join(''),
    security: TokenOrSessionSecurity,
    request: { params: EnvParams, body: jsonBody(BatchRequest) },
    responses: {
      200: jsonResponse(BatchResult, 'What was written (or, for a dry run, would be), and the conflicts left alone'),
      ...errorResponses(400, 401, 403, 404, 409, 413),
    },
  }),
  async (c) => {
    const { o, p, envName } = c.req.valid('param');
    return c.json(await applyBatch(c.get('services'), { org: o, project: p, env: envName }, c.req.valid('json')), 200);
  },
);
