import { lookup } from 'node:dns/promises';
import type { ResolveHost } from '../runs/outbound-guard';

/** The Node host's resolver for the outbound guard: every address the system resolver returns. */
export const resolveHost: ResolveHost = async (hostname) =>
  (await lookup(hostname, { all: true, verbatim: true })).map((entry) => entry.address);
