import { formatAbsolute, formatDuration, formatRelative } from '../format/format-time';
import { useNow } from './use-now';

/** "3 min ago", with the exact time on hover. */
export function RelativeTime({ at }: { at: number | null | undefined }) {
  const now = useNow();
  if (at === null || at === undefined) return <span className="muted">–</span>;
  return (
    <time dateTime={new Date(at).toISOString()} title={formatAbsolute(at)}>
      {formatRelative(at, now)}
    </time>
  );
}

/** How long from `from` to `to`, or to now while it goes on. */
export function Elapsed({ from, to }: { from: number | null | undefined; to?: number | null }) {
  const now = useNow();
  if (from === null || from === undefined) return <span className="muted">–</span>;
  const end = to ?? now;
  return <span title={`${formatAbsolute(from)} → ${to ? formatAbsolute(to) : 'now'}`}>{formatDuration(end - from)}</span>;
}
