/**
 * The Cellplane SDK: `createClient({ baseUrl, token })`, typed for every
 * route of the API (docs/sdk.md).
 */
export { createClient, sleep, TERMINAL_RUN_STATUSES } from './client';
export type { CellplaneClient, ClientOptions, Data, EnvRef, ListPath, Schemas, paths } from './client';
export { CellplaneError } from './errors';
export type { ErrorDetail } from './errors';
export type { ChangeStreamOptions, StreamEvent } from './stream';
