import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import { ApiError } from '../../http/errors';
import { attachCells, changeEvent, needsCells, passes, readChanges, resumePoint, type ChangeFilter } from '../../stream/feed';
import { callerScopeCellNames, getCell } from '../cells/membership';
import type { ChangesPage, ChangesQuery } from './schemas';

/**
 * `GET ENV/entities/stream` and `GET ENV/changes`: the same changes, the
 * same filters and the same scope rules, pushed (SSE) or polled (JSON).
 */

async function changeFilter(
  ctx: ServiceContext,
  projectId: string,
  query: { entityType?: string; cell?: string },
): Promise<ChangeFilter> {
  // an unknown cell is a 404, as for the entity list's filter
  if (query.cell !== undefined) await getCell(ctx.db, projectId, query.cell);
  return { entityType: query.entityType, cell: query.cell, scopeCells: await callerScopeCellNames(ctx, projectId) };
}

export async function openEntityStream(
  ctx: ServiceContext,
  ref: EnvRef,
  query: { entityType?: string; cell?: string },
  after: number | null,
  connection: {
    /** The host's handle of the connection (see ChangeStreams.open). */
    raw: unknown;
    /** The request's own response headers (X-Request-Id, the rate limit's), sent with the stream's own. */
    headers: Record<string, string>;
  },
): Promise<Response> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const filter = await changeFilter(ctx, project.id, query);
  const { principal } = ctx.caller;
  return ctx.changes.open({
    envId: env.id,
    projectId: project.id,
    after,
    filter,
    token: principal.kind === 'service-token' ? { id: principal.tokenId, expiresAt: principal.expiresAt } : null,
  }, connection);
}

export async function listChanges(ctx: ServiceContext, ref: EnvRef, query: ChangesQuery): Promise<ChangesPage> {
  const { project, env } = await authorizeEnvironment(ctx, ref, 'data:read');
  const filter = await changeFilter(ctx, project.id, query);
  const { verdict } = await resumePoint(ctx.db, env.id, query.after);
  if (verdict === 'beyond') {
    throw new ApiError('validation_failed', `after ${query.after} is beyond the latest change of this environment`, [
      { path: 'after', message: 'is beyond the latest change' },
    ]);
  }
  if (verdict === 'pruned') {
    throw new ApiError(
      'resync_required',
      `the changes after ${query.after} are no longer kept; reload the state (GET ENV/entities) and continue from GET ENV/changes with after set to its latest sequence`,
    );
  }
  const rows = await readChanges(ctx.db, env.id, query.after, query.limit);
  if (needsCells(filter)) await attachCells(ctx.db, project.id, rows);
  return {
    changes: rows.filter((row) => passes(filter, row)).map((row) => ({ seq: row.seq, ...changeEvent(row) })),
    next: rows.length > 0 ? rows[rows.length - 1]!.seq : query.after,
  };
}
