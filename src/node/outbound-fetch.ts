import { lookup as systemLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { Agent, fetch as undiciFetch } from 'undici';
import { hostAllowed, isPublicAddress } from '../runs/outbound-guard';

/**
 * The Node host's fetch for outbound webhooks, with the SSRF guard at the
 * moment of connecting. The guard in src/runs/outbound-guard.ts resolves a
 * name and judges its addresses before the attempt; `fetch` would then
 * resolve it again, and a name that answered with a public address the first
 * time can answer with a private one the second (DNS rebinding). Here every
 * connection's own lookup is judged, so what is connected to is what was
 * checked, by the same judgement (isPublicAddress: the IANA special-purpose
 * registries, src/runs/special-purpose-addresses.ts). A refused address fails
 * the connection with EADDRNOTPUBLIC, which the delivery records as a refusal
 * (src/runs/delivery.ts). A literal IP host is connected to without a lookup;
 * the guard judged it before the attempt, and nothing can change it since.
 *
 * (The Worker needs none of this: its fetch cannot reach private addresses.)
 */

export const NOT_PUBLIC = 'EADDRNOTPUBLIC';

type Lookup = (hostname: string, options: LookupOptions & { all: true }, callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

export function guardedLookup(allowedHosts: string[], lookup: Lookup = systemLookup as Lookup): LookupFunction {
  return (hostname, options, callback) => {
    lookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const blocked = hostAllowed(hostname, allowedHosts) ? undefined : addresses.find((entry) => !isPublicAddress(entry.address));
      if (blocked) {
        const refusal: NodeJS.ErrnoException = new Error(`${hostname} resolves to ${blocked.address}, which is not a public address`);
        refusal.code = NOT_PUBLIC;
        return callback(refusal, []);
      }
      if (options.all) return callback(null, addresses);
      const [first] = addresses;
      if (!first) return callback(Object.assign(new Error(`${hostname} does not resolve`), { code: 'ENOTFOUND' }), []);
      callback(null, first.address, first.family);
    });
  };
}

/** A fetch whose connections are all made through guardedLookup. */
export function guardedFetch(allowedHosts: string[], lookup?: Lookup): typeof fetch {
  const dispatcher = new Agent({ connect: { lookup: guardedLookup(allowedHosts, lookup) } });
  return ((input: Parameters<typeof fetch>[0], init?: RequestInit) =>
    undiciFetch(input as Parameters<typeof undiciFetch>[0], { ...(init as object), dispatcher } as Parameters<typeof undiciFetch>[1])) as unknown as typeof fetch;
}
