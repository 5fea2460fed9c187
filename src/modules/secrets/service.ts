import type { z } from '@hono/zod-openapi';
import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import { authorizeEnvironment, type EnvRef } from '../../auth/access';
import { openSecret, sealSecret, SealedSecretError, type SealContext } from '../../auth/crypto';
import type { ServiceContext } from '../../context';
import type { Queryable } from '../../db/client';
import { environmentSecrets } from '../../db/schema';
import { notFound } from '../../http/errors';
import { timestamp } from '../../http/openapi';
import type { Secret } from '../../secret';
import { recordAudit } from '../../db/audit';
import { actorOf } from '../../auth/actor';
import type { SecretInfo } from './schemas';

/**
 * Per-environment secrets (DECISIONS §5). Values are sealed with
 * ENCRYPTION_KEY before they reach the database (src/auth/crypto.ts), bound
 * to their org/project/env/name, and never leave this module except through
 * resolveSecrets, which only the run engine calls. Every management verb
 * needs tokens:manage and honours a token's environment pin.
 */

type Info = z.infer<typeof SecretInfo>;

const infoColumns = {
  name: environmentSecrets.name,
  createdAt: environmentSecrets.createdAt,
  updatedAt: environmentSecrets.updatedAt,
};

const toInfo = (row: { name: string; createdAt: Date; updatedAt: Date }): Info => ({
  name: row.name,
  createdAt: timestamp(row.createdAt),
  updatedAt: timestamp(row.updatedAt),
});

/** Names and timestamps of an environment's secrets, by name. */
export async function listSecrets(ctx: ServiceContext, ref: EnvRef): Promise<Info[]> {
  const { env } = await authorizeEnvironment(ctx, ref, 'tokens:manage');
  const rows = await ctx.db
    .select(infoColumns)
    .from(environmentSecrets)
    .where(eq(environmentSecrets.envId, env.id))
    .orderBy(asc(environmentSecrets.name));
  return rows.map(toInfo);
}

/**
 * Creates or replaces a secret. Either way the value is sealed afresh (new
 * IV). One INSERT … ON CONFLICT settles the race between two first PUTs;
 * `xmax = 0` in RETURNING tells an inserted row from an updated one. The
 * audit event (names only) commits with the write, or neither does.
 */
export async function putSecret(
  ctx: ServiceContext,
  ref: EnvRef,
  name: string,
  value: Secret,
): Promise<{ secret: Info; created: boolean }> {
  const { env } = await authorizeEnvironment(ctx, ref, 'tokens:manage');
  const sealed = await sealSecret(ctx.config.encryptionKey, value.reveal(), {
    orgId: env.orgId,
    projectId: env.projectId,
    envId: env.id,
    name,
  });
  const now = ctx.clock.now();
  const row = await ctx.db.transaction(async (tx) => {
    const [written] = await tx
      .insert(environmentSecrets)
      .values({ orgId: env.orgId, projectId: env.projectId, envId: env.id, name, sealed, createdAt: now, updatedAt: now })
      .onConflictDoUpdate({
        target: [environmentSecrets.envId, environmentSecrets.name],
        set: { sealed, updatedAt: now },
      })
      .returning({ ...infoColumns, id: environmentSecrets.id, created: sql<boolean>`(xmax = 0)` });
    await auditSecret(ctx, tx, 'secret.put', env, { id: written!.id, name }, { created: written!.created });
    return written!;
  });
  return { secret: toInfo(row), created: row.created };
}

export async function deleteSecret(ctx: ServiceContext, ref: EnvRef, name: string): Promise<{ deleted: true; name: string }> {
  const { env } = await authorizeEnvironment(ctx, ref, 'tokens:manage');
  await ctx.db.transaction(async (tx) => {
    const [deleted] = await tx
      .delete(environmentSecrets)
      .where(and(eq(environmentSecrets.envId, env.id), eq(environmentSecrets.name, name)))
      .returning({ id: environmentSecrets.id });
    if (!deleted) throw notFound(`secret "${name}"`);
    await auditSecret(ctx, tx, 'secret.deleted', env, { id: deleted.id, name });
  });
  return { deleted: true, name };
}

/**
 * The audit event of a secret write, in its transaction: who, which
 * environment, which name. Never the value, sealed or not.
 */
async function auditSecret(
  ctx: ServiceContext,
  tx: Queryable,
  action: 'secret.put' | 'secret.deleted',
  env: { orgId: string; projectId: string; id: string; name: string },
  secret: { id: string; name: string },
  extra: Record<string, unknown> = {},
): Promise<void> {
  await recordAudit(tx, {
    action,
    actor: actorOf(ctx.caller.principal),
    orgId: env.orgId,
    target: { type: 'secret', id: secret.id },
    data: { projectId: env.projectId, envId: env.id, envName: env.name, name: secret.name, ...extra },
  });
}

/**
 * The plaintexts of the named secrets of one environment, for the run engine
 * resolving `{{ secrets.<name> }}` (SPEC Authentication 12).
 *
 * No authorization here: the caller is the engine, acting for a run it has
 * already admitted in `env`. Never expose this to a request path without an
 * authorizeEnvironment first. Names with no secret are simply absent from the
 * map (the caller decides whether that is an error).
 *
 * A row that does not open — the key changed, the bytes were altered, or the
 * sealed value was copied from another row — throws SealedSecretError naming
 * the secret and the environment, never anything of the value: a run must
 * fail loudly rather than send an empty credential.
 */
export async function resolveSecrets(
  db: Queryable,
  key: Secret,
  env: { orgId: string; projectId: string; envId: string },
  names: string[],
): Promise<Map<string, string>> {
  const resolved = new Map<string, string>();
  const wanted = [...new Set(names)];
  if (wanted.length === 0) return resolved;
  const rows = await db
    .select({ name: environmentSecrets.name, sealed: environmentSecrets.sealed })
    .from(environmentSecrets)
    .where(
      and(
        eq(environmentSecrets.orgId, env.orgId),
        eq(environmentSecrets.projectId, env.projectId),
        eq(environmentSecrets.envId, env.envId),
        inArray(environmentSecrets.name, wanted),
      ),
    );
  for (const row of rows) {
    // bound to the environment asked for, not to what the row claims
    const aad: SealContext = { orgId: env.orgId, projectId: env.projectId, envId: env.envId, name: row.name };
    try {
      resolved.set(row.name, await openSecret(key, row.sealed, aad));
    } catch (error) {
      if (!(error instanceof SealedSecretError)) throw error;
      throw new SealedSecretError(
        `secret "${row.name}" of environment ${env.envId} could not be decrypted (${error.message}): wrong ENCRYPTION_KEY, or the stored value was altered or copied from another row; set it again`,
      );
    }
  }
  return resolved;
}
