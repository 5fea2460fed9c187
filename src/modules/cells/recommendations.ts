import { eq, inArray, sql } from 'drizzle-orm';
import { authorizeProject, type ProjectRef } from '../../auth/access';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { cells, entityMetrics } from '../../db/schema';
import { notFound } from '../../http/errors';
import { failedConstraint, type CellConstraint, type MetricDefinition } from '../catalog-items';
import type { EntityRow } from '../entities/service';
import { getEntityTypeDefinition } from '../entity-types/service';
import { getCell, type CellRow } from './membership';
import type { CellEnvQuery, CellRecommendation, CellRecommendations } from './schemas';
import { memberRows, resolveCellEnvironment } from './service';

interface Candidate {
  entity: EntityRow;
  metrics: Record<string, number>;
  reasons: string[];
}

const byName = (a: Candidate, b: Candidate) => (a.entity.name < b.entity.name ? -1 : a.entity.name > b.entity.name ? 1 : 0);

/**
 * Ranks a cell's members in one environment as placement targets
 * (DECISIONS §2). Eligible members (every constraint holds) come first, in
 * the order of the cell's policy; ineligible ones follow with the reasons.
 * A cell-scoped token is ranked only the members it can see.
 */
export async function recommendPlacement(
  ctx: ServiceContext,
  ref: ProjectRef,
  name: string,
  query: CellEnvQuery,
): Promise<CellRecommendations> {
  const { project } = await authorizeProject(ctx, ref, 'catalog:read');
  const cell = await getCell(ctx.db, project.id, name);
  const env = await resolveCellEnvironment(ctx, ctx.db, project.id, query);
  const members = await memberRows(ctx, ctx.db, cell, env);
  const metrics = await metricValues(ctx.db, members);
  const constraints = cell.constraints as CellConstraint[];
  const candidates: Candidate[] = members.map((entity) => {
    const values = metrics.get(entity.id) ?? {};
    const subject = {
      state: entity.state,
      labels: entity.labels as Record<string, unknown>,
      properties: entity.properties as Record<string, unknown>,
      metrics: values,
    };
    const reasons = constraints.map((constraint) => failedConstraint(constraint, subject)).filter((r): r is string => r !== null);
    return { entity, metrics: values, reasons };
  });
  const eligible = candidates.filter((c) => c.reasons.length === 0);
  const ineligible = candidates.filter((c) => c.reasons.length > 0);

  let ranked: { candidate: Candidate; score: number }[];
  switch (cell.placementPolicy) {
    case 'least-loaded': {
      const capacities = members.length > 0 ? await metricCapacities(ctx.db, cell) : [];
      const scored = (list: Candidate[]) =>
        list
          .map((candidate) => ({ candidate, score: load(candidate.metrics, capacities) }))
          .sort((a, b) => a.score - b.score || byName(a.candidate, b.candidate));
      ranked = [...scored(eligible), ...scored(ineligible)];
      break;
    }
    case 'round-robin': {
      const counter = await advancePlacementCounter(ctx.db, cell);
      const ordered = [...eligible].sort(byName);
      const offset = ordered.length > 0 ? (counter - 1) % ordered.length : 0;
      ranked = positions([...ordered.slice(offset), ...ordered.slice(0, offset), ...[...ineligible].sort(byName)]);
      break;
    }
    case 'random':
      ranked = positions([...shuffle(eligible), ...[...ineligible].sort(byName)]);
      break;
  }

  const recommendations: CellRecommendation[] = ranked.map(({ candidate, score }, i) => ({
    rank: i + 1,
    entityName: candidate.entity.name,
    entityId: candidate.entity.id,
    score,
    eligible: candidate.reasons.length === 0,
    reasons: candidate.reasons,
  }));
  return { cell: cell.name, placementPolicy: cell.placementPolicy, envName: env.name, recommendations };
}

const positions = (list: Candidate[]) => list.map((candidate, i) => ({ candidate, score: i }));

/** Σ value/capacity over the metrics that declare a capacity; a metric never set counts 0. */
export function load(values: Record<string, number>, capacities: { name: string; capacity: number }[]): number {
  return capacities.reduce((sum, metric) => sum + (values[metric.name] ?? 0) / metric.capacity, 0);
}

async function metricCapacities(db: Queryable, cell: CellRow): Promise<{ name: string; capacity: number }[]> {
  const type = await getEntityTypeDefinition(db, cell.projectId, cell.entityTypeName);
  return (type.metrics as MetricDefinition[]).flatMap((m) => (m.capacity !== undefined ? [{ name: m.name, capacity: m.capacity }] : []));
}

async function metricValues(db: Queryable, members: EntityRow[]): Promise<Map<string, Record<string, number>>> {
  const values = new Map<string, Record<string, number>>();
  if (members.length === 0) return values;
  const rows = await db
    .select({ entityId: entityMetrics.entityId, name: entityMetrics.name, value: entityMetrics.value })
    .from(entityMetrics)
    .where(
      inArray(
        entityMetrics.entityId,
        members.map((m) => m.id),
      ),
    );
  for (const row of rows) {
    const entry = values.get(row.entityId) ?? {};
    entry[row.name] = row.value;
    values.set(row.entityId, entry);
  }
  return values;
}

/**
 * One UPDATE ... RETURNING: the row lock it takes orders concurrent calls, so
 * each gets its own counter value and the rotation cannot hand two callers
 * the same first target.
 */
async function advancePlacementCounter(db: Queryable, cell: CellRow): Promise<number> {
  const [row] = await db
    .update(cells)
    .set({ placementCounter: sql`${cells.placementCounter} + 1` })
    .where(eq(cells.id, cell.id))
    .returning({ counter: cells.placementCounter });
  if (!row) throw notFound(`cell "${cell.name}"`);
  return row.counter;
}

/** A uniform integer in [0, n): rejection sampling keeps every residue equally likely. */
function randomBelow(n: number): number {
  const limit = Math.floor(0x1_0000_0000 / n) * n;
  const word = new Uint32Array(1);
  for (;;) {
    crypto.getRandomValues(word);
    if (word[0]! < limit) return word[0]! % n;
  }
}

/** Fisher–Yates over a copy: every order equally likely. */
export function shuffle<T>(list: T[]): T[] {
  const out = [...list];
  for (let i = out.length - 1; i > 0; i--) {
    const j = randomBelow(i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
