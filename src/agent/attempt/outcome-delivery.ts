/**
 * Delivering a finished attempt: the rest of its log, its outputs (only after a clean exit, and
 * only the files there are: an empty output directory costs no request), then its outcome as an
 * item of the next report. Each call is one try: uploads are idempotent PUTs and the outcome is
 * fenced by the token, so the whole delivery can be repeated after any failure (`uploaded` lets a
 * repeat skip files already sent). The runner calls again after the next heartbeat that gets
 * through, and this module alone decides when to give up (`giveUp`).
 */
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import { isCleanExit } from '../../domain/attempt-state.js';
import { isRetryable, OutputsOverLimit, StaleAttempt, type AgentClient, type OutputFile } from '../link/agent-client.js';
import type { ExitRecord, ReportedRecord } from '../disk/agent-state.js';
import { exitEnd, MAX_DETAIL } from './exit-end.js';
import type { LogTail } from './log-tail.js';
import { Undeliverable, type Reporter } from '../link/reporter.js';
import { describe } from './describe-attempt.js';
import { errorText } from '../../lib/error-text.js';

export interface DeliveryDeps {
  client: Pick<AgentClient, 'uploadOutputs'>;
  reporter: Pick<Reporter, 'complete'>;
  now: () => number;
  log: (line: string) => void;
  /** The server speaks protocol 2 or later: the outcome carries `end` (an older one refuses fields it does not know). */
  typedEnds: () => boolean;
  /** The server speaks protocol 3 or later: the outcome carries `usage`, where the attempt had cgroups to read it from. */
  sendsUsage: () => boolean;
  /** Past this, an outcome that keeps failing is given up (the server takes the attempt as lost). */
  giveUpMs: number;
}

/** What a delivery has done so far, kept by the runner across tries. */
export interface DeliveryProgress {
  /** The server has the whole log (or refused the rest for good): the outcome may go. */
  logShipped: boolean;
  /**
   * Set when the server refused part of the log, or when its head filled the cap: the files' sizes,
   * sent with the outcome so the log says what is missing (and the server knows that this agent
   * shipped the tail, where there was one: attempt-verbs.ts, markMissingLog).
   */
  logBytes?: { stdout: number; stderr: number };
  uploaded: Map<string, number>;
  /** When a try first failed; past `giveUpMs` from it the delivery is given up. */
  failingSince?: number;
}

export interface Owed {
  a: AssignmentWire;
  exit: ExitRecord;
  outputDir: string;
  /** Where its files are, for a line saying what of the log stayed there. */
  dir: string;
  tail: LogTail | null;
  progress: DeliveryProgress;
  /** Withdraws the outcome from the reporter: the server no longer wants the attempt. */
  signal: AbortSignal;
}

/**
 * `delivered`: the server answered (record it); `refused`: asking again cannot change the answer;
 * `stale`: the server no longer wants it (a 409 on its log); `given-up`: failing for too long;
 * `later`: try again after the next heartbeat that gets through. `line` says what happened.
 */
export type Delivery =
  | { kind: 'delivered' | 'refused' | 'given-up'; record: Omit<ReportedRecord, 'at'>; line: string }
  | { kind: 'stale'; detail: string }
  | { kind: 'later'; step: 'log' | 'outcome'; line: string };

/** Log, outputs, then the outcome; `reporting` is called once the log is all there and the outcome about to go. */
export async function deliverOutcome(d: DeliveryDeps, owed: Owed, reporting: () => void): Promise<Delivery> {
  // The outcome goes only once the server has the whole log: a stage that ended during an
  // outage keeps its last lines, and `succeeded` never shows a log still missing its end.
  const log = await shipLog(d, owed);
  if (log) return log.kind === 'later' ? later(d, owed, log) : log;
  reporting();
  const out = await report(d, owed);
  return out.kind === 'later' ? later(d, owed, out) : out;
}

/** Ships what is left of the log; null when shipped, or refused for good (the outcome still goes, and the machine's files keep the whole log). */
async function shipLog(d: DeliveryDeps, owed: Owed): Promise<Delivery | null> {
  const { tail, progress } = owed;
  if (!tail || progress.logShipped) return null;
  try {
    await tail.drain();
    progress.logShipped = true;
    if (tail.capped) progress.logBytes = tail.sizes();
    return null;
  } catch (err) {
    if (err instanceof StaleAttempt) return { kind: 'stale', detail: 'stale: ' + err.message };
    if (isRetryable(err) || isAbort(err)) return { kind: 'later', step: 'log', line: `log not shipped yet (${errorText(err)}); the outcome waits for it` };
    d.log(`attempt ${describe(owed.a)}: ${tail.unshipped()} bytes of its log were refused by the server (${errorText(err)}); they stay in ${owed.dir}`);
    progress.logShipped = true;
    // The outcome carries the files' sizes: the server's log then says what it lacks.
    progress.logBytes = tail.sizes();
    return null;
  }
}

