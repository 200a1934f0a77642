import { useEffect, useRef, useState } from 'react';
import type { LogChunkView } from '../../api/contract/job-view';
import { api, enc, query } from '../api/api-client';

/** More than this much text is not kept in the page: the CLI reads the whole log. */
export const SHOWN_BYTES = 4 * 2 ** 20;
const PAGE = 1000;
const FOLLOW_MS = 1000;

export interface StageLog {
  chunks: readonly LogChunkView[];
  /** Some of it was read and more was not (longer than SHOWN_BYTES). */
  cut: boolean;
  loading: boolean;
  error: Error | null;
}

interface Read {
  key: string;
  chunks: LogChunkView[];
  bytes: number;
  cut: boolean;
  loading: boolean;
  error: Error | null;
}

const fresh = (key: string): Read => ({ key, chunks: [], bytes: 0, cut: false, loading: true, error: null });

/**
 * One attempt's log (a gang member's by its rank), read a page at a time from `GET …/logs?format=json` (each chunk's id is the
 * cursor for the next page). While `follow` holds (the attempt's process may still write), the
 * log is read on from the last chunk every second: log lines are not events, so this is the one
 * place the dashboard polls, as `gantry logs --follow` does. When `follow` ends (the attempt has
 * ended and its process is gone: its log is whole) it reads once more, to the end, and stops.
 */
export function useStageLog(jobId: string, stage: string, attempt: number, follow: boolean, rank?: number): StageLog {
  // `rank`: a gang's member (docs/gangs.md); absent, the server reads rank 0's (any other stage's only one).
  const key = `${jobId}\n${stage}\n${attempt}\n${rank ?? 0}`;
  const read = useRef<Read>(fresh(key));
  if (read.current.key !== key) read.current = fresh(key);
  const [, changed] = useState(0);
  useEffect(() => {
    const mine = read.current;
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const more = async () => {
      try {
        for (;;) {
          const after = mine.chunks.at(-1)?.id;
          const page = await api<{ chunks: LogChunkView[] }>(
            `/v1/jobs/${enc(jobId)}/stages/${enc(stage)}/logs${query({ attempt, rank, after, limit: PAGE, format: 'json' })}`,
          );
          if (stopped) return;
          const kept: LogChunkView[] = [];
          for (const c of page.chunks) {
            if (mine.bytes + c.data.length > SHOWN_BYTES) {
              mine.cut = true;
              break;
            }
            mine.bytes += c.data.length;
            kept.push(c);
          }
          Object.assign(mine, { chunks: kept.length ? [...mine.chunks, ...kept] : mine.chunks, loading: false, error: null });
          changed((n) => n + 1);
          if (mine.cut || page.chunks.length < PAGE) break;
        }
        if (follow && !mine.cut) timer = setTimeout(() => void more(), FOLLOW_MS);
      } catch (err) {
        if (stopped) return;
        Object.assign(mine, { loading: false, error: err as Error });
        changed((n) => n + 1);
        if (follow) timer = setTimeout(() => void more(), 5 * FOLLOW_MS);
      }
    };
    void more();
    return () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    };
  }, [key, follow, jobId, stage, attempt, rank]);
  const r = read.current;
  return { chunks: r.chunks, cut: r.cut, loading: r.loading, error: r.error };
}
