import type { LookupAddress } from 'node:dns';
import ipaddr from 'ipaddr.js';
import { describe, expect, it } from 'vitest';
import { guardedLookup, NOT_PUBLIC } from '../../src/node/outbound-fetch';
import { checkOutboundUrl, isPublicAddress, judgeAddress } from '../../src/runs/outbound-guard';
import {
  IPV4_EMBEDDINGS,
  IPV4_SPECIAL_PURPOSE,
  IPV6_SPECIAL_PURPOSE,
  type SpecialPurposeBlock,
} from '../../src/runs/special-purpose-addresses';

const refused = async (url: string, resolve?: (h: string) => Promise<string[]>) => {
  const verdict = await checkOutboundUrl(url, { allowedHosts: [], resolve });
  expect(verdict.ok, `${url} should be refused`).toBe(false);
  return verdict.ok ? '' : verdict.reason;
};

describe('outbound URL guard', () => {
  it.each([
    'http://127.0.0.1/hook',
    'http://127.1/hook',
    'http://2130706433/hook', // decimal
    'http://0x7f000001/hook', // hex
    'http://0x7f.0.0.1/hook',
    'http://0177.0.0.1/hook', // octal
    'http://017700000001/hook',
    'http://0/hook',
    'http://0.0.0.0/hook',
    'http://10.0.0.5/hook',
    'http://172.16.3.4/hook',
    'http://192.168.1.1/hook',
    'http://100.64.0.1/hook',
    'http://169.254.169.254/latest/meta-data/', // metadata
    'http://[::1]/hook',
    'http://[::]/hook',
    'http://[::ffff:127.0.0.1]/hook', // IPv4-mapped
    'http://[::ffff:7f00:1]/hook',
    'http://[::ffff:a9fe:a9fe]/hook', // mapped metadata
    'http://[fd00:ec2::254]/hook', // AWS IPv6 metadata
    'http://[fe80::1]/hook',
    'http://[64:ff9b::7f00:1]/hook', // NAT64
    'http://[2002:7f00:1::1]/hook', // 6to4
    'http://224.0.0.1/hook',
    'http://255.255.255.255/hook',
  ])('refuses %s', async (url) => {
    expect(await refused(url)).toMatch(/not a public address/);
  });

  it.each(['http://localhost:8080/x', 'http://api.localhost/x', 'http://metadata.google.internal/x', 'http://metadata/x', 'http://LOCALHOST./x'])(
    'refuses the local name %s without asking DNS',
    async (url) => {
      let asked = false;
      expect(
        await refused(url, async () => {
          asked = true;
          return ['93.184.216.34'];
        }),
      ).toMatch(/local or metadata host/);
      expect(asked).toBe(false);
    },
  );

  it('refuses a name that resolves to a private address, even one of several', async () => {
    expect(await refused('https://rebind.example.com/x', async () => ['93.184.216.34', '10.0.0.1'])).toContain('10.0.0.1');
    expect(await refused('https://nx.example.com/x', async () => [])).toContain('does not resolve');
    expect(
      await refused('https://err.example.com/x', async () => {
        throw new Error('ENOTFOUND');
      }),
    ).toContain('does not resolve');
  });

  it('passes public addresses and names that resolve to them', async () => {
    expect(await checkOutboundUrl('https://93.184.216.34/x', { allowedHosts: [] })).toMatchObject({ ok: true });
    expect(await checkOutboundUrl('https://[2606:4700::1111]/x', { allowedHosts: [] })).toMatchObject({ ok: true });
    const verdict = await checkOutboundUrl('https://hooks.example.com/x', {
      allowedHosts: [],
      resolve: async () => ['93.184.216.34', '2606:4700::1111'],
    });
    expect(verdict).toMatchObject({ ok: true, addresses: ['93.184.216.34', '2606:4700::1111'] });
  });

  it('lets OUTBOUND_ALLOWED_HOSTS name a local host, by name or name:port', async () => {
    expect(await checkOutboundUrl('http://127.0.0.1:9999/x', { allowedHosts: ['127.0.0.1'] })).toMatchObject({ ok: true });
    expect(await checkOutboundUrl('http://localhost:9999/x', { allowedHosts: ['localhost:9999'] })).toMatchObject({ ok: true });
    expect((await checkOutboundUrl('http://localhost:9998/x', { allowedHosts: ['localhost:9999'] })).ok).toBe(false);
  });

  it('refuses other schemes, credentials in the URL and garbage', async () => {
    expect(await refused('ftp://example.com/x')).toContain('scheme');
    expect(await refused('file:///etc/passwd')).toContain('scheme');
    expect(await refused('https://user:pw@example.com/x')).toContain('credentials');
    expect(await refused('not a url')).toContain('not valid');
  });

  it('classifies addresses', () => {
    expect(isPublicAddress('8.8.8.8')).toBe(true);
    expect(isPublicAddress('::ffff:8.8.8.8')).toBe(true);
    expect(isPublicAddress('192.168.0.1')).toBe(false);
    expect(isPublicAddress('not-an-ip')).toBe(false);
  });
});

