import type { ContentfulStatusCode } from 'hono/utils/http-status';

/**
 * Every error the API returns, by stable code (DECISIONS §7). The handler maps
 * a code to its status; nothing else decides a status for an error.
 */
export const ERROR_STATUS = {
  validation_failed: 400,
  /** Answered by the Node host for a request its HTTP parser refuses (src/node/client-errors.ts). */
  malformed_request: 400,
  invalid_json: 400,
  /** The client closed the connection before its request was read: answered to nobody, logged at info. */
  request_aborted: 400,
  environment_not_found: 400,
  default_environment_protected: 400,
  invalid_state: 400,
  unknown_metric: 400,
  type_mismatch: 400,
  invalid_reference: 400,
  unknown_reference: 400,
  outbound_url_refused: 400,
  /** The last owner of an organization cannot be demoted, removed or leave (SPEC Organizations). */
  last_owner: 400,
  unauthorized: 401,
  invalid_signature: 401,
  invalid_callback_token: 401,
  forbidden: 403,
  cell_scope_violation: 403,
  org_suspended: 403,
  /** A member of an organization forcing SSO, signed in another way (DECISIONS §8). */
  sso_required: 403,
  /** A cookie-authenticated write from an origin that is neither the API's own nor in TRUSTED_ORIGINS (CSRF). */
  origin_not_trusted: 403,
  not_found: 404,
  already_exists: 409,
  installation_claimed: 409,
  still_referenced: 409,
  transition_not_allowed: 409,
  constraint_violation: 409,
  cardinality_violation: 409,
  membership_derived: 409,
  action_unavailable: 409,
  run_not_cancellable: 409,
  run_not_completable: 409,
  resync_required: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  idempotency_key_reused: 422,
  rate_limited: 429,
  /** Answered by the Node host for a request head over 16 KiB (src/node/client-errors.ts). */
  headers_too_large: 431,
  internal: 500,
  not_implemented: 501,
  /** The code host (GitHub) failed or could not be reached while a request needed it. */
  codehost_unavailable: 502,
  codehost_not_configured: 503,
  stream_limit_reached: 503,
} as const satisfies Record<string, ContentfulStatusCode>;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface ErrorDetail {
  path: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: ErrorDetail[],
  ) {
    super(message);
    this.name = 'ApiError';
  }

  get status(): ContentfulStatusCode {
    return ERROR_STATUS[this.code];
  }

  toBody(): { error: string; code: ErrorCode; details?: ErrorDetail[] } {
    return this.details ? { error: this.message, code: this.code, details: this.details } : { error: this.message, code: this.code };
  }
}

export const notFound = (what: string) => new ApiError('not_found', `${what} not found`);
