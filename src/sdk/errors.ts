/**
 * The one error the SDK throws for an answer that is not a success: the
 * API's `{ error, code, details }` with the status and the request id, so a
 * caller can branch on `code` and quote `requestId` to an operator. A
 * request that never got an answer (DNS, refused connection, abort) is a
 * CellplaneError too, with status 0 and code `network_error`.
 */
export interface ErrorDetail {
  path?: string;
  message: string;
  [key: string]: unknown;
}

export class CellplaneError extends Error {
  override readonly name = 'CellplaneError';
  /** The HTTP status; 0 when no answer arrived. */
  readonly status: number;
  /** The API's machine-readable code (`not_found`, `validation_failed`, …), or `network_error`. */
  readonly code: string;
  readonly details: ErrorDetail[] | undefined;
  /** `X-Request-Id` of the answer: the server logged the request under it. */
  readonly requestId: string | undefined;
  /** The method and path of the request, for messages. */
  readonly request: { method: string; url: string };
  /** The body as received, when it was not the API's error shape (a proxy's HTML page, say). */
  readonly body: unknown;

  constructor(init: {
    status: number;
    code: string;
    message: string;
    details?: ErrorDetail[];
    requestId?: string;
    request: { method: string; url: string };
    body?: unknown;
    cause?: unknown;
  }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.details = init.details;
    this.requestId = init.requestId;
    this.request = init.request;
    this.body = init.body;
  }

  /** Reads an error answer (its body not yet consumed). */
  static async fromResponse(response: Response, request: { method: string; url: string }): Promise<CellplaneError> {
    const text = await response.text().catch(() => '');
    let body: unknown = text === '' ? undefined : text;
    try {
      body = text === '' ? undefined : JSON.parse(text);
    } catch {
      // not JSON: kept as text
    }
    return CellplaneError.fromBody(response, body, request);
  }

  /** An error answer whose body has been read already (JSON parsed, or text). */
  static fromBody(response: Response, body: unknown, request: { method: string; url: string }): CellplaneError {
    const shaped = isApiError(body) ? body : undefined;
    return new CellplaneError({
      status: response.status,
      code: shaped?.code ?? `http_${response.status}`,
      message: shaped?.error ?? `${request.method} ${request.url} answered ${response.status} ${response.statusText}`.trim(),
      details: shaped && Array.isArray(shaped.details) ? (shaped.details as ErrorDetail[]) : undefined,
      requestId: response.headers.get('x-request-id') ?? undefined,
      request,
      body,
    });
  }

  static network(request: { method: string; url: string }, cause: unknown): CellplaneError {
    const reason = cause instanceof Error ? (cause.cause instanceof Error ? cause.cause.message : cause.message) : String(cause);
    return new CellplaneError({
      status: 0,
      code: 'network_error',
      message: `${request.method} ${request.url} got no answer: ${reason}`,
      request,
      cause,
    });
  }
}

function isApiError(body: unknown): body is { error: string; code: string; details?: unknown } {
  return typeof body === 'object' && body !== null && typeof (body as { error?: unknown }).error === 'string' && typeof (body as { code?: unknown }).code === 'string';
}
