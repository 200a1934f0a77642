import type { FastifyReply } from 'fastify';
import { Topic } from '../domain/topic.js';
import type { LogChunk } from '../store/records.js';
import type { ApiContext } from './api-context.js';
import type { LogChunkView } from './contract/job-view.js';
import { rankFollowState, type LogFollowEnd } from './contract/log-follow.js';

/** Chunks read per query; a stream sends them as it reads them. */
const PAGE = 1000;
/** A stream reads on at least this often, whatever the bus says (a wake-up lost costs this much). */
const READ_EVERY_MS = 2000;
/** Reads woken by other news (any transaction's events, freed capacity) come at most this often. */
const MIN_GAP_MS = 100;

export function logChunkView(c: LogChunk): LogChunkView {
  return {
    id: c.id,
    attemptNumber: c.attemptNumber,
    ...(c.rank !== undefined ? { rank: c.rank } : {}),
    stream: c.stream === 'stderr' ? 'stderr' : 'stdout',
    at: c.at,
    data: c.data,
  };
}

/**
 * A stage's log as server-sent events (contract/log-follow.ts): what is stored after `after`, then
 * each new piece as it is stored, until the log is complete (logFollowState: the attempt over and
 * its process gone), then an `end` message, and the stream closes.
 *
 * It reads on when a piece of the followed attempt is stored (`logs:written`, sent from memory by
 * the log route, over the bus between replicas), when any transaction wrote events (a stage
 * starting or ending), when capacity was freed (an attempt's process known gone), and at least every
 * 2 s; nothing is written for it, and the agents' log route pays one in-memory publish a shipment.
 * The state is read before the pieces, so once it says ended, the pieces read after it are all.
 */
export async function streamLog(
  ctx: ApiContext,
  reply: FastifyReply,
  p: { jobId: string; stage: string; attempt?: number; rank?: number | 'all'; after?: number },
): Promise<FastifyReply> {
  const { store, bus } = ctx;
  const sse = reply.sse;
  const resume = sse.lastEventId !== null && /^\d+$/.test(sse.lastEventId) ? Number(sse.lastEventId) : undefined;
  let after = resume ?? p.after;
  // The attempts followed: one, or a gang's members with rank=all (any one's log wakes a read).
  let attemptIds = new Set<string>();
  // Woken since the last read; `urgent`: by the followed attempt's own log (read at once).
  let pending = false;
  let urgent = false;
  let wake: (() => void) | null = null;
  const woken = (now: boolean) => {
    pending = true;
    urgent ||= now;
    wake?.();
  };
  const offs = [
    bus.subscribe(Topic.logsWritten, (m) => {
      if (attemptIds.has(m.payload.attemptId)) woken(true);
    }),
    bus.subscribe(Topic.eventsWritten, () => woken(false)),
    bus.subscribe(Topic.capacityFreed, () => woken(false)),
  ];
  let open = true;
  const stop = () => {
    open = false;
    woken(true);
  };
  sse.onClose(stop);
  ctx.shutdown.addEventListener('abort', stop, { once: true });
  let lastRead = 0;
  // Committed to a stream from here (a client that asked to follow gets one, even if it ends at once).
  // The headers go at once, not with the first chunk: a log that is quiet for a while still tells
  // its client it is connected (as GET /v1/events does).
  sse.sendHeaders();
  reply.raw.flushHeaders();
  try {
    while (open && sse.isConnected) {
      lastRead = Date.now();
      pending = false;
      urgent = false;
      const stage = (await store.jobGet({ jobId: p.jobId }))?.stages.find((s) => s.name === p.stage);
      // The job was deleted while followed: its log is gone with it.
      if (!stage) break;
      const state = rankFollowState(stage, p.attempt, p.rank ?? 0, (a) => a.gang?.rank ?? 0);
      attemptIds = new Set(state.attempts.map((a) => a.id));
      if (state.attempt) {
        for (;;) {
          const chunks = (await store.stageLogs({ jobId: p.jobId, stage: p.stage, attempt: p.attempt, rank: p.rank, afterId: after, limit: PAGE })) ?? [];
          for (const c of chunks) {
            if (!open) break;
            await sse.send({ id: String(c.id), event: 'chunk', data: logChunkView(c) });
            after = c.id;
          }
          if (chunks.length < PAGE || !open) break;
        }
      }
      if (state.ended) {
        const end: LogFollowEnd = { attempt: state.attempt?.number ?? null, state: state.attempt?.state ?? stage.state };
        if (open) await sse.send({ event: 'end', data: end });
        break;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => done(), READ_EVERY_MS);
        let gap: NodeJS.Timeout | undefined;
        const done = () => {
          clearTimeout(t);
          clearTimeout(gap);
          wake = null;
          resolve();
        };
        // Its own log's news is read at once; other news no sooner than MIN_GAP_MS after the last read.
        wake = () => {
          if (!open || urgent) return done();
          gap ??= setTimeout(done, Math.max(0, lastRead + MIN_GAP_MS - Date.now()));
        };
        if (!open || pending) wake();
      });
    }
  } finally {
    for (const off of offs) off();
    ctx.shutdown.removeEventListener('abort', stop);
    sse.close();
  }
  return reply;
}
