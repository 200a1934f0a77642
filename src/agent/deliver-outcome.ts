/**
 * Delivering one finished attempt's outcome: its outputs (only after a clean exit, and only the
 * files there are: an empty output directory costs no request), then the outcome as an item of
 * the next report. Uploads are idempotent PUTs and the outcome is fenced by the token, so the whole
 * delivery can be repeated after any failure; `uploaded` lets a repeat skip files already sent.
 */
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import { isRetryable, StaleAttempt, type AgentClient, type OutputFile } from './agent-client.js';
import type { ExitRecord, ReportedRecord } from './agent-state.js';
import { message } from './attempt-run.js';
import { Undeliverable, type Reporter } from './reporter.js';
import { isCleanExit } from '../domain/attempt-state.js';
import { exitEnd, MAX_DETAIL } from './exit-end.js';

/** `settled`: nothing more is owed (record it); otherwise try again later. `line` says what happened. */
export type DeliveryOutcome = { settled: true; record: Omit<ReportedRecord, 'at'>; line: string } | { settled: false; line: string };


export async function deliverOutcome(
  client: AgentClient,
  reporter: Reporter,
  a: AssignmentWire,
  exit: ExitRecord,
  outputDir: string,
  uploaded: Map<string, number>,
  /** Withdraws the outcome from the reporter: the agent stopped caring about the attempt. */
  signal?: AbortSignal,
  /** The log files' sizes, when part of the log could not be shipped (see CompleteRequest.logBytes). */
  logBytes?: { stdout: number; stderr: number },
  /** The server speaks protocol 2 or later: the outcome carries `end` (an older one refuses fields it does not know). */
  typedEnds = false,
): Promise<DeliveryOutcome> {
  try {
    let outputs: OutputFile[] = [];
    if (isCleanExit(exit)) {
      try {
        outputs = await client.uploadOutputs(a.attemptId, a.token, outputDir, uploaded);
      } catch (err) {
        if (err instanceof StaleAttempt || isRetryable(err)) throw err;
        // The server refuses a file for good; reporting success without it would be a lie.
        exit = { ...exit, kind: 'outputs-failed', exitCode: null, reason: `output upload failed: ${message(err)} (the process exited 0)` };
      }
    }
    const end = exitEnd(exit);
    const res = await reporter.complete(
      {
        attemptId: a.attemptId,
        token: a.token,
        exitCode: exit.exitCode,
        signal: exit.signal,
        reason: exit.reason === null ? null : exit.reason.slice(0, MAX_DETAIL),
        ...(typedEnds && end ? { end } : {}),
        outputs,
        ...(logBytes ? { logBytes } : {}),
      },
      signal,
    );
    const jobState = res.jobState !== undefined ? { jobState: res.jobState } : {};
    switch (res.result) {
      case 'ok':
        return { settled: true, record: { result: 'accepted', ...jobState }, line: `reported; job is ${res.jobState ?? 'unknown'}` };
      case 'duplicate':
        return { settled: true, record: { result: 'duplicate', ...jobState }, line: `reported (already recorded); job is ${res.jobState ?? 'unknown'}` };
      case 'stale':
        return { settled: true, record: { result: 'stale', note: res.message ?? 'no longer current' }, line: 'outcome not recorded: no longer current' };
      default:
        // `refused`: asking again cannot change the answer.
        return {
          settled: true,
          record: { result: 'dropped', note: res.message ?? 'refused' },
          line: `outcome refused by the server, giving up on it: ${res.message ?? 'no reason given'}`,
        };
    }
  } catch (err) {
    if (err instanceof StaleAttempt) {
      return { settled: true, record: { result: 'stale', note: err.message }, line: 'outcome not recorded: no longer current' };
    }
    // Owed outcomes keep the attempt listed in heartbeats (its lease renewed), so one that can
    // never be delivered would hold its stage forever: past the limit the server takes it as lost.
    if (err instanceof Undeliverable) {
      return {
        settled: true,
        record: { result: 'dropped', note: `outcome undeliverable for ${Math.round(err.failingForMs / 1000)} s` },
        line: `giving up delivering its outcome after ${Math.round(err.failingForMs / 1000)} s; the server will take it as lost`,
      };
    }
    // An abort is the agent stopping (or withdrawing it), not the server's answer: the outcome stays owed, on disk.
    if (isRetryable(err) || (err as { name?: unknown } | null)?.name === 'AbortError') {
      return { settled: false, line: `outcome not delivered yet (${message(err)}); will retry` };
    }
    // Any other 4xx: asking again cannot change the answer.
    return { settled: true, record: { result: 'dropped', note: message(err) }, line: `outcome refused by the server, giving up on it: ${message(err)}` };
  }
}
