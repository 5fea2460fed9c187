import type { UserSessionPrincipal } from '../../auth/principal';
import { ApiError } from '../../http/errors';

/**
 * Which email domains a user may put an SSO provider in front of
 * (docs/people/sso.md, "Who may claim a domain"). A provider asserting
 * `email_verified` creates verified users of its domains, so registering it
 * is a claim to speak for every address there — including addresses nobody
 * has signed up with yet (account pre-hijacking) and super-admins'. There is
 * no DNS proof (the plugin's needs a column this schema lacks); the proof
 * Cellplane has is a mailbox: the registering user's own verified address.
 */

export { covers, domainsOf, hostOf, overlaps } from '../../auth/email-domains';
import { covers, hostOf } from '../../auth/email-domains';

/**
 * Mail services whose addresses anyone can get: a mailbox there proves
 * nothing about the domain, and a provider for it would speak for all their
 * users. Not exhaustive — the big ones, so that the obvious claim fails.
 */
export const SHARED_MAIL_DOMAINS: readonly string[] = [
  'gmail.com',
  'googlemail.com',
  'outlook.com',
  'hotmail.com',
  'live.com',
  'msn.com',
  'yahoo.com',
  'ymail.com',
  'icloud.com',
  'me.com',
  'mac.com',
  'aol.com',
  'proton.me',
  'protonmail.com',
  'pm.me',
  'gmx.com',
  'gmx.net',
  'gmx.de',
  'web.de',
  'mail.com',
  'zoho.com',
  'fastmail.com',
  'hey.com',
  'tutanota.com',
  'yandex.com',
  'yandex.ru',
  'mail.ru',
  'qq.com',
  '163.com',
  '126.com',
];

const PROOF = 'a provider may be registered only for the domain of your own verified address, or a subdomain of it';

export interface DomainClaim {
  actor: UserSessionPrincipal;
  /** Whether the actor is a super-admin (src/auth/memberships.ts isSuperAdmin). */
  actorIsSuperAdmin: boolean;
  /** SUPER_ADMIN_EMAILS, lowercase. */
  superAdminEmails: readonly string[];
}

/**
 * The registering user proves every domain by a mailbox: their address is
 * verified (a verification link, an invitation link — both came by mail to
 * it — or a provider of an already proven domain), and each domain is their
 * address's host or a subdomain of it. Never a parent: a mailbox at
 * eng.acme.com says nothing about who else is at acme.com. 403 forbidden
 * otherwise, before anything is fetched or written.
 */
export function assertDomainsProven(claim: DomainClaim, domains: readonly string[]): void {
  const { actor } = claim;
  if (!actor.emailVerified) {
    throw new ApiError('forbidden', `verify your address first (follow the link mailed to ${actor.email}): ${PROOF}`);
  }
  const host = hostOf(actor.email);
  for (const domain of domains) {
    if (!covers(host, domain)) {
      throw new ApiError('forbidden', `your verified address does not prove the domain "${domain}": ${PROOF} (${host})`);
    }
    assertNotShared(domain);
    assertNotSuperAdminDomain(claim, domain);
  }
}

function assertNotShared(domain: string): void {
  const shared = SHARED_MAIL_DOMAINS.find((service) => covers(service, domain));
  if (shared) {
    throw new ApiError('forbidden', `"${domain}" belongs to a mail service anyone can sign up with (${shared}): no organization may put a provider in front of it`);
  }
}

/**
 * A domain holding a SUPER_ADMIN_EMAILS address is the deployment's to
 * front: a provider there could sign up a super-admin address nobody has
 * claimed yet, verified. Only a super-admin may register one.
 */
function assertNotSuperAdminDomain(claim: DomainClaim, domain: string): void {
  if (claim.actorIsSuperAdmin) return;
  if (claim.superAdminEmails.some((email) => covers(domain, hostOf(email)))) {
    throw new ApiError('forbidden', `the domain "${domain}" holds a super-admin address of this deployment: only a super-admin may register a provider for it`);
  }
}
