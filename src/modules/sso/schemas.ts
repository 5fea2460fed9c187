import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';

/**
 * An SSO provider's id: it names the provider in sign-in requests and in its
 * callback path (`/api/auth/sso/callback/<providerId>`), so URL-safe, and
 * unique across the deployment.
 */
export const ProviderId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{1,62}$/, { message: 'expects 2-63 lowercase letters, digits and dashes, starting with a letter or digit' })
  .openapi({ example: 'acme-okta' });

const DOMAIN = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$/;

/** One email domain, or several separated by commas, lowercase and without spaces. */
export const ProviderDomains = z
  .string()
  .max(1024)
  .refine((value) => value.split(',').every((domain) => DOMAIN.test(domain)), {
    message: 'expects one lowercase email domain (example.com), or several separated by commas',
  })
  .openapi({ example: 'acme.com,acme.co.uk' });

const HttpUrl = z
  .url({ protocol: /^https?$/, message: 'expects an http(s) URL' })
  .max(2048);

export const SsoOrgParams = z.object({
  id: z.string().min(1).openapi({ description: 'Organization id or slug', example: 'acme' }),
});

export const SsoProviderParams = SsoOrgParams.extend({
  providerId: z.string().min(1).max(128).openapi({ description: 'The SSO provider id', example: 'acme-okta' }),
});

export const SsoProviderCreate = z
  .strictObject({
    providerId: ProviderId,
    issuer: HttpUrl.openapi({ description: "The OpenID Provider's issuer identifier, exactly as its discovery document states it", example: 'https://acme.okta.com' }),
    domain: ProviderDomains.openapi({
      description: 'The email domain(s) this provider speaks for: it signs in addresses of these domains (subdomains included) only. Each must be the host of the registering user\'s verified address or a subdomain of it. Unique across providers.',
    }),
    clientId: z.string().min(1).max(512),
    clientSecret: z.string().min(1).max(1024).openapi({ description: 'Kept for the token exchange; never returned.' }),
    scopes: z
      .array(z.string().regex(/^[\x21\x23-\x5b\x5d-\x7e]+$/, { message: 'expects a scope token' }))
      .min(1)
      .max(32)
      .refine((scopes) => scopes.includes('openid'), { message: 'must include openid' })
      .optional()
      .openapi({ description: 'Default: openid email profile offline_access' }),
    pkce: z.boolean().default(true).openapi({ description: 'Send a PKCE challenge (S256). Default true.' }),
    endpoints: z
      .strictObject({
        authorization: HttpUrl,
        token: HttpUrl,
        jwks: HttpUrl,
        userInfo: HttpUrl.optional(),
      })
      .optional()
      .openapi({
        description:
          "The provider's endpoints, given instead of discovered. Without them the API reads the issuer's discovery document, which needs the issuer's origin in TRUSTED_ORIGINS; given endpoints must be public hosts (or trusted origins).",
      }),
  })
  .openapi('SsoProviderCreate');

/** An organization's per-provider settings (SPEC Organizations, sso-extras). */
export const SsoExtra = z
  .object({
    providerId: z.string(),
    issuer: z.string(),
    domain: z.string(),
    forceSso: z.boolean().openapi({ description: "When true, the organization's members must sign in through this provider (403 sso_required otherwise)" }),
  })
  .openapi('SsoExtra');

export const SsoExtraUpdate = z
  .strictObject({
    forceSso: z.boolean(),
  })
  .openapi('SsoExtraUpdate');

export const SsoProvider = SsoExtra.extend({
  redirectUri: z.url().openapi({ description: "The callback URL to register at the provider for this client: `<AUTH_URL>/api/auth/sso/callback/<providerId>`" }),
  createdAt: Timestamp,
}).openapi('SsoProvider');

export const SsoProviderDeleted = z
  .object({
    deleted: z.literal(true),
    providerId: z.string(),
  })
  .openapi('SsoProviderDeleted');
