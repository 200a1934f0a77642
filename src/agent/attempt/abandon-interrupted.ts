import { type AgentState, groupsOfAttempt, type ReportedRecord, survivingGroup } from '../disk/agent-state.js';
import { describe } from './describe-attempt.js';
import { killProcessGroup } from './process-group.js';
import { errorText } from '../../lib/error-text.js';

/**
 * After a crash: an attempt that was running when the agent died has no outcome to deliver (its
 * exit status went with the agent). If its process group still runs (it is detached, so it can
 * outlive the agent), it is killed, since it would otherwise keep its GPUs with nobody to report
 * it; found by its pid record, or, when the agent died before writing one, by GANTRY_ATTEMPT_ID
 * in the processes' environment. Then, like a group that died with the agent, it is left for the
 * server to reap as lost, and marked `abandoned` here.
 */
export async function abandonInterrupted(
  interrupted: Awaited<ReturnType<AgentState['scan']>>['interrupted'],
  killGraceMs: number,
  log: (line: string) => void,
  markReported: (attemptId: string, rec: Omit<ReportedRecord, 'at'>) => Promise<void>,
): Promise<void> {
  for (const { assignment: a, pid } of interrupted) {
    let note = 'was running when the agent stopped; left for the server to reap';
    if (pid && survivingGroup(pid)) {
      log(`attempt ${describe(a)} outlived the previous agent (pid ${pid.pid}); killing its process group`);
      await killProcessGroup(pid.pid, killGraceMs).catch((err) => log(`cannot kill pid ${pid.pid}: ${errorText(err)}`));
      note = 'outlived the previous agent and was killed; left for the server to reap';
    } else if (!pid) {
      const groups = groupsOfAttempt(a.attemptId);
      for (const g of groups) await killProcessGroup(g, killGraceMs).catch((err) => log(`cannot kill group ${g}: ${errorText(err)}`));
      if (groups.length) note = `outlived the previous agent (no pid record; found ${groups.length} process group(s) by attempt id) and was killed`;
      log(`attempt ${describe(a)} ${note}`);
    } else {
      log(`attempt ${describe(a)} ${note}`);
    }
    await markReported(a.attemptId, { result: 'abandoned', note });
  }
}
