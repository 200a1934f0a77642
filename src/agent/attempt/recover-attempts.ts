import { lstatSync } from 'node:fs';
import type { AgentState, ExitRecord, ReportedRecord } from '../disk/agent-state.js';
import { groupsOfAttempt, survivingGroup } from '../disk/agent-state.js';
import { abandonInterrupted } from './abandon-interrupted.js';
import { AttemptRunner, attemptIdentity, type RunnerDeps } from './attempt-runner.js';
import { describe } from './describe-attempt.js';
import { ended, readExitStatus } from './process-runner.js';
import { errorText } from '../../lib/error-text.js';

/**
 * What a previous run of the agent left behind, taken over: an attempt still running under its
 * shim is re-attached to (the previous agent stopped: SIGTERM, an upgrade, a crash; the work did
 * not), one that ended while no agent watched is owed (its shim wrote how), one that cannot be
 * followed is abandoned (abandon-interrupted.ts). One taken over keeps the user it ran as (the
 * owner of its work/: attempt-users.ts). Returns the runners; the agent tracks them.
 */
export async function recoverAttempts(state: AgentState, d: RunnerDeps): Promise<AttemptRunner[]> {
  const runners: AttemptRunner[] = [];
  const { finished, interrupted, incomplete, broken } = await state.scan();
  for (const b of broken) d.log(`cannot read the record of attempt ${b.attemptId}: ${b.error}; leaving it`);
  // Died while creating it: nothing ran. Removed, so that the server's resend (it was never acknowledged) runs it.
  for (const id of incomplete) await state.removeAttempt(id).catch((e) => d.log(`cannot remove ${id}: ${errorText(e)}`));
  const markReported = (attemptId: string, rec: Omit<ReportedRecord, 'at'>) =>
    state
      .markReported(attemptId, { ...rec, at: new Date(d.now()).toISOString() })
      .catch((err) => d.log(`cannot record that ${attemptId} is settled: ${errorText(err)}`));
  // An attempt taken over keeps the user it ran as until it is settled, before its runner can settle it.
  const adopt = (attemptId: string, work: string) => {
    const owner = lstatSync(work, { throwIfNoEntry: false })?.uid;
    try {
      if (owner !== undefined) d.users.adopt(attemptId, owner);
    } catch (err) {
      d.log(`attempt ${attemptId}: ${errorText(err)}`);
    }
  };
  const lost: typeof interrupted = [];
  for (const it of interrupted) {
    const { assignment: a, pid } = it;
    const paths = state.paths(a.attemptId);
    if (pid && survivingGroup(pid)) {
      adopt(a.attemptId, paths.work);
      runners.push(AttemptRunner.reattach(a, d, pid.pid, paths, pid.at));
      continue;
    }
    // The previous agent died between the spawn and recording the pid: the group is found by the
    // attempt id in its processes' environment, and led by the shim (its pid is the group's id).
    const found = pid ? [] : groupsOfAttempt(a.attemptId);
    if (found.length === 1) {
      adopt(a.attemptId, paths.work);
      runners.push(AttemptRunner.reattach(a, d, found[0]!, paths));
      continue;
    }
    const status = pid ? readExitStatus(paths.status) : null;
    if (status) {
      const exit: ExitRecord = { ...ended(status, null), finishedAt: new Date(d.now()).toISOString(), attempt: attemptIdentity(a) };
      await state.writeExit(a.attemptId, exit);
      finished.push({ assignment: a, exit });
      continue;
    }
    lost.push(it);
  }
  await abandonInterrupted(lost, d.settings().killGraceMs, d.log, markReported);
  for (const { assignment: a, exit } of finished) {
    if (exit.dropped) {
      await markReported(a.attemptId, { result: 'dropped', note: exit.dropped });
      continue;
    }
    d.log(`attempt ${describe(a)} finished while the agent was down; reporting it`);
    const paths = state.paths(a.attemptId);
    adopt(a.attemptId, paths.work);
    // Where the server's copy of its log ends is asked first: it may have taken some before the crash.
    runners.push(AttemptRunner.owed(a, d, paths, exit));
  }
  return runners;
}
