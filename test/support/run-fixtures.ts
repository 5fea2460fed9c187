/**
 * The action the run suites trigger: on entity type `vm` (states include
 * `running` and `failed`, its onSuccess and onFailure), a webhook trigger
 * to `url` with retries that do not wait, and a `size` parameter.
 * `trigger` fields replace the trigger's (payload, retry, auth, ...);
 * `fields` the action's.
 */
export function webhookAction(
  name: string,
  url: string,
  trigger: Record<string, unknown> = {},
  fields: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    kind: 'Action',
    name,
    entityType: 'vm',
    onSuccess: 'running',
    onFailure: 'failed',
    parameters: [{ name: 'size', type: 'string', default: 'small' }],
    trigger: {
      type: 'webhook',
      url,
      payload: { callbackUrl: '{{ run.callbackUrl }}', callbackToken: '{{ run.callbackToken }}' },
      retry: { maxAttempts: 3, initialDelayMs: 0 },
      ...trigger,
    },
    ...fields,
  };
}
