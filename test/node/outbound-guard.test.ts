import { describe, expect, it } from 'vitest';
import { checkOutboundUrl, isPublicAddress } from '../../src/runs/outbound-guard';

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
