import type { AuditActor } from '../db/audit';
import type { Principal } from './principal';

/** Who did it, as the audit log names them. */
export function actorOf(principal: Principal): AuditActor {
  switch (principal.kind) {
    case 'user-session':
      return { type: 'user', id: principal.userId };
    case 'service-token':
      return { type: 'token', id: principal.tokenId };
    case 'bootstrap':
      return { type: 'bootstrap', id: null };
    case 'local-operator':
      return { type: 'local', id: null };
    case 'codehost-webhook':
      return { type: 'codehost', id: principal.deliveryId };
    case 'run-callback':
      return { type: 'system', id: principal.runId };
  }
}
