import { useLayoutEffect, useRef } from 'react';
import type { AttemptView } from '../../api/contract/job-view';
import { isActiveAttemptState } from '../../api/contract/states';
import { useNow } from '../components/use-now';
import { formatBytes } from '../format/format-quantity';
import { useStageLog } from './use-stage-log';

/** An ended attempt whose process is not reported gone after this long is not followed any more (its machine was lost). */
const GIVE_UP_MS = 2 * 60_000;

/**
 * A stage's output, one attempt at a time (the latest unless another is picked), stderr marked;
 * followed while the attempt's process may still write, keeping to the bottom if the reader is there.
 * A log cut past the head's cap says so above it (a line in the log marks where; docs/agent.md, "Logs").
 */
export function StageLogs({
  jobId,
  stage,
  attempts,
  attempt,
  onAttempt,
  rank = 0,
  onRank,
}: {
  jobId: string;
  stage: string;
  attempts: AttemptView[];
  attempt: number;
  onAttempt: (n: number) => void;
  /** A gang's member whose output is shown (docs/gangs.md); its members share the attempt's number. */
  rank?: number;
  onRank?: (rank: number) => void;
}) {
  const now = useNow();
  const a = attempts.find((x) => x.number === attempt && (x.gangRank ?? 0) === rank);
  // One entry per attempt number: a gang's members share theirs.
  const numbers = attempts.filter((x) => (x.gangRank ?? 0) === 0);
  const ranks = attempts.filter((x) => x.number === attempt && x.gangRank !== undefined).map((x) => x.gangRank!);
  // Followed until the attempt has ended and its process is gone (then its log is whole).
  const follow = a ? !(!isActiveAttemptState(a.state) && (a.releasedAt != null || (a.finishedAt !== null && now - a.finishedAt > GIVE_UP_MS))) : false;
  const log = useStageLog(jobId, stage, attempt, follow, ranks.length ? rank : undefined);
  const box = useRef<HTMLPreElement>(null);
  const atBottom = useRef(true);
  useLayoutEffect(() => {
    const el = box.current;
    if (el && atBottom.current) el.scrollTop = el.scrollHeight;
  }, [log.chunks]);
  return (
    <div className="logs">
      <div className="logs-head">
        <h3>Output</h3>
        {numbers.length > 1 ? (
          <label>
            Attempt{' '}
            <select value={attempt} onChange={(e) => onAttempt(Number(e.target.value))}>
              {numbers.map((x) => (
                <option key={x.number} value={x.number}>
                  {x.number} ({x.state})
                </option>
              ))}
            </select>
          </label>
        ) : null}
        {ranks.length > 1 && onRank ? (
          <label>
            Rank{' '}
            <select value={rank} onChange={(e) => onRank(Number(e.target.value))} data-testid="log-rank">
              {ranks.map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          </label>
        ) : null}
        <span className={`logs-state${follow ? ' following' : ''}`}>{follow ? 'following…' : log.loading ? 'loading…' : 'complete'}</span>
      </div>
      {a?.logCutBytes ? (
        <p className="log-cut-note" data-testid="log-cut">
          Log cut: {formatBytes(a.logCutBytes)} dropped between its head and its end, where the <code>[gantry: … cut here …]</code> line stands; the first and
          the last part of what it wrote are kept.
        </p>
      ) : null}
      <pre
        ref={box}
        className="log"
        tabIndex={0}
        aria-label={`output of ${stage}, attempt ${attempt}${ranks.length ? `, rank ${rank}` : ''}`}
        data-testid="stage-log"
        onScroll={(e) => {
          const el = e.currentTarget;
          atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
        }}
      >
        {log.chunks.map((c) => (
          <span key={c.id} className={`log-${c.stream}`}>
            {c.data}
          </span>
        ))}
        {!log.loading && log.chunks.length === 0 ? <span className="muted">{follow ? 'Nothing written yet.' : 'It wrote nothing.'}</span> : null}
      </pre>
      {log.cut ? (
        <p className="muted">
          Longer than shown here; the whole log:{' '}
          <code>
            gantry logs {jobId} {stage} --attempt {attempt}
            {ranks.length ? ` --rank ${rank}` : ''}
          </code>
        </p>
      ) : null}
      {log.error ? <p className="error-note">{log.error.message}</p> : null}
    </div>
  );
}
