/**
 * The IANA special-purpose address registries (RFC 6890), as data, for the
 * outbound guard (src/runs/outbound-guard.ts):
 *
 * - IANA IPv4 Special-Purpose Address Registry,
 *   https://www.iana.org/assignments/iana-ipv4-special-registry/
 * - IANA IPv6 Special-Purpose Address Registry,
 *   https://www.iana.org/assignments/iana-ipv6-special-registry/
 *
 * Encoded from both registries as last updated 2025-10-09 (25 records each;
 * the newest, 100:0:0:1::/64, allocated 2025-04). One entry per address
 * block: the registry's row for 192.0.0.170/32 and 192.0.0.171/32 is two
 * entries here. Nothing is added to or left out of the registries; the few
 * blocks the guard needs beyond them are `OUTSIDE_THE_REGISTRIES` below, each
 * with its source. When IANA adds a row, add it here (and the guard's test
 * picks it up: it is table-driven over these arrays).
 */

export interface SpecialPurposeBlock {
  /** The registry's "Address Block", in CIDR notation. */
  prefix: string;
  /** The registry's "Name". */
  name: string;
  /** The registry's "RFC" column. */
  rfc: string;
  /**
   * The registry's "Globally Reachable" column. `null` where it says N/A
   * (Teredo, 6to4: the answer depends on the address they carry) or is left
   * blank (blocks whose allocation was terminated). The guard lets through only
   * `true`.
   */
  globallyReachable: boolean | null;
}

export const SPECIAL_PURPOSE_REGISTRIES_UPDATED = '2025-10-09';

export const IPV4_SPECIAL_PURPOSE: readonly SpecialPurposeBlock[] = [
  { prefix: '0.0.0.0/8', name: '"This network"', rfc: 'RFC 791, Section 3.2', globallyReachable: false },
  { prefix: '0.0.0.0/32', name: '"This host on this network"', rfc: 'RFC 1122, Section 3.2.1.3', globallyReachable: false },
  { prefix: '10.0.0.0/8', name: 'Private-Use', rfc: 'RFC 1918', globallyReachable: false },
  { prefix: '100.64.0.0/10', name: 'Shared Address Space', rfc: 'RFC 6598', globallyReachable: false },
  { prefix: '127.0.0.0/8', name: 'Loopback', rfc: 'RFC 1122, Section 3.2.1.3', globallyReachable: false },
  { prefix: '169.254.0.0/16', name: 'Link Local', rfc: 'RFC 3927', globallyReachable: false },
  { prefix: '172.16.0.0/12', name: 'Private-Use', rfc: 'RFC 1918', globallyReachable: false },
  { prefix: '192.0.0.0/24', name: 'IETF Protocol Assignments', rfc: 'RFC 6890, Section 2.1', globallyReachable: false },
  { prefix: '192.0.0.0/29', name: 'IPv4 Service Continuity Prefix', rfc: 'RFC 7335', globallyReachable: false },
  { prefix: '192.0.0.8/32', name: 'IPv4 dummy address', rfc: 'RFC 7600', globallyReachable: false },
  { prefix: '192.0.0.9/32', name: 'Port Control Protocol Anycast', rfc: 'RFC 7723', globallyReachable: true },
  { prefix: '192.0.0.10/32', name: 'Traversal Using Relays around NAT Anycast', rfc: 'RFC 8155', globallyReachable: true },
  { prefix: '192.0.0.170/32', name: 'NAT64/DNS64 Discovery', rfc: 'RFC 8880, RFC 7050 Section 2.2', globallyReachable: false },
  { prefix: '192.0.0.171/32', name: 'NAT64/DNS64 Discovery', rfc: 'RFC 8880, RFC 7050 Section 2.2', globallyReachable: false },
  { prefix: '192.0.2.0/24', name: 'Documentation (TEST-NET-1)', rfc: 'RFC 5737', globallyReachable: false },
  { prefix: '192.31.196.0/24', name: 'AS112-v4', rfc: 'RFC 7535', globallyReachable: true },
  { prefix: '192.52.193.0/24', name: 'AMT', rfc: 'RFC 7450', globallyReachable: true },
  { prefix: '192.88.99.0/24', name: 'Deprecated (6to4 Relay Anycast)', rfc: 'RFC 7526', globallyReachable: null },
  { prefix: '192.88.99.2/32', name: '6a44-relay anycast address', rfc: 'RFC 6751', globallyReachable: false },
  { prefix: '192.168.0.0/16', name: 'Private-Use', rfc: 'RFC 1918', globallyReachable: false },
  { prefix: '192.175.48.0/24', name: 'Direct Delegation AS112 Service', rfc: 'RFC 7534', globallyReachable: true },
  { prefix: '198.18.0.0/15', name: 'Benchmarking', rfc: 'RFC 2544', globallyReachable: false },
  { prefix: '198.51.100.0/24', name: 'Documentation (TEST-NET-2)', rfc: 'RFC 5737', globallyReachable: false },
  { prefix: '203.0.113.0/24', name: 'Documentation (TEST-NET-3)', rfc: 'RFC 5737', globallyReachable: false },
  { prefix: '240.0.0.0/4', name: 'Reserved', rfc: 'RFC 1112, Section 4', globallyReachable: false },
  { prefix: '255.255.255.255/32', name: 'Limited Broadcast', rfc: 'RFC 8190, RFC 919 Section 7', globallyReachable: false },
];