describe('the Node host resolver', () => {
  it('feeds the guard the system resolver’s addresses', async () => {
    const { resolveHost } = await import('../../src/node/resolve-host');
    // /etc/hosts answers without a network
    expect(await resolveHost('localhost')).toEqual(expect.arrayContaining([expect.stringMatching(/^(127\.0\.0\.1|::1)$/)]));
    const verdict = await checkOutboundUrl('http://loopback-alias.localhost.example/x', {
      allowedHosts: [],
      resolve: async () => resolveHost('localhost'),
    });
    expect(verdict.ok).toBe(false);
  });
});

/** How a literal address is written in a URL's host. */
const hostOf = (address: string) => (address.includes(':') ? `[${address}]` : address);

/** The last address of a block: inside it, and (for every block of both registries) in no more specific block. */
const lastAddressOf = (prefix: string) =>
  (prefix.includes(':') ? ipaddr.IPv6.broadcastAddressFromCIDR(prefix) : ipaddr.IPv4.broadcastAddressFromCIDR(prefix)).toString();

/** The three places an address is judged: a literal URL host, a name the guard resolves, a connection's own lookup (Node). */
async function verdicts(address: string): Promise<{ literal: boolean; resolved: boolean; connection: boolean }> {
  const literal = await checkOutboundUrl(`http://${hostOf(address)}/hook`, { allowedHosts: [] });
  const resolved = await checkOutboundUrl('http://hooks.example.com/hook', { allowedHosts: [], resolve: async () => [address] });
  const lookup = guardedLookup([], (_host, _options, callback) =>
    callback(null, [{ address, family: address.includes(':') ? 6 : 4 } as LookupAddress]),
  );
  const connection = await new Promise<boolean>((resolve) =>
    lookup('hooks.example.com', { all: true }, (error) => resolve(error === null || (error as NodeJS.ErrnoException).code !== NOT_PUBLIC)),
  );
  return { literal: literal.ok, resolved: resolved.ok, connection };
}

const REFUSED = { literal: false, resolved: false, connection: false };
const ALLOWED = { literal: true, resolved: true, connection: true };

// the embedding prefixes are judged by the IPv4 address they carry, whatever their registry row says (tested below)
const isEmbedding = (block: SpecialPurposeBlock) => IPV4_EMBEDDINGS.some((embedding) => embedding.prefix === block.prefix);
const registry = [...IPV4_SPECIAL_PURPOSE, ...IPV6_SPECIAL_PURPOSE].filter((block) => !isEmbedding(block));
const notGlobal = registry.filter((block) => block.globallyReachable !== true);
const global = registry.filter((block) => block.globallyReachable === true);

