import { z } from '@hono/zod-openapi';

/**
 * The vocabulary trigger definitions are written in (DECISIONS §4), shared by
 * every trigger kind: credentials that may be literals or secret references,
 * template strings, header names. Strings may carry `{{ ... }}` templates;
 * their references are checked when a run is triggered and again when it is
 * delivered, because the context (parameters, secrets, the entity) only
 * exists then.
 */

/** `{{ secrets.<name> }}`, and nothing else. */
export const SECRET_REFERENCE = /^\{\{\s*secrets\.[A-Za-z0-9][A-Za-z0-9._:/-]*\s*\}\}$/;

/** What a response shows in place of a literal credential (docs/decisions.md, Actions). */
export const REDACTED = '[redacted]';

/**
 * A credential: a literal or a template. Sending back the redaction marker a
 * GET showed would store the marker as the credential, so it is refused.
 */
export const Credential = z
  .string()
  .min(1)
  .max(8192)
  .refine((value) => value !== REDACTED, {
    message: `"${REDACTED}" is what a response shows for a literal credential: send the credential itself, or a {{ secrets.<name> }} reference`,
  })
  .openapi({ description: 'A literal, or a `{{ secrets.<name> }}` reference (recommended)', example: '{{ secrets.deploy-token }}' });

export const SecretReference = z
  .string()
  .regex(SECRET_REFERENCE, { message: 'must be a secret reference: {{ secrets.<name> }}' })
  .openapi({ example: '{{ secrets.webhook-signing }}' });

/** An HTTP header name (RFC 9110 token). */
export const HeaderName = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: 'must be an HTTP header name' });

export const TemplateString = z.string().max(8192);

/**
 * A credential as a response may show it: one made only of templates (a
 * `{{ secrets.x }}` reference, or a value interpolated per run) holds no
 * secret itself and is shown; anything else is a literal and is redacted.
 */
export function redactCredential(value: string): string {
  const showable = SECRET_REFERENCE.test(value) || value.replace(/\{\{[^{}]*\}\}/g, '').trim() === '';
  return showable ? value : REDACTED;
}