async function report(d: DeliveryDeps, owed: Owed): Promise<Delivery> {
  const { a } = owed;
  let exit = owed.exit;
  try {
    let outputs: OutputFile[] = [];
    if (isCleanExit(exit)) {
      try {
        outputs = await d.client.uploadOutputs(a.attemptId, a.token, owed.outputDir, owed.progress.uploaded, a.limits?.outputs);
      } catch (err) {
        if (err instanceof StaleAttempt || isRetryable(err)) throw err;
        if (err instanceof OutputsOverLimit) exit = { ...exit, kind: 'outputs-failed', exitCode: null, reason: `${err.message} (the process exited 0)` };
        // The server refuses a file for good; reporting success without it would be a lie.
        else exit = { ...exit, kind: 'outputs-failed', exitCode: null, reason: `output upload failed: ${errorText(err)} (the process exited 0)` };
      }
    }
    const end = exitEnd(exit);
    const logBytes = owed.progress.logBytes;
    const res = await d.reporter.complete(
      {
        attemptId: a.attemptId,
        token: a.token,
        exitCode: exit.exitCode,
        signal: exit.signal,
        reason: exit.reason === null ? null : exit.reason.slice(0, MAX_DETAIL),
        ...(d.typedEnds() && end ? { end } : {}),
        outputs,
        ...(logBytes ? { logBytes } : {}),
        ...(d.sendsUsage() && exit.usage ? { usage: exit.usage } : {}),
      },
      owed.signal,
    );
    const jobState = res.jobState !== undefined ? { jobState: res.jobState } : {};
    switch (res.result) {
      case 'ok':
        return { kind: 'delivered', record: { result: 'accepted', ...jobState }, line: `reported; job is ${res.jobState ?? 'unknown'}` };
      case 'duplicate':
        return { kind: 'delivered', record: { result: 'duplicate', ...jobState }, line: `reported (already recorded); job is ${res.jobState ?? 'unknown'}` };
      case 'stale':
        return { kind: 'delivered', record: { result: 'stale', note: res.message ?? 'no longer current' }, line: 'outcome not recorded: no longer current' };
      default:
        // `refused`: asking again cannot change the answer.
        return {
          kind: 'refused',
          record: { result: 'dropped', note: res.message ?? 'refused' },
          line: `outcome refused by the server, giving up on it: ${res.message ?? 'no reason given'}`,
        };
    }
  } catch (err) {
    if (err instanceof StaleAttempt)
      return { kind: 'delivered', record: { result: 'stale', note: err.message }, line: 'outcome not recorded: no longer current' };
    // The reporter gave it up by the same rule (its own failing time): one answer for both.
    if (err instanceof Undeliverable) return giveUp(err.failingForMs);
    // An abort is the agent stopping (or withdrawing it), not the server's answer: the outcome stays owed, on disk.
    if (isRetryable(err) || isAbort(err)) return { kind: 'later', step: 'outcome', line: `outcome not delivered yet (${errorText(err)}); will retry` };
    // Any other 4xx: asking again cannot change the answer.
    return { kind: 'refused', record: { result: 'dropped', note: errorText(err) }, line: `outcome refused by the server, giving up on it: ${errorText(err)}` };
  }
}

/**
 * The one give-up rule. Owed outcomes keep the attempt listed in heartbeats (its lease renewed), so
 * a delivery that can never succeed would hold its stage forever: past `giveUpMs` of failing it is
 * given up, no longer listed, and the server marks the attempt lost and runs the stage again.
 */
function later(d: DeliveryDeps, owed: Owed, failed: Extract<Delivery, { kind: 'later' }>): Delivery {
  const now = d.now();
  const failingFor = now - (owed.progress.failingSince ??= now);
  return failingFor > d.giveUpMs ? giveUp(failingFor) : failed;
}

function giveUp(failingForMs: number): Delivery {
  const s = Math.round(failingForMs / 1000);
  return {
    kind: 'given-up',
    record: { result: 'dropped', note: `outcome undeliverable for ${s} s` },
    line: `giving up delivering its outcome after ${s} s; the server will take it as lost`,
  };
}

function isAbort(err: unknown): boolean {
  return (err as { name?: unknown } | null)?.name === 'AbortError';
}
