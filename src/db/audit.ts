import type { Queryable } from './client';
import { auditEvents } from './schema';

/**
 * Control-plane audit events (SPEC Audit events; read by GET /admin/audit).
 * The one writer of audit rows. It lives beside the schema, as the
 * notification writer does (./notifications.ts), because the auth layer
 * (SSO sign-ins) records events too and must not import a module.
 * Always written with the transaction of the change they record, so an
 * event exists exactly when its change committed. Never holds a secret:
 * names and ids only.
 */
export type AuditAction =
  | 'org.created'
  | 'org.deleted'
  | 'org.suspended'
  | 'org.unsuspended'
  | 'member.added'
  | 'member.role_changed'
  | 'member.removed'
  | 'member.left'
  | 'token.minted'
  | 'token.revoked'
  | 'secret.put'
  | 'secret.deleted'
  | 'sso.registered'
  | 'sso.updated'
  | 'sso.deleted'
  | 'project.nuked'
  | 'github-dispatch-attempted'
  | 'github.installation_repositories'
  | 'github.installation_claimed'
  | 'github.installation_recovered'
  | 'github.installation_deleted';

export type AuditActor = { type: 'user' | 'token' | 'bootstrap' | 'local' | 'super-admin' | 'codehost' | 'system'; id: string | null };

export interface AuditEntry {
  action: AuditAction;
  actor: AuditActor;
  orgId: string | null;
  target?: { type: string; id: string };
  data?: Record<string, unknown>;
}

export async function recordAudit(tx: Queryable, entry: AuditEntry): Promise<void> {
  await tx.insert(auditEvents).values({
    action: entry.action,
    orgId: entry.orgId,
    actorType: entry.actor.type,
    actorId: entry.actor.id,
    targetType: entry.target?.type ?? null,
    targetId: entry.target?.id ?? null,
    data: entry.data ?? {},
  });
}
