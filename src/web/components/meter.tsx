/** A bar of how much of a whole is used: progress of a stage, allocation of a machine or a pool. */
export function Meter({ value, max, label, kind = 'use' }: { value: number; max: number; label: string; kind?: 'use' | 'progress' }) {
  const fraction = max > 0 ? Math.min(1, Math.max(0, value / max)) : 0;
  return (
    <span className={`meter meter-${kind}`} role="meter" aria-valuemin={0} aria-valuemax={max} aria-valuenow={value} aria-label={label} title={label}>
      <span className="meter-fill" style={{ width: `${(fraction * 100).toFixed(1)}%` }} />
    </span>
  );
}

/** A stage's progress as it last reported it: a bar, its percentage and its message. */
export function ProgressBar({ progress }: { progress: { fraction: number; message: string | null } | null | undefined }) {
  if (!progress) return <span className="muted">–</span>;
  const pct = Math.round(progress.fraction * 100);
  return (
    <span className="progress">
      <Meter value={progress.fraction} max={1} kind="progress" label={`${pct}%${progress.message ? ` ${progress.message}` : ''}`} />
      <span className="progress-text">
        {pct}%{progress.message ? ` ${progress.message}` : ''}
      </span>
    </span>
  );
}
