import type { Principal } from '../../auth/principal';
import type { Queryable } from '../../db/client';
import { auditEvents } from '../../db/schema';

/**
 * Control-plane audit events (SPEC Audit events; read by GET /admin/audit).
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
  | 'github.installation_repositories';

export type AuditActor = { type: 'user' | 'token' | 'bootstrap' | 'super-admin' | 'codehost' | 'system'; id: string | null };

/** Who did it, as the audit log names them. */
export function actorOf(principal: Principal): AuditActor {
  switch (principal.kind) {
    case 'user-session':
      return { type: 'user', id: principal.userId };
    case 'service-token':
      return { type: 'token', id: principal.tokenId };
    case 'bootstrap':
      return { type: 'bootstrap', id: null };
    case 'codehost-webhook':
      return { type: 'codehost', id: principal.deliveryId };
    case 'run-callback':
      return { type: 'system', id: principal.runId };
  }
}

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
