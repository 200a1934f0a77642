import { Link } from 'react-router';
import type { HeldAttemptView } from '../../api/contract/held-attempt-view';
import type { MachineView } from '../../api/contract/job-view';
import { useHeldAttempts, useMachines } from '../api/queries';
import { ContainmentCell } from '../components/containment-cell';
import { EmptyState, ErrorNote } from '../components/empty-state';
import { Meter, ProgressBar } from '../components/meter';
import { StateBadge } from '../components/state-badge';
import { Elapsed, RelativeTime } from '../components/time-text';
import { formatBytes, formatCpu, formatGpuPlace } from '../format/format-quantity';
import { gpuClass } from '../format/gpu-use';
import { gpusUsed, gpuUseText } from '../../api/contract/gpu-use';
import { TableHead } from '../components/table-head';

/** Every machine: alive or not, taking work or not, what it has and holds, what its agent enforces, and what runs on it. Live. */
export function MachinesPage() {
  const machines = useMachines();
  const held = useHeldAttempts();
  const byMachine = new Map<string, HeldAttemptView[]>();
  for (const a of held.data ?? []) byMachine.set(a.machineId, [...(byMachine.get(a.machineId) ?? []), a]);
  return (
    <section>
      <div className="page-head">
        <h1>Machines</h1>
        {machines.data ? (
          <p className="muted">
            {machines.data.filter((m) => m.health === 'ready').length} of {machines.data.length} ready · {held.data?.length ?? 0} attempts running
          </p>
        ) : null}
      </div>
      {machines.error ? <ErrorNote error={machines.error} retry={() => void machines.refetch()} /> : null}
      {held.error ? <ErrorNote error={held.error} retry={() => void held.refetch()} /> : null}
      {machines.data && machines.data.length === 0 ? (
        <EmptyState title="No machine has joined.">
          Start an agent on each machine: <code>gantry agent --server URL --token-file JOIN_TOKEN_FILE</code> (<code>gantry token create --kind join</code>{' '}
          makes one); <code>gantry up</code> starts local ones.
        </EmptyState>
      ) : null}
      {machines.data && machines.data.length > 0 ? (
        <div className="table-wrap">
          <table className="table machines">
            <TableHead columns={['Machine', 'Health', 'Scheduling', 'CPU', 'Memory', 'GPUs', 'Contained', 'Running here']} />
            <tbody>
              {machines.data.map((m) => (
                <MachineRow key={m.id} m={m} attempts={byMachine.get(m.id) ?? []} />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}

function MachineRow({ m, attempts }: { m: MachineView; attempts: HeldAttemptView[] }) {
  return (
    <tr data-machine={m.name}>
      <td>
        <div className="id machine-name">{m.name}</div>
        <div className="muted small">
          {m.region ?? 'no region'}
          {Object.entries(m.labels).map(([k, v]) => (
            <span key={k} className="label">
              {k}={v}
            </span>
          ))}
        </div>
      </td>
      <td>
        <StateBadge state={m.health} />
        {/* Heartbeats are not events: a ready machine's last one would only look older and older here. A silent one's is the time it went quiet. */}
        {m.health !== 'ready' ? (
          <div className="muted small">
            last heard <RelativeTime at={m.lastHeartbeatAt} />
          </div>
        ) : null}
      </td>
      <td>
        <StateBadge state={m.scheduling} />
      </td>
      <Allocated what="CPU" used={m.allocated.cpuMillis} total={m.cpuMillis} format={formatCpu} />
      <Allocated what="memory" used={m.allocated.memoryBytes} total={m.memoryBytes} format={formatBytes} />
      <td>
        {m.gpus.length ? (
          <>
            <span className="gpus" aria-label={`${gpusUsed(m)} of ${m.gpus.length} GPUs used`}>
              {m.gpus.map((g) => (
                <span key={g.index} className={`gpu${gpuClass(g)}`} title={`GPU ${g.index}: ${g.name}, ${gpuUseText(g)}`}>
                  {g.index}
                </span>
              ))}
            </span>
            <div className="small">
              {m.gpus[0]!.type}
              {m.gpusDeclared ? <span className="muted"> (declared)</span> : null}
            </div>
          </>
        ) : (
          <span className="muted">none</span>
        )}
      </td>
      <ContainmentCell containment={m.containment} />
      <td>
        {attempts.length === 0 ? (
          <span className="muted">idle</span>
        ) : (
          <ul className="running">
            {attempts.map((a) => (
              <li key={a.attemptId}>
                {a.jobId ? (
                  <Link to={`/jobs/${encodeURIComponent(a.jobId)}?stage=${encodeURIComponent(a.stage ?? '')}`}>
                    {a.jobName}/{a.stage}
                  </Link>
                ) : (
                  <span className="muted">another team's stage</span>
                )}{' '}
                {a.state !== 'running' ? <StateBadge state={a.state} /> : null}
                <span className="muted small">
                  {' '}
                  #{a.number}
                  {a.gpus.length ? ` · ${formatGpuPlace(a)}` : ''} · {formatCpu(a.cpuMillis)} CPU · <Elapsed from={a.startedAt ?? a.scheduledAt} />
                </span>
                {a.progress ? <ProgressBar progress={a.progress} /> : null}
              </li>
            ))}
          </ul>
        )}
      </td>
    </tr>
  );
}

/** A cell: how much of a machine's CPU or memory attempts hold, as a bar and "2 / 8". */
function Allocated({ what, used, total, format }: { what: string; used: number; total: number; format: (n: number) => string }) {
  return (
    <td>
      <Meter value={used} max={total} label={`${what} ${format(used)} of ${format(total)} allocated`} />
      <div className="small">
        {format(used)} / {format(total)}
      </div>
    </td>
  );
}
