/**
 * How a run ends, under the names its callers have long imported (the hosts'
 * reaper and dead-letter consumer, the test suites). Every run state change
 * lives in ./transitions.ts; this file only hands those verbs on.
 */
export {
  cancelRun,
  completeRun,
  failDeadLettered,
  reapTimedOutRuns,
  type CallbackResult,
  type RunRow,
  type Transition,
} from './transitions';
