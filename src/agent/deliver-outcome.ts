/**
 * Delivering one finished attempt's outcome: its outputs (only after a clean exit), then
 * `complete`. Uploads are idempotent PUTs and `complete` is fenced by the token, so the whole
 * delivery can be repeated after any failure; `uploaded` lets a repeat skip files already sent.
 */
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import { isRetryable, StaleAttempt, type AgentClient, type OutputFile } from './agent-client.js';
import type { ExitRecord, ReportedRecord } from './agent-state.js';
import { message } from './attempt-run.js';
import { isCleanExit } from '../domain/attempt-state.js';

/** `settled`: nothing more is owed (record it); otherwise try again later. `line` says what happened. */
export type DeliveryOutcome = { settled: true; record: Omit<ReportedRecord, 'at'>; line: string } | { settled: false; line: string };

/** CompleteRequest.reason's limit. */
const MAX_REASON = 2000;

export async function deliverOutcome(
  client: AgentClient,
  a: AssignmentWire,
  exit: ExitRecord,
  outputDir: string,
  uploaded: Map<string, number>,
): Promise<DeliveryOutcome> {
  try {
    let outputs: OutputFile[] = [];
    if (isCleanExit(exit)) {
      try {
        outputs = await client.uploadOutputs(a.attemptId, a.token, outputDir, uploaded);
      } catch (err) {
        if (err instanceof StaleAttempt || isRetryable(err)) throw err;
        // The server refuses a file for good; reporting success without it would be a lie.
        exit = { ...exit, exitCode: null, reason: `output upload failed: ${message(err)} (the process exited 0)` };
      }
    }
    const res = await client.complete(a.attemptId, {
      token: a.token,
      exitCode: exit.exitCode,
      signal: exit.signal,
      reason: exit.reason === null ? null : exit.reason.slice(0, MAX_REASON),
      outputs,
    });
    return {
      settled: true,
      record: { result: res.accepted ? 'accepted' : 'duplicate', jobState: res.jobState },
      line: `reported${res.accepted ? '' : ' (already recorded)'}; job is ${res.jobState}`,
    };
  } catch (err) {
    if (err instanceof StaleAttempt) {
      return { settled: true, record: { result: 'stale', note: err.message }, line: 'outcome not recorded: no longer current' };
    }
    // An abort is the agent stopping, not the server's answer: the outcome stays owed, on disk.
    if (isRetryable(err) || (err as { name?: unknown } | null)?.name === 'AbortError') {
      return { settled: false, line: `outcome not delivered yet (${message(err)}); will retry` };
    }
    // Any other 4xx: asking again cannot change the answer.
    return { settled: true, record: { result: 'dropped', note: message(err) }, line: `outcome refused by the server, giving up on it: ${message(err)}` };
  }
}
