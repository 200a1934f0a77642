// Mirrors the domain's terminal sets; the CLI reads only the wire contract, where states are strings.
const TERMINAL_JOB = new Set(['succeeded', 'failed', 'canceled']);
const TERMINAL_STAGE = new Set(['succeeded', 'failed', 'canceled', 'skipped']);

export function isTerminalJobState(state: string): boolean {
  return TERMINAL_JOB.has(state);
}

export function isTerminalStageState(state: string): boolean {
  return TERMINAL_STAGE.has(state);
}
