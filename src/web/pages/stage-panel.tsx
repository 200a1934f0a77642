import { useState } from 'react';
import { attemptsCounted } from '../../api/contract/attempts-counted';
import type { StageExplanation, StageView } from '../../api/contract/job-view';
import { useExplain } from '../api/queries';
import { ProgressBar } from '../components/meter';
import { StateBadge } from '../components/state-badge';
import { Elapsed, RelativeTime } from '../components/time-text';
import { formatBytes, formatCpu, formatGpus } from '../format/format-quantity';
import { StageLogs } from './stage-logs';
import { TableHead } from '../components/table-head';

/** What a stage asks for, as the spec says it: "4 CPU · 16 GiB · 2× h100". */
export function describeResources(s: StageView): string {
  const r = s.resources;
  const gpu = r.gpu ? ` · ${r.gpu.count}× ${r.gpu.types.join(' or ') || 'any GPU'}` : '';
  return `${formatCpu(r.cpuMillis)} CPU · ${formatBytes(r.memoryBytes)}${gpu}`;
}

/** One stage in full: why it waits (for a waiting one), its attempts, and its output. */
export function StagePanel({ jobId, stage }: { jobId: string; stage: StageView }) {
  const waiting = stage.state === 'ready' || stage.state === 'pending';
  const explain = useExplain(jobId, stage.name, waiting);
  const latest = stage.attempts.at(-1)?.number ?? null;
  const [picked, setPicked] = useState<{ stage: string; attempt: number } | null>(null);
  const attempt = picked?.stage === stage.name ? picked.attempt : latest;
  return (
    <section className="panel" aria-labelledby="stage-title" data-stage-panel={stage.name}>
      <div className="panel-head">
        <h2 id="stage-title">
          {stage.name} <StateBadge state={stage.state} />
        </h2>
        <div className="panel-meta">
          <span>
            pool <code>{stage.pool}</code>
          </span>
          <span>{describeResources(stage)}</span>
          {stage.needs.length ? <span>needs {stage.needs.join(', ')}</span> : null}
          <span>
            attempt {attemptsCounted(stage)}/{stage.maxAttempts}
            {stage.lostUsed ? ` (+${stage.lostUsed} lost to machines)` : ''}
          </span>
        </div>
        {/* Rerun from this stage (issue 12, POST /v1/jobs/{id}/rerun, being built): its button goes here, beside the stage's name, once the route exists. */}
      </div>
      {stage.endReason ? <p className="reason">{stage.endReason}</p> : null}
      {waiting ? <Explanation stage={stage} explain={explain.data} /> : null}
      {stage.attempts.length > 0 ? (
        <div className="table-wrap">
          <table className="table attempts">
            <TableHead columns={['#', 'State', 'Machine', 'GPUs', 'Started', 'Ran', 'Exit', 'Progress']} />
            <tbody>
              {stage.attempts.map((a) => (
                <tr key={a.id} className={a.number === attempt ? 'current' : undefined}>
                  <td>{a.number}</td>
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
                  <td title={a.reason ?? undefined}>{a.exitCode !== null ? a.exitCode : a.signal ?? (a.reason ? a.reason.slice(0, 40) : '–')}</td>
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
        <StageLogs jobId={jobId} stage={stage.name} attempts={stage.attempts} attempt={attempt} onAttempt={(n) => setPicked({ stage: stage.name, attempt: n })} />
      ) : (
        <p className="muted">No output: it has not run yet.</p>
      )}
    </section>
  );
}

/** Why a waiting stage waits, in the scheduler's own numbers (GET …/explain, as `gantry explain`). */
function Explanation({ stage, explain }: { stage: StageView; explain: StageExplanation | undefined }) {
  return (
    <div className="explain">
      <p className="reason">
        <strong>Why it waits:</strong> {explain?.reason ?? stage.pendingReason ?? '…'}
      </p>
      {explain?.queue ? (
        <p>
          In the <code>{explain.pool}</code> queue: {explain.queue.ahead} ahead of it, {explain.queue.waiting} waiting in all; ready since <RelativeTime at={stage.readySince} />.
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
