import { z } from '@hono/zod-openapi';
import { ROLES } from '../../auth/permissions';
import { DateTimeInput, Timestamp } from '../../http/openapi';
import { ResourceName } from '../names';

const TokenFields = {
  id: z.uuid(),
  name: z.string(),
  prefix: z.string().openapi({ description: 'The readable start of the token', example: 'cpl_3kTq9ZbW' }),
  role: z.enum(ROLES),
  envName: z.string().nullable().openapi({ description: 'The pinned environment; null means all environments' }),
  cellScopes: z.array(z.string()).openapi({ description: 'Cells the token is restricted to; empty means all cells' }),
  expiresAt: Timestamp.nullable(),
  personal: z.boolean().openapi({ description: "A personal token dies with its minter's membership and never acts above the minter's role" }),
  createdAt: Timestamp,
};

export const ServiceToken = z.object(TokenFields).openapi('ServiceToken');

export const MintedServiceToken = z
  .object({
    ...TokenFields,
    token: z.string().openapi({
      description: 'The raw token. Shown once, here; only its SHA-256 is stored.',
      example: 'cpl_3kTq9ZbWc0m5Xr2LpV8yN1dQh7sJfA4e0Bd9Kx',
    }),
  })
  .openapi('MintedServiceToken');

export const ServiceTokenCreate = z
  .strictObject({
    name: z.string().trim().min(1).max(128).openapi({ example: 'ci-deployer' }),
    role: z.enum(ROLES).default('member'),
    envName: ResourceName.optional().openapi({ description: 'Pin the token to this environment' }),
    cellScopes: z.array(ResourceName).max(100).optional(),
    expiresAt: DateTimeInput.optional().openapi({ example: '2027-01-01T00:00:00.000Z' }),
    personal: z.boolean().default(false).openapi({
      description:
        "Minted by a user session only: the token is revoked when the user leaves or is removed from the organization, and never acts above the user's current role",
    }),
  })
  .openapi('ServiceTokenCreate');

export const ServiceTokenRevoked = z
  .object({ revoked: z.literal(true), id: z.uuid() })
  .openapi('ServiceTokenRevoked');

export const TokenProjectParams = z.object({
  orgId: z.string().min(1).openapi({ description: 'Organization id or slug', example: 'acme' }),
  projectId: z.string().min(1).openapi({ description: 'Project id or slug', example: 'platform' }),
});

export const TokenParams = TokenProjectParams.extend({
  id: z.uuid().openapi({ description: 'Token id' }),
});
