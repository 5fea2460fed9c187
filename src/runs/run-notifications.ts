import { and, asc, eq, inArray } from 'drizzle-orm';
import type { Tx } from '../db/client';
import { notify, type NewNotification } from '../db/notifications';
import { actionRuns, environments, orgMembers, orgs, projects, users } from '../db/schema';

/**
 * "An action run the user triggered reaching succeeded or failed" notifies
 * that user (DECISIONS §8). Every terminal transition to succeeded or failed
 * (the callback, the reaper, a delivery that fails for good, a dead-lettered
 * delivery; and whatever else ends a run) calls notifyRunOutcomes with the
 * runs it moved, inside its own transaction: the notification exists exactly
 * when the transition committed, and a transition that lost a race (moved
 * nothing) notifies nobody.
 */

/** The columns of a run that its notification is made of. */
export type EndedRun = Pick<
  typeof actionRuns.$inferSelect,
  'id' | 'orgId' | 'projectId' | 'envId' | 'actionName' | 'operationEntityName' | 'triggeredBy' | 'status' | 'error'
>;

const USER_PREFIX = 'user:';
const UUID_SHAPED = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Longest run error quoted in a notification's body; the run itself keeps the whole text. */
const MAX_ERROR_IN_BODY = 500;

/** The user a run's `triggered_by` names, or null for a token, bootstrap or anything else. */
export function triggeringUser(triggeredBy: string): string | null {
  if (!triggeredBy.startsWith(USER_PREFIX)) return null;
  const userId = triggeredBy.slice(USER_PREFIX.length);
  // compared with a uuid column: a malformed value would fail the run's transaction, not just its notification
  return UUID_SHAPED.test(userId) ? userId : null;
}

const quoted = (text: string) => `"${text}"`;

function runNotification(run: EndedRun, userId: string, where: { envName: string; projectSlug: string }, at: Date | undefined): NewNotification {
  const succeeded = run.status === 'succeeded';
  const entityName = run.operationEntityName;
  const title = `${quoted(run.actionName)} ${succeeded ? 'succeeded' : 'failed'}${entityName === null ? '' : ` on ${quoted(entityName)}`}`;
  const place = `${where.projectSlug}/${where.envName}`;
  const error = run.error ?? 'no error was reported';
  const body = succeeded
    ? `The run finished in ${place}.`
    : `The run failed in ${place}: ${error.length > MAX_ERROR_IN_BODY ? `${error.slice(0, MAX_ERROR_IN_BODY)}…` : error}`;
  return {
    userId,
    orgId: run.orgId,
    kind: succeeded ? 'run.succeeded' : 'run.failed',
    title,
    body,
    data: { runId: run.id, actionName: run.actionName, entityName, envName: where.envName, projectSlug: where.projectSlug },
    createdAt: at,
  };
}

/**
 * Notifies the triggering user of each run that ended succeeded or failed.
 * Runs triggered by a service token or in bootstrap mode notify nobody, and
 * nor does a run whose user has since left the organization (or was
 * deleted): notifications are about an organization the user belongs to.
 *
 * The organization's row is share-locked before the membership is read, as
 * a token mint does: a removal (which locks it exclusively first, then
 * deletes the member's notifications of the organization) either commits
 * before this reads the membership, or waits for this transaction and then
 * deletes the notification written here. The user's row is key-share-locked
 * with it, so an account deleted meanwhile cannot fail the insert (and with
 * it the run's transition) on its foreign key.
 */
export async function notifyRunOutcomes(tx: Tx, runs: readonly EndedRun[], at?: Date): Promise<void> {
  const candidates = runs
    .filter((run) => run.status === 'succeeded' || run.status === 'failed')
    .map((run) => ({ run, userId: triggeringUser(run.triggeredBy) }))
    .filter((item): item is { run: EndedRun; userId: string } => item.userId !== null);
  if (candidates.length === 0) return;
  const orgIds = [...new Set(candidates.map(({ run }) => run.orgId))].sort();
  // every membership change locks its organization's row exclusively first (src/modules/members)
  await tx.select({ id: orgs.id }).from(orgs).where(inArray(orgs.id, orgIds)).orderBy(asc(orgs.id)).for('share');
  const members = await tx
    .select({ orgId: orgMembers.orgId, userId: orgMembers.userId })
    .from(orgMembers)
    .innerJoin(users, eq(users.id, orgMembers.userId))
    .where(and(inArray(orgMembers.orgId, orgIds), inArray(orgMembers.userId, [...new Set(candidates.map(({ userId }) => userId))])))
    .for('key share', { of: users });
  const isMember = new Set(members.map((row) => `${row.orgId}/${row.userId}`));
  const notified = candidates.filter(({ run, userId }) => isMember.has(`${run.orgId}/${userId}`));
  if (notified.length === 0) return;
  const places = await tx
    .select({ envId: environments.id, envName: environments.name, projectSlug: projects.slug })
    .from(environments)
    .innerJoin(projects, eq(projects.id, environments.projectId))
    .where(inArray(environments.id, [...new Set(notified.map(({ run }) => run.envId))]));
  const placeOf = new Map(places.map((place) => [place.envId, place]));
  await notify(
    tx,
    ...notified.flatMap(({ run, userId }) => {
      const place = placeOf.get(run.envId);
      // the run's environment is its foreign key's: present while the run row is
      return place ? [runNotification(run, userId, place, at)] : [];
    }),
  );
}
