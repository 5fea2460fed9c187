/** Email domains as SSO providers claim them (src/modules/sso/domain-proof.ts, src/auth/sessions.ts). */

/** The domains of a provider's `domain` value (comma-separated), lowercase. */
export const domainsOf = (value: string): string[] =>
  value
    .split(',')
    .map((domain) => domain.trim().toLowerCase())
    .filter((domain) => domain !== '');

/** The host of an address, lowercase. */
export const hostOf = (email: string): string => email.slice(email.lastIndexOf('@') + 1).toLowerCase();

/** Whether `host` is `domain` or one of its subdomains: the addresses a provider of `domain` speaks for. */
export const covers = (domain: string, host: string): boolean => host === domain || host.endsWith(`.${domain}`);

/** Two domains whose addresses meet: the same, or one a subdomain of the other. */
export const overlaps = (a: string, b: string): boolean => covers(a, b) || covers(b, a);
