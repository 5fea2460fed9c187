import { z } from '@hono/zod-openapi';
import { Timestamp } from '../../http/openapi';
import { ResourceName } from '../names';

/** What the API says about a secret: never its value, sealed or not. */
export const SecretInfo = z
  .object({
    name: z.string(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  })
  .openapi('Secret');

export const SecretPut = z
  .strictObject({
    value: z
      .string()
      .min(1)
      .max(65536)
      .openapi({ description: 'The plaintext, 1 to 65536 characters. Stored encrypted; never returned.', example: 's3cr3t' }),
  })
  .openapi('SecretPut');

export const SecretDeleted = z
  .object({ deleted: z.literal(true), name: z.string() })
  .openapi('SecretDeleted');

export const EnvironmentSecretsParams = z.object({
  o: z.string().min(1).openapi({ description: 'Organization slug', example: 'acme' }),
  p: z.string().min(1).openapi({ description: 'Project slug', example: 'platform' }),
  envName: z.string().min(1).openapi({ description: 'Environment name', example: 'staging' }),
});

export const SecretParams = EnvironmentSecretsParams.extend({
  name: ResourceName.openapi({ description: 'Secret name', example: 'deploy-token' }),
});
