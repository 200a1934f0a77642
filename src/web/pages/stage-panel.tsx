import { useState } from 'react';
import { Link } from 'react-router';
import { attemptCountText } from '../../api/contract/attempts-counted';
import type { AttemptView, JobView, StageExplanation, StageView } from '../../api/contract/job-view';
import { useExplain } from '../api/queries';
import { ProgressBar } from '../components/meter';
import { ReusedBadge } from '../components/reused-badge';
import { StateBadge } from '../components/state-badge';
import { Elapsed, RelativeTime } from '../components/time-text';
import { formatBytes, formatCpu, formatGpuRequest, formatGpus } from '../format/format-quantity';
import { formatDuration } from '../format/format-time';
import { RerunDialog } from './rerun-dialog';
import { rerunOffer } from './rerun-offer';
import { StageLogs } from './stage-logs';
import { TableHead } from '../components/table-head';
import { jobPath } from './job-path';

/** What a stage asks for, as the spec says it: "4 CPU · 16 GiB · 2× h100". */
export function describeResources(s: StageView): string {
  const r = s.resources;
  const gpu = r.gpu ? ` · ${formatGpuRequest(r.gpu, 'any GPU', ' or ')}` : '';
  const each = `${formatCpu(r.cpuMillis)} CPU · ${formatBytes(r.memoryBytes)}${gpu}`;
  // A gang (docs/gangs.md): every member takes the request on its own machine.
  return r.machines ? `${r.machines} machines × ${each}` : each;
}

