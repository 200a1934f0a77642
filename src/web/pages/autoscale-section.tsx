import { lifecycleSince, type AutoscaleDecisionView, type AutoscaleMachineView, type AutoscalePoolView } from '../../api/contract/autoscale-view';
import { useAutoscale } from '../api/queries';
import { ErrorNote } from '../components/empty-state';
import { RelativeTime } from '../components/time-text';

/** How many decisions the page lists (the API gives 50; `gantry autoscale --json` has them all). */
const DECISIONS_SHOWN = 15;

/**
 * The autoscaler on the pools page (issue 30, docs/autoscaling.md "What the operator sees"): per
 * autoscaled pool its machines wanted, joined and on their way (desired / current / starting),
 * its bounds and provider, each machine with its lifecycle as a badge; then the latest decisions
 * with their reasons. Nothing at all on a server that autoscales no pool.
 */
export function AutoscaleSection() {
  const autoscale = useAutoscale();
  if (autoscale.error) return <ErrorNote error={autoscale.error} retry={() => void autoscale.refetch()} />;
  const v = autoscale.data;
  if (!v || v.pools.length === 0) return null;
  return (
    <section className="autoscale" aria-labelledby="autoscaling">
      <div className="page-head charts-head">
        <h2 id="autoscaling">Autoscaling</h2>
      </div>
      <div className="pool-grid">
        {v.pools.map((p) => (
          <AutoscalePoolCard key={p.name} pool={p} machines={v.machines.filter((m) => m.pool === p.name && m.lifecycle !== 'released')} />
        ))}
      </div>
      <h3>Latest decisions</h3>
      {v.decisions.length ? (
        <ul className="reasons decisions" aria-label="latest decisions">
          {v.decisions.slice(0, DECISIONS_SHOWN).map((d) => (
            <Decision key={d.seq} d={d} />
          ))}
        </ul>
      ) : (
        <p className="muted">No decision yet: the autoscaler has started and released nothing.</p>
      )}
    </section>
  );
}

function AutoscalePoolCard({ pool: p, machines }: { pool: AutoscalePoolView; machines: AutoscaleMachineView[] }) {
  return (
    <article className="pool-card" data-autoscale-pool={p.name} aria-labelledby={`autoscale-${p.name}`}>
      <header>
        <h2 id={`autoscale-${p.name}`}>{p.name}</h2>
        <span className="muted">
          {p.provider} · min {p.min} · max {p.max}
          {p.spareMachines ? ` · ${p.spareMachines} spare` : ''}
        </span>
      </header>
      <p className="muted">{p.template.description}</p>
      <div className="pool-figures">
        <Figure name="desired" value={p.desired} title="provisioning + joining + ready: what counts toward min and max" />
        <Figure name="current" value={p.current} title="ready: joined and taking work" />
        <Figure name="starting" value={p.starting} title="provisioning + joining: on their way in" />
      </div>
      {machines.length ? (
        <ul className="lifecycles" aria-label={`machines of pool ${p.name}`}>
          {machines.map((m) => (
            <li key={m.name} data-machine={m.name} title={m.failReason ?? m.reason}>
              <span className="machine-name">{m.name}</span> <span className={`badge lifecycle-${m.lifecycle}`}>{m.lifecycle}</span>{' '}
              <span className="muted">
                <RelativeTime at={lifecycleSince(m)} />
                {m.heldFor.length ? ` · held for ${m.heldFor.length} ${m.heldFor.length === 1 ? 'stage' : 'stages'}` : ''}
              </span>
            </li>
          ))}
        </ul>
      ) : (
        <p className="muted nothing-waits">No machine started.</p>
      )}
    </article>
  );
}

function Figure({ name, value, title }: { name: string; value: number; title: string }) {
  return (
    <div title={title}>
      <span className="figure" data-testid={`autoscale-${name}`}>
        {value}
      </span>
      <span className="muted">{name}</span>
    </div>
  );
}

/** Failures stand out (red); joins and scale-downs read as good news (green); starts and the rest as waiting (amber). */
function Decision({ d }: { d: AutoscaleDecisionView }) {
  const verb = d.type.replace(/^autoscale:/, '');
  const tone = verb === 'fail' ? 'reason-never' : verb === 'joined' || verb === 'release' || verb === 'stopped' || verb === 'drain' ? 'reason-ok' : '';
  return (
    <li className={tone || undefined} data-decision={d.type}>
      <span className="reason-kind">{verb}</span> <RelativeTime at={d.at} />: {d.message}
    </li>
  );
}