export const IPV6_SPECIAL_PURPOSE: readonly SpecialPurposeBlock[] = [
  { prefix: '::1/128', name: 'Loopback Address', rfc: 'RFC 4291', globallyReachable: false },
  { prefix: '::/128', name: 'Unspecified Address', rfc: 'RFC 4291', globallyReachable: false },
  { prefix: '::ffff:0:0/96', name: 'IPv4-mapped Address', rfc: 'RFC 4291', globallyReachable: false },
  { prefix: '64:ff9b::/96', name: 'IPv4-IPv6 Translat.', rfc: 'RFC 6052', globallyReachable: true },
  { prefix: '64:ff9b:1::/48', name: 'IPv4-IPv6 Translat.', rfc: 'RFC 8215', globallyReachable: false },
  { prefix: '100::/64', name: 'Discard-Only Address Block', rfc: 'RFC 6666', globallyReachable: false },
  { prefix: '100:0:0:1::/64', name: 'Dummy IPv6 Prefix', rfc: 'RFC 9780', globallyReachable: false },
  { prefix: '2001::/23', name: 'IETF Protocol Assignments', rfc: 'RFC 2928', globallyReachable: false },
  { prefix: '2001::/32', name: 'TEREDO', rfc: 'RFC 4380, RFC 8190', globallyReachable: null },
  { prefix: '2001:1::1/128', name: 'Port Control Protocol Anycast', rfc: 'RFC 7723', globallyReachable: true },
  { prefix: '2001:1::2/128', name: 'Traversal Using Relays around NAT Anycast', rfc: 'RFC 8155', globallyReachable: true },
  { prefix: '2001:1::3/128', name: 'DNS-SD Service Registration Protocol Anycast', rfc: 'RFC 9665', globallyReachable: true },
  { prefix: '2001:2::/48', name: 'Benchmarking', rfc: 'RFC 5180, RFC Errata 1752', globallyReachable: false },
  { prefix: '2001:3::/32', name: 'AMT', rfc: 'RFC 7450', globallyReachable: true },
  { prefix: '2001:4:112::/48', name: 'AS112-v6', rfc: 'RFC 7535', globallyReachable: true },
  { prefix: '2001:10::/28', name: 'Deprecated (previously ORCHID)', rfc: 'RFC 4843', globallyReachable: null },
  { prefix: '2001:20::/28', name: 'ORCHIDv2', rfc: 'RFC 7343', globallyReachable: true },
  { prefix: '2001:30::/28', name: 'Drone Remote ID Protocol Entity Tags (DETs) Prefix', rfc: 'RFC 9374', globallyReachable: true },
  { prefix: '2001:db8::/32', name: 'Documentation', rfc: 'RFC 3849', globallyReachable: false },
  { prefix: '2002::/16', name: '6to4', rfc: 'RFC 3056', globallyReachable: null },
  { prefix: '2620:4f:8000::/48', name: 'Direct Delegation AS112 Service', rfc: 'RFC 7534', globallyReachable: true },
  { prefix: '3fff::/20', name: 'Documentation', rfc: 'RFC 9637', globallyReachable: false },
  { prefix: '5f00::/16', name: 'Segment Routing (SRv6) SIDs', rfc: 'RFC 9602', globallyReachable: false },
  { prefix: 'fc00::/7', name: 'Unique-Local', rfc: 'RFC 4193, RFC 8190', globallyReachable: false },
  { prefix: 'fe80::/10', name: 'Link-Local Unicast', rfc: 'RFC 4291', globallyReachable: false },
];

/**
 * What the guard needs beyond the two registries, which list special blocks
 * carved out of otherwise ordinary space and so say nothing about multicast,
 * or about IPv6 space IANA has not opened for unicast at all.
 */
export const OUTSIDE_THE_REGISTRIES = {
  /** IANA IPv4 Multicast Address Space Registry (RFC 5771): never a webhook's address. */
  ipv4Multicast: { prefix: '224.0.0.0/4', name: 'Multicast', rfc: 'RFC 5771' },
  /**
   * IANA IPv6 Address Space Registry: 2000::/3 is the only range IANA assigns
   * unicast addresses from (RFC 4291). Everything outside it is reserved by
   * the IETF, multicast (ff00::/8), deprecated site-local (fec0::/10) or a
   * block of the special-purpose registry, and is refused unless an embedding
   * below says otherwise.
   */
  ipv6GlobalUnicast: { prefix: '2000::/3', name: 'Global Unicast', rfc: 'RFC 4291' },
} as const;

/**
 * IPv6 blocks whose addresses carry an IPv4 address in their last 32 bits,
 * judged as that IPv4 address rather than by the IPv6 registry row of the
 * same prefix: a connection to `::ffff:a.b.c.d` is a connection to a.b.c.d,
 * and a NAT64 translator sends `64:ff9b::a.b.c.d` there too. An entry of the
 * IPv6 registry that is more specific than an embedding (`::/128` and
 * `::1/128` inside `::/96`) is judged by its own row.
 *
 * The other embeddings are refused by their registry rows, whatever they
 * carry: 64:ff9b:1::/48 (local-use NAT64, not globally reachable; where it
 * puts the IPv4 address depends on the operator's prefix length), 2002::/16
 * (6to4) and 2001::/32 (Teredo), both "N/A".
 */
export const IPV4_EMBEDDINGS: readonly Omit<SpecialPurposeBlock, 'globallyReachable'>[] = [
  { prefix: '::ffff:0:0/96', name: 'IPv4-mapped Address', rfc: 'RFC 4291' },
  { prefix: '::/96', name: 'IPv4-compatible Address (deprecated)', rfc: 'RFC 4291, Section 2.5.5.1' },
  { prefix: '64:ff9b::/96', name: 'IPv4-IPv6 Translat. (NAT64 well-known prefix)', rfc: 'RFC 6052' },
];
