import { useSearchParams } from 'react-router';
import type { PoolView, PoolWaitReason } from '../../api/contract/pool-view';
import { useHeldAttempts, usePoolHistory, usePools } from '../api/queries';
import { EmptyState, ErrorNote } from '../components/empty-state';
import { LineChart } from '../components/line-chart';
import { Meter } from '../components/meter';
import { useNow } from '../components/use-now';
import { formatBytes, formatCpu, formatShare } from '../format/format-quantity';
import { formatDuration } from '../format/format-time';
import { poolNames, seriesOf } from './pool-series';
import { AutoscaleSection } from './autoscale-section';

/** What each wait reason means and what usually helps (docs/scheduling.md, "Checks"). */
const REASONS: Record<string, { tone: 'ok' | 'busy' | 'never' | 'quota'; means: string }> = {
  placeable: { tone: 'ok', means: 'a machine has room now: the next scheduler pass places them' },
  quota: { tone: 'quota', means: 'their team is at its quota: they wait for its own work to end (gantry team show)' },
  'quota-never': { tone: 'never', means: "they ask for more than their team's whole quota: they never run until the quota is raised (gantry team set)" },
  'gpu-busy': { tone: 'busy', means: 'every GPU that fits is in use: they wait for one to free, for preemption, or for more machines' },
  'cpu-busy': { tone: 'busy', means: 'the machines that fit have no CPU free' },
  'memory-busy': { tone: 'busy', means: 'the machines that fit have no memory free' },
  'gpu-share': { tone: 'busy', means: "CPU stages allowed on GPU machines keep out of the free GPUs' share of CPU and memory" },
  'gpu-type': { tone: 'never', means: 'no machine has this GPU type: nothing will run them until one joins' },
  'gpu-total': { tone: 'never', means: 'no machine has that many GPUs of the type' },
  'gpu-memory': {
    tone: 'never',
    means: 'no machine has GPUs known to have the GPU memory they ask for (a GPU of unknown memory takes no stage that bounds it)',
  },
  'cpu-total': { tone: 'never', means: 'no machine has that many CPUs' },
  'memory-total': { tone: 'never', means: 'no machine has that much memory' },
  'gpu-machine': { tone: 'never', means: 'CPU stages keep off GPU machines (unless placement.allowGpuMachines)' },
  region: { tone: 'never', means: 'no machine is in the region they ask for' },
  labels: { tone: 'never', means: 'no machine has the labels they ask for' },
  'gang-machines': {
    tone: 'never',
    means: 'gangs (resources.machines): too few machines could run a member, or not that many with one value of their sameLabel, even idle',
  },
  'not-ready': { tone: 'busy', means: 'the machines that fit are suspect or lost' },
  'not-eligible': { tone: 'busy', means: 'the machines that fit are cordoned or draining' },
  'no-machines': { tone: 'never', means: 'no machine has joined' },
};

const WINDOWS = [
  { key: '15m', ms: 15 * 60_000, label: '15 min' },
  { key: '1h', ms: 3_600_000, label: '1 h' },
  { key: '6h', ms: 6 * 3_600_000, label: '6 h' },
  { key: '24h', ms: 24 * 3_600_000, label: '24 h' },
];

/**
 * Queues and capacity by pool, on one screen: how many stages wait in each pool and for how long,
 * why (grouped by reason, with the scheduler's words), what the pool's machines hold, and the
 * same over time. "GPU stages queued for hours while the CPU cluster sits idle" reads off it.
 */
export function PoolsPage() {
  const pools = usePools();
  // Read for its side: resources held by attempts being stopped free without an event (queries.ts).
  useHeldAttempts();
  const [params, setParams] = useSearchParams();
  const win = WINDOWS.find((w) => w.key === params.get('window')) ?? WINDOWS[1]!;
  return (
    <section>
      <div className="page-head">
        <div>
          <h1>Pools</h1>
          <p className="muted subtitle">
            Each pool is a queue: a stage waits in the pool of what it asks for (cpu, or gpu:TYPE) until a machine serving it has room.
          </p>
        </div>
      </div>
      {pools.error ? <ErrorNote error={pools.error} retry={() => void pools.refetch()} /> : null}
      {pools.data && pools.data.pools.length === 0 ? (
        <EmptyState title="No pools yet: no machine has joined and nothing waits.">Start an agent (gantry agent), or gantry up.</EmptyState>
      ) : null}
      <div className="pool-grid">
        {pools.data?.pools.map((p) => (
          <PoolCard key={p.pool} pool={p} at={pools.data.at} />
        ))}
      </div>
      <AutoscaleSection />
      <div className="page-head charts-head">
        <h2>Over time</h2>
        <div className="segmented" role="group" aria-label="time window">
          {WINDOWS.map((w) => (
            <button
              key={w.key}
              type="button"
              className={w === win ? 'on' : undefined}
              aria-pressed={w === win}
              onClick={() => setParams({ window: w.key }, { replace: true })}
            >
              {w.label}
            </button>
          ))}
        </div>
      </div>
      <PoolCharts windowMs={win.ms} />
    </section>
  );
}

