import type { RunPorts } from '../../runs/engine';
import { moveEntityState } from '../entities/state-move';
import { resolveSecrets } from '../secrets/service';

/**
 * What the run engine takes from the modules (ARCHITECTURE "Runs: trigger
 * kinds"): src/runs/ imports no module, so the hosts hand this to
 * createRunEngine, and this module's verbs pass it along on requests.
 */
export const runPorts: RunPorts = { resolveSecrets, moveEntityState };
