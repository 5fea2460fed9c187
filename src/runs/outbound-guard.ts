import ipaddr from 'ipaddr.js';
import {
  IPV4_EMBEDDINGS,
  IPV4_SPECIAL_PURPOSE,
  IPV6_SPECIAL_PURPOSE,
  OUTSIDE_THE_REGISTRIES,
  type SpecialPurposeBlock,
} from './special-purpose-addresses';

/**
 * The SSRF guard for outbound webhooks (DECISIONS §4): a target resolving to
 * a loopback, private, link-local, metadata or otherwise non-public address
 * is refused unless OUTBOUND_ALLOWED_HOSTS names its host.
 *
 * URLs are parsed by the platform's WHATWG URL parser, which already turns
 * every IPv4 notation (decimal `2130706433`, hex `0x7f.1`, octal `0177.0.0.1`,
 * short forms) into a dotted quad, and IPv6 into its canonical form.
 * Addresses are judged by the IANA special-purpose address registries
 * (src/runs/special-purpose-addresses.ts): an address passes only when the
 * most specific registry block holding it is globally reachable, or no block
 * holds it and it is ordinary unicast (IPv4 outside multicast, IPv6 inside
 * 2000::/3). IPv4-mapped, IPv4-compatible and NAT64 (64:ff9b::/96) addresses
 * are judged as the IPv4 address they carry; 6to4, Teredo and local-use NAT64
 * are refused outright by their registry rows.
 */

/** Resolves a host name to its addresses (Node: dns.lookup). Hosts without one pass names through unchecked. */
export type ResolveHost = (hostname: string) => Promise<string[]>;

export type OutboundVerdict =
  | { ok: true; url: URL; addresses: string[] }
  /** `transient`: the name did not resolve now; a later attempt may succeed (retried as a network error). */
  | { ok: false; reason: string; transient?: true };

/** Names that mean "this machine" or a cloud metadata service whatever DNS says. */
const BLOCKED_NAMES = [/^localhost$/, /\.localhost$/, /^metadata$/, /^metadata\.google\.internal$/, /\.internal$/];

type Named = Pick<SpecialPurposeBlock, 'prefix' | 'name' | 'rfc'>;
/** A block and what it means for an address inside it: `public` only where the registry says globally reachable. */
type Block = Named & { judged: 'public' | 'refused' | 'by-embedded-ipv4' };
type ParsedBlock = { block: Block; range: [ipaddr.IPv4 | ipaddr.IPv6, number] };

const fromRegistry = (block: SpecialPurposeBlock): Block => ({ ...block, judged: block.globallyReachable === true ? 'public' : 'refused' });
const parseBlocks = (blocks: Block[]): ParsedBlock[] => blocks.map((block) => ({ block, range: ipaddr.parseCIDR(block.prefix) }));

const IPV4_BLOCKS = parseBlocks([
  ...IPV4_SPECIAL_PURPOSE.map(fromRegistry),
  { ...OUTSIDE_THE_REGISTRIES.ipv4Multicast, judged: 'refused' },
]);
// the embeddings come first, so that at the same prefix (::ffff:0:0/96, 64:ff9b::/96) they win over the registry row
const IPV6_BLOCKS = parseBlocks([
  ...IPV4_EMBEDDINGS.map((embedding): Block => ({ ...embedding, judged: 'by-embedded-ipv4' })),
  ...IPV6_SPECIAL_PURPOSE.map(fromRegistry),
]);
const IPV6_GLOBAL_UNICAST = ipaddr.parseCIDR(OUTSIDE_THE_REGISTRIES.ipv6GlobalUnicast.prefix);

/** The most specific block holding the address (the registries nest: 192.0.0.9/32 is reachable inside 192.0.0.0/24, which is not). */
function mostSpecific(address: ipaddr.IPv4 | ipaddr.IPv6, blocks: ParsedBlock[]): Block | undefined {
  let found: ParsedBlock | undefined;
  for (const candidate of blocks) {
    if (address.kind() !== candidate.range[0].kind() || !address.match(candidate.range)) continue;
    if (!found || candidate.range[1] > found.range[1]) found = candidate;
  }
  return found?.block;
}

export type AddressVerdict = { public: true } | { public: false; why: string };

const named = (block: Named) => `${block.name}, ${block.prefix}, ${block.rfc}`;

/**
 * Whether an outbound request may go to this address, and if not, which
 * block it is in. (ipaddr.js reads the dotted `::a.b.c.d` as IPv4-mapped,
 * where it is IPv4-compatible; both are judged by the IPv4 address they
 * carry, so the verdict is the same.)
 */
export function judgeAddress(address: string): AddressVerdict {
  if (!ipaddr.isValid(address)) return { public: false, why: 'not an IP address' };
  const parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv4') {
    const block = mostSpecific(parsed, IPV4_BLOCKS);
    return !block || block.judged === 'public' ? { public: true } : { public: false, why: named(block) };
  }
  const v6 = parsed as ipaddr.IPv6;
  const block = mostSpecific(v6, IPV6_BLOCKS);
  if (block?.judged === 'by-embedded-ipv4') {
    const carried = new ipaddr.IPv4(v6.toByteArray().slice(12)).toString();
    const inner = judgeAddress(carried);
    return inner.public ? inner : { public: false, why: `${block.name} carrying ${carried}: ${inner.why}` };
  }
  if (block) return block.judged === 'public' ? { public: true } : { public: false, why: named(block) };
  return v6.match(IPV6_GLOBAL_UNICAST) ? { public: true } : { public: false, why: `outside ${named(OUTSIDE_THE_REGISTRIES.ipv6GlobalUnicast)}` };
}

export function isPublicAddress(address: string): boolean {
  return judgeAddress(address).public;
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
    const verdict = judgeAddress(literal);
    return verdict.public
      ? { ok: true, url, addresses: [literal] }
      : { ok: false, reason: `${hostname} is not a public address (${verdict.why})` };
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
