export * from './tenancy';
export * from './catalog';
export * from './runtime';
export * from './actions';
export * from './runs';
export * from './rate-limits';
export * from './people';
export * from './codehost';
