import { describe, expect, it } from 'vitest';
import type { EventView } from '../../api/contract/job-view.js';
import type { CliIo } from './cli-io.js';
import { watchJobs } from './watch-jobs.js';

const event = (seq: number, type: EventView['type'], jobId: string | null): EventView => ({
  seq,
  at: 0,
  type,
  jobId,
  stageName: null,
  attemptId: null,
  machineId: null,
  message: type,
  data: {},
});

describe('watchJobs on the event stream', () => {
  it("follows the jobs' states by their events from the batch's first one, reading only the jobs that failed", async () => {
    const reads: string[] = [];
    let resumedAfter: number | undefined;
    const script = [
      event(41, 'job:submitted', 'j_1'),
      event(42, 'job:queued', 'j_1'),
      event(43, 'job:submitted', 'j_2'),
      event(44, 'job:queued', 'j_2'),
      event(45, 'job:running', 'j_9'), // another job's: no news to this watch
      event(46, 'machine:lost', null),
      event(47, 'job:running', 'j_1'),
      event(48, 'stage:failed', 'j_2'),
      event(49, 'job:failed', 'j_2'),
      event(50, 'job:succeeded', 'j_1'),
    ];
    const client = {
      events: async (id: string) => script.filter((e) => e.jobId === id),
      getJob: async (id: string) => {
        reads.push(id);
        return { id, state: 'failed', failureReason: 'stage s failed: exit code 3' } as never;
      },
      followEvents: (_q: unknown, o: { signal: AbortSignal; lastEventId?: number; onEvent: (e: EventView) => unknown }) =>
        new Promise<void>((resolve) => {
          resumedAfter = o.lastEventId;
          script.forEach((e, i) => setTimeout(() => o.onEvent(e), i));
          o.signal.addEventListener('abort', () => resolve(), { once: true });
        }),
    };
    const out: string[] = [];
    const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: () => {} }, color: false };
    // A poll interval of a minute: only the events can end this watch.
    const r = await watchJobs(
      client,
      [
        { id: 'j_1', name: 'a' },
        { id: 'j_2', name: 'b' },
      ],
      { io, json: true, interval: 60_000 },
    );
    expect(r.interrupted).toBe(false);
    expect(r.jobs).toEqual([
      { id: 'j_1', name: 'a', state: 'succeeded', failureReason: null },
      { id: 'j_2', name: 'b', state: 'failed', failureReason: 'stage s failed: exit code 3' },
    ]);
    expect(resumedAfter).toBe(40);
    expect(reads).toEqual(['j_2']);
    expect(out.at(-1)).toBe('{"total":2,"states":{"succeeded":1,"failed":1}}\n');
  });
});
