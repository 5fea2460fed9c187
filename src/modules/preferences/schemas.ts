import { z } from '@hono/zod-openapi';

/** SPEC Limits: a preference value is at most 64 KB, measured as its JSON text in UTF-8 (docs/people/preferences.md). */
export const MAX_PREFERENCE_BYTES = 64 * 1024;

export const PREFERENCE_KEY_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export const PreferenceParams = z.object({
  key: z
    .string()
    .regex(PREFERENCE_KEY_PATTERN, {
      message: 'must be 1 to 128 characters: letters, digits and . _ : -, starting with a letter or digit',
    })
    .openapi({ description: 'The preference key', example: 'graph.layout' }),
});

const PreferenceValue = z.record(z.string(), z.unknown()).openapi({
  description: 'Any JSON object (not an array, string, number or null); at most 64 KB as JSON',
  example: { theme: 'dark', density: 'compact' },
});

export const UserPreference = z
  .object({ value: PreferenceValue.nullable().openapi({ description: 'The stored object; null when unset' }) })
  .openapi('UserPreference');

export const UserPreferenceUpdate = z.strictObject({ value: PreferenceValue }).openapi('UserPreferenceUpdate');
export type UserPreferenceUpdate = z.infer<typeof UserPreferenceUpdate>;