describe('the IANA special-purpose address registries (src/runs/special-purpose-addresses.ts)', () => {
  it('are encoded whole: 26 IPv4 blocks (25 rows), 25 IPv6 blocks, each a valid prefix', () => {
    expect(IPV4_SPECIAL_PURPOSE).toHaveLength(26);
    expect(IPV6_SPECIAL_PURPOSE).toHaveLength(25);
    for (const block of [...IPV4_SPECIAL_PURPOSE, ...IPV6_SPECIAL_PURPOSE]) {
      expect(() => ipaddr.parseCIDR(block.prefix), block.prefix).not.toThrow();
      expect(block.name.length).toBeGreaterThan(0);
      expect(block.rfc).toMatch(/^RFC \d+/);
    }
  });

  it.each(notGlobal.map((block) => [block.prefix, block.name, lastAddressOf(block.prefix)]))(
    'refuses %s (%s, not globally reachable): %s as a literal, as a resolved name and at connection time',
    async (_prefix, _name, address) => {
      expect(await verdicts(address)).toEqual(REFUSED);
    },
  );

  it.each(global.map((block) => [block.prefix, block.name, lastAddressOf(block.prefix)]))(
    'allows %s (%s, globally reachable): %s',
    async (_prefix, _name, address) => {
      expect(await verdicts(address)).toEqual(ALLOWED);
    },
  );

  it('takes the most specific block: 192.0.0.9 and 192.0.0.10 pass inside 192.0.0.0/24, which does not', async () => {
    expect(await verdicts('192.0.0.9')).toEqual(ALLOWED);
    expect(await verdicts('192.0.0.10')).toEqual(ALLOWED);
    expect(await verdicts('192.0.0.11')).toEqual(REFUSED);
    expect(await verdicts('2001:1::3')).toEqual(ALLOWED);
    expect(await verdicts('2001:1::4')).toEqual(REFUSED);
  });

  it.each(IPV4_EMBEDDINGS.map((embedding) => [embedding.prefix, embedding.name]))(
    '%s (%s) is judged as the IPv4 address it carries',
    async (prefix) => {
      const carrying = (ipv4: string) => {
        const [network] = ipaddr.parseCIDR(prefix);
        const bytes = network.toByteArray();
        bytes.splice(12, 4, ...ipaddr.IPv4.parse(ipv4).toByteArray());
        return ipaddr.fromByteArray(bytes).toString();
      };
      expect(await verdicts(carrying('8.8.8.8'))).toEqual(ALLOWED);
      for (const inner of ['127.0.0.1', '10.1.2.3', '169.254.169.254', '100.64.0.1', '0.0.0.0', '255.255.255.255', '224.0.0.1']) {
        expect(await verdicts(carrying(inner)), `${prefix} carrying ${inner}`).toEqual(REFUSED);
      }
    },
  );

  it('refuses the other embeddings whatever they carry: 6to4, Teredo, local-use NAT64', async () => {
    for (const address of ['2002:808:808::1', '2002:7f00:1::1', '2001:0:4136:e378:8000:63bf:f7f7:f7f7', '64:ff9b:1::808:808']) {
      expect(await verdicts(address), address).toEqual(REFUSED);
    }
  });

  it('refuses what the registries leave out: multicast, and IPv6 outside 2000::/3', async () => {
    for (const address of ['224.0.0.1', '239.255.255.250', 'ff02::1', 'ff0e::1', 'fec0::1', '4000::1', '1::1', '::100:0:0:1']) {
      expect(await verdicts(address), address).toEqual(REFUSED);
    }
    for (const address of ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '2a00:1450:4001::200e']) {
      expect(await verdicts(address), address).toEqual(ALLOWED);
    }
  });

  it('reproduction: the IPv4-compatible [::127.0.0.1] is loopback, not public', async () => {
    const verdict = await checkOutboundUrl('http://[::127.0.0.1]/hook', { allowedHosts: [] });
    expect(verdict).toEqual({
      ok: false,
      reason: '[::7f00:1] is not a public address (IPv4-compatible Address (deprecated) carrying 127.0.0.1: Loopback, 127.0.0.0/8, RFC 1122, Section 3.2.1.3)',
    });
    expect(await verdicts('::7f00:1')).toEqual(REFUSED);
    // glibc prints an IPv4-compatible answer in this form; ipaddr.js reads it as IPv4-mapped: the same verdict either way
    expect(isPublicAddress('::127.0.0.1')).toBe(false);
    expect(isPublicAddress('::a9fe:a9fe')).toBe(false);
    expect(judgeAddress('::8.8.8.8')).toEqual({ public: true });
  });
});
