import { z } from '@hono/zod-openapi';

/**
 * Identifier rules (DECISIONS §1) and the slug rule this implementation chose
 * for organizations and projects (docs/decisions.md).
 */

export const NAME_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9._:/-]*$/;

export const ResourceName = z
  .string()
  .min(1)
  .max(128)
  .regex(NAME_PATTERN, { message: 'must start with a letter or digit and contain only letters, digits and . _ : / -' })
  .openapi({ example: 'staging' });

const UUID_SHAPED = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids and slugs share path segments: a UUID-shaped segment is an id. */
export const isUuid = (value: string) => UUID_SHAPED.test(value);

/** First path segments the API itself uses: an organization may not take them as its slug. */
export const RESERVED_SLUGS = new Set([
  'admin', 'api', 'auth', 'docs', 'github', 'healthz', 'notifications', 'openapi.json', 'orgs', 'user', 'webhooks',
]);

export const Slug = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[a-z0-9][a-z0-9-]*$/, { message: 'must be lowercase letters, digits and hyphens, starting with a letter or digit' })
  .refine((slug) => !isUuid(slug), { message: 'must not look like a UUID (ids and slugs share the path)' })
  .openapi({ example: 'acme' });

export const OrgSlug = Slug.refine((slug) => !RESERVED_SLUGS.has(slug), { message: 'is reserved by the API' });

export const DisplayName = z.string().trim().min(1).max(200).openapi({ example: 'Acme Inc.' });