function PoolCard({ pool: p, at }: { pool: PoolView; at: number }) {
  const now = useNow();
  // The oldest wait grows with the clock between reads.
  const oldest = p.oldestWaitSeconds === null ? null : p.oldestWaitSeconds * 1000 + Math.max(0, now - at);
  return (
    <article className={`pool-card${p.queued ? ' waiting' : ''}`} data-pool={p.pool} aria-labelledby={`pool-${p.pool}`}>
      <header>
        <h2 id={`pool-${p.pool}`}>{p.pool}</h2>
        <span className="muted">
          {p.machines.eligible}/{p.machines.total} machines taking work
        </span>
      </header>
      <div className="pool-figures">
        <div>
          <span className="figure" data-testid="queued">
            {p.queued}
          </span>
          <span className="muted">queued</span>
        </div>
        <div>
          <span className="figure">{oldest === null ? '–' : formatDuration(oldest)}</span>
          <span className="muted">oldest wait</span>
        </div>
      </div>
      {p.reasons.length ? (
        <ul className="reasons" aria-label="why they wait">
          {p.reasons.map((r) => (
            <Reason key={r.kind} r={r} />
          ))}
        </ul>
      ) : (
        <p className="muted nothing-waits">Nothing waits.</p>
      )}
      <dl className="usage">
        {p.cpu.total > 0 ? (
          <Usage name="CPU" used={p.cpu.allocated} total={p.cpu.total} text={`${formatCpu(p.cpu.allocated)} / ${formatCpu(p.cpu.total)}`} />
        ) : null}
        {p.memory.total > 0 ? (
          <Usage name="memory" used={p.memory.allocated} total={p.memory.total} text={`${formatBytes(p.memory.allocated)} / ${formatBytes(p.memory.total)}`} />
        ) : null}
        {p.gpus.map((g) => (
          <Usage key={g.type} name={`${g.type} GPUs`} used={g.allocated} total={g.total} text={`${g.allocated} / ${g.total}`} />
        ))}
      </dl>
    </article>
  );
}

function Reason({ r }: { r: PoolWaitReason }) {
  const info = REASONS[r.kind] ?? { tone: 'busy' as const, means: '' };
  return (
    <li className={`reason-${info.tone}`} data-reason={r.kind}>
      <span className="reason-kind">{r.kind}</span> <strong>{r.stages}</strong> {r.stages === 1 ? 'stage' : 'stages'}: {r.message}
      {info.means ? <div className="muted">{info.means}</div> : null}
    </li>
  );
}

function Usage({ name, used, total, text }: { name: string; used: number; total: number; text: string }) {
  return (
    <div className="usage-row">
      <dt>{name}</dt>
      <dd>
        <Meter value={used} max={total} label={`${name}: ${text} allocated`} />
        <span>
          {text} <span className="muted">({formatShare(used, total)})</span>
        </span>
      </dd>
    </div>
  );
}

function PoolCharts({ windowMs }: { windowMs: number }) {
  const history = usePoolHistory(windowMs);
  const now = useNow();
  if (history.error) return <ErrorNote error={history.error} retry={() => void history.refetch()} />;
  const h = history.data;
  if (!h) return <p className="muted">Loading the history…</p>;
  const samples = h.samples;
  const t1 = samples.at(-1)?.at ?? now;
  // From the window's start, or from the first sample when the server has not been up that long.
  const t0 = Math.max(t1 - windowMs, Math.min(samples[0]?.at ?? t1, t1 - 60_000));
  const pct = (v: number) => `${Math.round(v)}%`;
  const names = poolNames(samples);
  // Waits in the unit their largest fits, so the axis reads "30 min", not "1,800 s".
  const longest = Math.max(0, ...samples.flatMap((x) => x.pools.map((p) => p.oldestWaitSeconds ?? 0)));
  const [unit, per] = longest >= 2 * 3600 ? ['h', 3600] : longest >= 120 ? ['min', 60] : ['s', 1];
  return (
    <>
      <p className="muted">
        {h.intervalMs > 0
          ? `Sampled by the server every ${formatDuration(h.intervalMs)} and kept in its memory for ${Math.round(h.keptMs / 3_600_000)} h, since it started (${samples.length - 1} samples in this window).`
          : 'This server keeps no history (GANTRY_POOL_SAMPLE_MS=0): only the present.'}
      </p>
      <div className="charts">
        <LineChart
          title="Stages queued"
          series={seriesOf(samples, names, (p) => p.queued)}
          t0={t0}
          t1={t1}
          now={now}
          format={(v) => String(Math.round(v))}
          floor={2}
        />
        <LineChart
          title="Oldest wait"
          series={seriesOf(samples, names, (p) => (p.oldestWaitSeconds ?? 0) / per)}
          t0={t0}
          t1={t1}
          now={now}
          format={(v) => `${Number(v.toFixed(1))} ${unit}`}
          floor={unit === 's' ? 10 : 1}
        />
        <LineChart
          title="GPUs allocated"
          series={seriesOf(samples, names, (p) => (p.gpusTotal ? (100 * p.gpusAllocated) / p.gpusTotal : null))}
          t0={t0}
          t1={t1}
          now={now}
          format={pct}
          floor={100}
        />
        <LineChart
          title="CPUs allocated"
          series={seriesOf(samples, names, (p) => (p.cpuTotal ? (100 * p.cpuAllocated) / p.cpuTotal : null))}
          t0={t0}
          t1={t1}
          now={now}
          format={pct}
          floor={100}
        />
      </div>
    </>
  );
}
