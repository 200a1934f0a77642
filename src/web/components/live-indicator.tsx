import { useLiveStatus } from '../api/live-events';
import { formatDuration } from '../format/format-time';
import { useNow } from './use-now';

/** Whether the page is live: the event stream is open, or dropped and being reopened (and when). */
export function LiveIndicator() {
  const s = useLiveStatus();
  const now = useNow();
  const [cls, text, title] =
    s.state === 'live'
      ? ['live', 'Live', 'Updates arrive as they happen (server-sent events from /v1/events)']
      : s.state === 'connecting'
        ? ['connecting', 'Connecting…', 'Opening the event stream']
        : s.state === 'reconnecting'
          ? [
              'down',
              `Reconnecting${s.retryAt > now ? ` in ${formatDuration(s.retryAt - now)}` : '…'}`,
              `The event stream dropped (${s.why}); what happens meanwhile is shown once it is back. Tries so far: ${s.failures}`,
            ]
          : ['down', 'Not live', `The server refused the event stream: ${s.why}`];
  return (
    <span className={`live live-${cls}`} role="status" aria-live="polite" title={title} data-live={s.state}>
      <span className="live-dot" aria-hidden="true" />
      {text}
    </span>
  );
}
