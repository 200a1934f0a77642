import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import type { ExitRecord } from '../disk/agent-state.js';

/** An attempt as the agent's log names it. */
export function describe(a: AssignmentWire): string {
  return `${a.attemptId} (${a.jobId}/${a.stageName} #${a.attemptNumber})`;
}

export function describeExit(e: ExitRecord): string {
  const how = e.exitCode !== null ? `exited with code ${e.exitCode}` : e.signal !== null ? `ended by ${e.signal}` : 'did not run';
  return e.reason ? `${how} (${e.reason})` : how;
}