/** One stage in full: why it waits (for a waiting one), where a reused one's outputs come from, its attempts, its output, and "Rerun from here". */
export function StagePanel({ job, stage }: { job: JobView; stage: StageView }) {
  const jobId = job.id;
  const waiting = stage.state === 'ready' || stage.state === 'pending';
  const explain = useExplain(jobId, stage.name, waiting);
  const latest = stage.attempts.at(-1)?.number ?? null;
  const [picked, setPicked] = useState<{ stage: string; attempt: number } | null>(null);
  const attempt = picked?.stage === stage.name ? picked.attempt : latest;
  const [rerunning, setRerunning] = useState(false);
  // A gang's member whose output is shown; rank 0 (the rendezvous master) unless picked.
  const [pickedRank, setPickedRank] = useState<{ stage: string; rank: number } | null>(null);
  const rank = pickedRank?.stage === stage.name ? pickedRank.rank : 0;
  const showRank = (r: number) => setPickedRank({ stage: stage.name, rank: r });
  const offer = rerunOffer(job, stage.name);
  return (
    <section className="panel" aria-labelledby="stage-title" data-stage-panel={stage.name}>
      <div className="panel-head">
        <div className="panel-title">
          <h2 id="stage-title">
            {stage.name} <StateBadge state={stage.state} />
            {stage.reused ? (
              <>
                {' '}
                <ReusedBadge />
              </>
            ) : null}
          </h2>
          {/* Only where the server would take it (rerun-offer.ts): a running job's is a cancel and a rerun in one. */}
          {offer ? (
            <button type="button" className="button button-small" onClick={() => setRerunning(true)}>
              {offer === 'rerun' ? 'Rerun from here' : 'Cancel and rerun from here'}
            </button>
          ) : null}
        </div>
        <div className="panel-meta">
          <span>
            pool <code>{stage.pool}</code>
          </span>
          <span>{describeResources(stage)}</span>
          {stage.needs.length ? <span>needs {stage.needs.join(', ')}</span> : null}
          <span>attempt {attemptCountText(stage) || `0/${stage.maxAttempts}`}</span>
        </div>
      </div>
      {rerunning ? <RerunDialog job={job} stage={stage.name} cancelFirst={offer === 'cancel-and-rerun'} onClose={() => setRerunning(false)} /> : null}
      {stage.reused ? <ReusedNote stage={stage} reused={stage.reused} /> : null}
      {stage.endReason ? <p className="reason">{stage.endReason}</p> : null}
      {waiting ? <Explanation stage={stage} explain={explain.data} /> : null}
      {stage.members?.length ? <GangMembers members={stage.members} rank={rank} onRank={showRank} /> : null}
      {stage.attempts.length > 0 ? (
        <div className="table-wrap">
          <table className="table attempts">
            <TableHead columns={['#', 'State', 'Machine', 'GPUs', 'Started', 'Ran', 'Exit', 'Peak memory', 'CPU time', 'Progress']} />
            <tbody>
              {stage.attempts.map((a) => (
                <tr key={a.id} className={a.number === attempt ? 'current' : undefined}>
                  <td>{a.gangRank === undefined ? a.number : `${a.number} · rank ${a.gangRank}`}</td>
                  <td>
                    <StateBadge state={a.state} title={a.reason ?? undefined} />
                  </td>
                  <td className="id">{a.machine}</td>
                  <td>{formatGpus(a)}</td>
                  <td>
                    <RelativeTime at={a.startedAt ?? a.scheduledAt} />
                  </td>
                  <td>
                    <Elapsed from={a.startedAt} to={a.finishedAt} />
                  </td>
                  <td title={a.reason ?? undefined}>{endText(a)}</td>
                  <PeakMemory a={a} request={stage.resources.memoryBytes} />
                  <td className="num">{a.cpuSeconds != null ? `${a.cpuSeconds.toFixed(1)} s` : '–'}</td>
                  <td>
                    <ProgressBar progress={a.progress} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {attempt !== null ? (
        <StageLogs
          jobId={jobId}
          stage={stage.name}
          attempts={stage.attempts}
          attempt={attempt}
          onAttempt={(n) => setPicked({ stage: stage.name, attempt: n })}
          rank={rank}
          onRank={showRank}
        />
      ) : stage.reused ? (
        <p className="muted">
          No output here: it did not run in this job. Its output is with <Link to={jobPath(stage.reused.jobId, stage.name)}>the job that ran it</Link>.
        </p>
      ) : (
        <p className="muted">No output: it has not run yet.</p>
      )}
    </section>
  );
}

/** A gang's members (docs/gangs.md), rank 0 first: each one's machine, GPUs and state, and a button that shows its output below. */
function GangMembers({ members, rank, onRank }: { members: NonNullable<StageView['members']>; rank: number; onRank: (rank: number) => void }) {
  return (
    <div className="table-wrap">
      <table className="table members" data-testid="gang-members">
        <caption>Gang of {members.length}: one member per machine</caption>
        <TableHead columns={['Rank', 'State', 'Machine', 'GPUs', 'Output']} />
        <tbody>
          {members.map((m) => (
            <tr key={m.attemptId} className={m.rank === rank ? 'current' : undefined} data-rank={m.rank}>
              <td>{m.rank}</td>
              <td>
                <StateBadge state={m.state} />
              </td>
              <td className="id">{m.machine}</td>
              <td>{formatGpus(m)}</td>
              <td>
                <button type="button" className="button button-small" disabled={m.rank === rank} onClick={() => onRank(m.rank)}>
                  {m.rank === rank ? 'shown' : 'show'}
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** Where a reused stage's outputs come from: the job (a link) and attempt that ran it, what that run took, and the files taken. */
/** The Exit cell: the exit code or signal of a process's own end; otherwise how it ended (timeout, spawn-failed, lost…), its detail on hover. */
function endText(a: AttemptView): string | number {
  if (a.endKind && a.endKind !== 'exited' && a.endKind !== 'signaled') return a.endKind;
  return a.exitCode !== null ? a.exitCode : (a.signal ?? (a.reason ? a.reason.slice(0, 40) : '–'));
}

/**
 * What an attempt's memory peaked at, measured from its cgroup when it ended (docs/containment.md),
 * with its share of the stage's request on hover: an oom-killed attempt's peak is the number to
 * raise the request past. "–" where its agent could not measure it.
 */
function PeakMemory({ a, request }: { a: AttemptView; request: number }) {
  if (a.memoryPeakBytes == null) return <td className="num muted">–</td>;
  const share = Math.round((100 * a.memoryPeakBytes) / request);
  return (
    <td
      className={`num${a.endKind === 'oom-killed' ? ' oom' : ''}`}
      data-peak-memory={a.memoryPeakBytes}
      title={`${share}% of the ${formatBytes(request)} requested`}
    >
      {formatBytes(a.memoryPeakBytes)}
    </td>
  );
}

function ReusedNote({ stage, reused }: { stage: StageView; reused: NonNullable<StageView['reused']> }) {
  const files = stage.outputs ?? [];
  const bytes = files.reduce((sum, f) => sum + f.size, 0);
  return (
    <p className="reason reason-reused" data-testid="reused-from">
      Reused: it did not run in this job. Its outputs are those of {reused.attemptId ? <code>{reused.attemptId}</code> : 'the attempt'} in job{' '}
      <Link className="id" to={jobPath(reused.jobId, stage.name)}>
        {reused.jobId}
      </Link>
      , which ran {formatDuration(reused.runSeconds * 1000)}
      {reused.gpus ? ` on ${reused.gpus} GPU${reused.gpus === 1 ? '' : 's'}` : ''}
      {files.length ? ` (${files.length} file${files.length === 1 ? '' : 's'}, ${formatBytes(bytes)})` : ''}.
    </p>
  );
}

/** Why a waiting stage waits, in the scheduler's own numbers (GET …/explain, as `gantry explain`). */
function Explanation({ stage, explain }: { stage: StageView; explain: StageExplanation | undefined }) {
  return (
    <div className="explain">
      <p className="reason">
        <strong>Why it waits:</strong> {explain?.reason ?? stage.pendingReason ?? '…'}
      </p>
      {/* A machine held for it is the reason above already; the autoscaler's reason for starting none is said beside the scheduler's. */}
      {explain?.autoscale && explain.autoscale.kind !== 'held' ? (
        <p className="autoscale-word">
          <strong>Autoscaler:</strong> {explain.autoscale.message}
        </p>
      ) : null}
      {explain?.queue ? (
        <p>
          In the <code>{explain.pool}</code> queue: {explain.queue.ahead} ahead of it, {explain.queue.waiting} waiting in all; ready since{' '}
          <RelativeTime at={stage.readySince} />.
        </p>
      ) : null}
      {explain && explain.funnel.length > 0 ? (
        <div className="table-wrap">
          <table className="table funnel">
            <caption>Machines left after each check ({explain.registered} registered)</caption>
            <tbody>
              {explain.funnel.map((f) => (
                <tr key={f.step}>
                  <td>{f.step}</td>
                  <td className="num">{f.machines}</td>
                  <td className="muted">{f.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {explain && explain.suggestions.length > 0 ? (
        <div>
          <strong>Would run now if:</strong>
          <ul>
            {explain.suggestions.map((s) => (
              <li key={s}>{s}</li>
            ))}
          </ul>
        </div>
      ) : null}
    </div>
  );
}
