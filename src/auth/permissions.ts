/**
 * Roles and what they may do (DECISIONS §5). SPEC names the eight
 * `resource:verb` permissions; `org:manage` is this implementation's name for
 * the organization-level powers DECISIONS gives admins (member management,
 * creating projects), and `org:delete` the one only owners hold.
 */
export const ROLES = ['viewer', 'member', 'admin', 'owner'] as const;
export type Role = (typeof ROLES)[number];

export const PERMISSIONS = [
  'catalog:read',
  'catalog:write',
  'data:read',
  'data:write',
  'graph:read',
  'graph:write',
  'graph:manage',
  'tokens:manage',
  'org:manage',
  'org:delete',
] as const;
export type Permission = (typeof PERMISSIONS)[number];

const VIEWER: Permission[] = ['catalog:read', 'data:read', 'graph:read'];
const MEMBER: Permission[] = [...VIEWER, 'data:write', 'graph:write'];
const ADMIN: Permission[] = [...MEMBER, 'catalog:write', 'graph:manage', 'tokens:manage', 'org:manage'];
const OWNER: Permission[] = [...ADMIN, 'org:delete'];

export const ROLE_PERMISSIONS: Record<Role, ReadonlySet<Permission>> = {
  viewer: new Set(VIEWER),
  member: new Set(MEMBER),
  admin: new Set(ADMIN),
  owner: new Set(OWNER),
};

export const roleAllows = (role: Role, permission: Permission): boolean => ROLE_PERMISSIONS[role].has(permission);

/** True when `role` holds every permission of `other` (a minter may not mint above itself). */
export const roleCovers = (role: Role, other: Role): boolean => ROLES.indexOf(role) >= ROLES.indexOf(other);
