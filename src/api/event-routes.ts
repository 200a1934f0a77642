import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { Topic } from '../domain/topic.js';
import { ForbiddenError } from '../domain/errors.js';
import type { EventRecord } from '../store/records.js';
import type { ApiContext } from './api-context.js';
import { teamScope } from './auth/principal.js';
import type { EventType } from './contract/event-types.js';
import { eventVisible } from './event-visibility.js';
import { ErrorBody, type EventView } from './contract/job-view.js';

/** Events read per query while catching up; a stream sends them as it reads them. */
const PAGE = 500;
/** A stream reads on at least this often, whatever the bus says (a wake-up lost costs this much). */
const READ_EVERY_MS = 2000;

export const EventsQuery = Type.Object({
  job: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: "one job's events" })),
  team: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: "one team's jobs' events (a team token: always its own)" })),
  pool: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'events of stages in this pool, e.g. gpu:h100' })),
  after: Type.Optional(
    Type.Integer({
      minimum: 0,
      description: "start after this seq (Last-Event-ID wins when both are given); default: from the job's first event with `job`, else from now",
    }),
  ),
});

export function eventView(e: EventRecord): EventView {
  // The store writes the types contract/event-types.ts lists (test/api/event-types.test.ts holds it to that).
  return {
    seq: e.seq,
    at: e.at,
    type: e.type as EventType,
    jobId: e.jobId,
    stageName: e.stageName,
    attemptId: e.attemptId,
    machineId: e.machineId,
    message: e.message,
    data: e.data,
  };
}

/**
 * `GET /v1/events`: every state change as server-sent events, from the persisted event log, so a
 * client that reconnects with `Last-Event-ID` (the last `seq` it got) loses nothing. It catches up
 * in pages, then reads on whenever a transaction that wrote events commits (the `events:written`
 * wake-up, over the bus between replicas) and at least every 2 s. A team token sees its own
 * team's jobs' events and the machines' and teams'; other teams' jobs' events and admin-only ones
 * (tokens, leadership) are never sent (eventVisible, by type).
 */
export function eventRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, bus } = ctx;
  app.get(
    '/v1/events',
    {
      sse: { kind: 'only', heartbeat: true },
      config: { access: 'user' },
      schema: {
        summary: 'Every state change of jobs, stages, attempts and machines, live (server-sent events; resumable with Last-Event-ID)',
        description:
          "Each message: `id` the event's seq, `event` its type (stage:running, attempt:preempted, …), `data` the event as in GET /v1/jobs/{id}/events.",
        tags: ['jobs'],
        querystring: EventsQuery,
        response: { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (req, reply) => {
      const q = req.query;
      const scope = teamScope(req.principal);
      if (scope !== null && q.team !== undefined && q.team !== scope) throw new ForbiddenError(`a team ${scope} token sees team ${scope}'s events only`);
      const team = scope ?? q.team;
      ctx.streams.hold(req.principal!.tokenId, reply);
      const resume = reply.sse.lastEventId !== null && /^\d+$/.test(reply.sse.lastEventId) ? Number(reply.sse.lastEventId) : undefined;
      let after = resume ?? q.after ?? (q.job ? 0 : await store.eventsHead());
      reply.sse.keepAlive();
      // The headers at once, not with the first event: a client (the dashboard's fetch) knows it is
      // connected, and the keep-alive comments start, even when nothing happens for a while.
      reply.sse.sendHeaders();
      reply.raw.flushHeaders();
      let wake: (() => void) | null = null;
      const off = bus.subscribe(Topic.eventsWritten, () => wake?.());
      let open = true;
      const stop = () => {
        open = false;
        wake?.();
      };
      reply.sse.onClose(stop);
      ctx.shutdown.addEventListener('abort', stop, { once: true });
      try {
        while (open && reply.sse.isConnected) {
          const page = await store.eventsList({
            afterSeq: after,
            limit: PAGE,
            ...(q.job ? { jobId: q.job } : {}),
            ...(team !== undefined ? { team, withMachines: scope !== null && q.team === undefined } : {}),
            ...(q.pool ? { pool: q.pool } : {}),
          });
          for (const e of page) {
            if (!open) break;
            // Read past, sent or not: the page's length, not what was sent, says whether more wait.
            if (eventVisible(e, req.principal)) await reply.sse.send({ id: String(e.seq), event: e.type, data: eventView(e) });
            after = e.seq;
          }
          if (page.length === PAGE) continue;
          await new Promise<void>((resolve) => {
            const t = setTimeout(() => done(), READ_EVERY_MS);
            const done = () => {
              clearTimeout(t);
              wake = null;
              resolve();
            };
            wake = done;
            if (!open) done();
          });
        }
      } finally {
        off();
        ctx.shutdown.removeEventListener('abort', stop);
      }
    },
  );
}
