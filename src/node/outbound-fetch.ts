import { lookup as systemLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { Agent, type Dispatcher } from 'undici';
import type { OutboundAnswer } from '../runs/engine';
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

/** How much of an answer's body is read (and dropped) so that its connection can serve the next attempt. */
const DRAINED_BODY_BYTES = 64 * 1024;

/**
 * The webhook attempts' fetch (RunEngine.fetch), its connections all made
 * through guardedLookup. An attempt is judged by the answer's status and
 * headers alone, so this skips fetch's machinery (a Request, web streams
 * for both bodies, a clone of the request for `redirect: 'manual'`, a
 * Response and its Headers), which cost about 0.4 ms of CPU per call here,
 * and sends with undici's dispatcher: no redirect is followed, as with
 * `manual`. The answer is the status and a read-only view of the headers as
 * the HTTP parser gave them; the body is read in the background up to
 * DRAINED_BODY_BYTES and dropped (a longer one closes its connection).
 * Errors take fetch's shape: a TypeError whose cause is the network's error,
 * or the signal's reason once it is aborted.
 */
export function guardedFetch(allowedHosts: string[], lookup?: Lookup): (url: string, init: RequestInit) => Promise<OutboundAnswer> {
  const dispatcher = new Agent({ connect: { lookup: guardedLookup(allowedHosts, lookup) } });
  return async (url, init) => {
    const target = new URL(url);
    const signal = init.signal ?? undefined;
    try {
      const answer = await dispatcher.request({
        origin: target.origin,
        path: `${target.pathname}${target.search}`,
        method: (init.method ?? 'GET') as Dispatcher.HttpMethod,
        headers: init.headers instanceof Headers ? Object.fromEntries(init.headers) : (init.headers as Record<string, string> | undefined),
        body: init.body as string | undefined,
        signal,
      });
      answer.body.dump({ limit: DRAINED_BODY_BYTES }).catch(() => {});
      return { status: answer.statusCode, headers: headerReader(answer.headers) };
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw new TypeError('fetch failed', { cause: error });
    }
  };
}

/** Headers.get over the parser's record (names lower-cased, a repeated header as an array): its values joined as Headers joins them. */
function headerReader(raw: Record<string, string | string[] | undefined>): OutboundAnswer['headers'] {
  return {
    get(name) {
      const key = name.toLowerCase();
      const value = Object.hasOwn(raw, key) ? raw[key] : undefined;
      if (value === undefined) return null;
      return Array.isArray(value) ? value.join(', ') : value;
    },
  };
}
