import ipaddr from 'ipaddr.js';

/**
 * The SSRF guard for outbound webhooks (DECISIONS §4): a target resolving to
 * a loopback, private, link-local, metadata or otherwise non-public address
 * is refused unless OUTBOUND_ALLOWED_HOSTS names its host.
 *
 * URLs are parsed by the platform's WHATWG URL parser, which already turns
 * every IPv4 notation (decimal `2130706433`, hex `0x7f.1`, octal `0177.0.0.1`,
 * short forms) into a dotted quad, and IPv6 into its canonical form;
 * addresses are classified by ipaddr.js. Only plain public unicast passes;
 * an IPv4-mapped IPv6 address is judged as the IPv4 address it carries, and
 * other embeddings (6to4, NAT64, Teredo) are refused outright.
 */

/** Resolves a host name to its addresses (Node: dns.lookup). Hosts without one pass names through unchecked. */
export type ResolveHost = (hostname: string) => Promise<string[]>;

export type OutboundVerdict =
  | { ok: true; url: URL; addresses: string[] }
  /** `transient`: the name did not resolve now; a later attempt may succeed (retried as a network error). */
  | { ok: false; reason: string; transient?: true };

/** Names that mean "this machine" or a cloud metadata service whatever DNS says. */
const BLOCKED_NAMES = [/^localhost$/, /\.localhost$/, /^metadata$/, /^metadata\.google\.internal$/, /\.internal$/];

export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  return parsed.range() === 'unicast';
}

/**
 * Whether OUTBOUND_ALLOWED_HOSTS names this host, with or without a port:
 * for a check that knows the name only (a connection's lookup), after the
 * URL's own check has judged the port.
 */
export function hostAllowed(hostname: string, allowedHosts: string[]): boolean {
  const host = hostname.toLowerCase();
  return allowedHosts.some((allowed) => {
    const entry = allowed.toLowerCase();
    return entry === host || entry.replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1') === host;
  });
}

function urlAllowed(url: URL, allowedHosts: string[]): boolean {
  const host = url.hostname.toLowerCase();
  return allowedHosts.some((allowed) => {
    const entry = allowed.toLowerCase();
    return entry === host || entry === url.host.toLowerCase();
  });
}

/** Literal IP hosts come out of URL parsing as `1.2.3.4` or `[v6]`. */
function literalAddress(hostname: string): string | undefined {
  if (hostname.startsWith('[') && hostname.endsWith(']')) return hostname.slice(1, -1);
  return ipaddr.IPv4.isValidFourPartDecimal(hostname) ? hostname : undefined;
}

export async function checkOutboundUrl(
  target: string,
  options: { allowedHosts: string[]; resolve?: ResolveHost },
): Promise<OutboundVerdict> {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return { ok: false, reason: 'the URL is not valid' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return { ok: false, reason: `scheme ${url.protocol} is not allowed (http or https only)` };
  }
  if (url.username || url.password) return { ok: false, reason: 'credentials in the URL are not allowed; use the trigger auth' };
  if (urlAllowed(url, options.allowedHosts)) return { ok: true, url, addresses: [] };

  const hostname = url.hostname.toLowerCase();
  const literal = literalAddress(hostname);
  if (literal !== undefined) {
    return isPublicAddress(literal)
      ? { ok: true, url, addresses: [literal] }
      : { ok: false, reason: `${hostname} is not a public address` };
  }
  if (BLOCKED_NAMES.some((pattern) => pattern.test(hostname.replace(/\.$/, '')))) {
    return { ok: false, reason: `${hostname} names a local or metadata host` };
  }
  if (!options.resolve) return { ok: true, url, addresses: [] };
  let addresses: string[];
  try {
    addresses = await options.resolve(hostname);
  } catch {
    return { ok: false, reason: `${hostname} does not resolve`, transient: true };
  }
  if (addresses.length === 0) return { ok: false, reason: `${hostname} does not resolve`, transient: true };
  const blocked = addresses.find((address) => !isPublicAddress(address));
  if (blocked) return { ok: false, reason: `${hostname} resolves to ${blocked}, which is not a public address` };
  return { ok: true, url, addresses };
}
