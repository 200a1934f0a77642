import { Type } from 'typebox';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import { HeartbeatRequest, HeartbeatResponse } from './contract/agent-protocol.js';
import { ErrorBody } from './contract/job-view.js';
import { HeartbeatShedError } from '../domain/errors.js';
import { HeartbeatBudget, shedAnswer } from './heartbeat-shedding.js';
import { MachineWakes } from './long-poll.js';
import type { ReportMemory } from './report-memory.js';

const MachineParams = Type.Object({ id: Type.String({ maxLength: 100 }) });
const tags = ['agent'];
/** Now on the clock every process on this host shares, in ms with µs digits (bench/fleet: the fleet's own send and read on the same clock). */
const hostNow = () => performance.timeOrigin + performance.now();

const errors = { 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 429: ErrorBody };

/**
 * `POST /v1/agent/machines/{id}/heartbeat`, the long-poll an agent holds open: written once as it
 * arrives, then held until there is something to kill or to start. `reported` is what the reports'
 * answers told the agent already (agent-routes.ts records it), left out of this answer.
 */
export function agentHeartbeatRoute(app: ApiApp, ctx: ApiContext, reported: ReportMemory): void {
  const { store, clock, config } = ctx;
  const wakes = new MachineWakes(ctx.bus, ctx.shutdown);
  const budget = new HeartbeatBudget(config.maxHeartbeatsPerSecond);
  // `heartbeatTiming` (GANTRY_HEARTBEAT_TIMING=1; bench/fleet.ts sets it): each answer says when its request was
  // read, when the handler began and when the answer was handed to the socket, on the host's
  // clock (`x-gantry-timing: read;handler;sent`), so that a fleet on the same host can split a
  // heartbeat's round trip into the way in, the server's part and the way back
  // (docs/throughput.md, "Where a heartbeat's time goes, on one clock"). Off: no hook at all.
  const timing = config.heartbeatTiming;
  // When each request's handler began, by its raw request.
  const handlerAt = new WeakMap<object, number>();
  app.post(
    '/v1/agent/machines/:id/heartbeat',
    {
      config: { access: 'machine' },
      ...(timing
        ? {
            // Fastify starts a reply's clock as it routes the request, before any hook (authentication's included).
            onSend: async (req: { raw: object }, reply: { elapsedTime: number; header(k: string, v: string): unknown }, payload: unknown) => {
              const handler = handlerAt.get(req.raw);
              const sent = hostNow();
              if (handler !== undefined) reply.header('x-gantry-timing', `${(sent - reply.elapsedTime).toFixed(3)};${handler.toFixed(3)};${sent.toFixed(3)}`);
              return payload;
            },
          }
        : {}),
      schema: {
        summary: 'Heartbeat: renew leases, learn what to kill, receive assignments (long-poll up to waitMs)',
        tags,
        params: MachineParams,
        body: HeartbeatRequest,
        response: { 200: HeartbeatResponse, ...errors },
      },
    },
    async (req, reply) => {
      if (timing) handlerAt.set(req.raw, hostNow());
      const { id } = req.params;
      const body = req.body;
      const reportedAt = clock.now();
      // The period this answer gives, grown with the fleet (heartbeat-fleet-period.ts): the agent's
      // next heartbeat comes within it, so its row records it and its leases last for it. An agent
      // that does not read it heartbeats at the configured period, sooner: judged by the longer
      // period, it is only detected later.
      const periodMs = ctx.period?.current ?? config.heartbeatMs;
      // Past the budget (heartbeat-shedding.ts), an idle heartbeat of an agent that honours
      // Retry-After is answered at once, with no transaction and no hold. Its arrival is a sign of
      // life, recorded with the longest the agent may wait before the next, so the reaper allows
      // for that wait as for a longer period (docs/failure-detection.md, "Shedding heartbeats past
      // the budget"). Counted for every heartbeat, shed or not: each is a request served.
      const past = budget.arrive(reportedAt, periodMs);
      if (past && ctx.liveness && body.acceptsShedding === true && body.running.length === 0) {
        const shed = shedAnswer(periodMs);
        ctx.liveness.record(id, reportedAt, shed.recordedPeriodMs);
        throw new HeartbeatShedError(shed.retryAfterSeconds);
      }
      const known = body.running.map((r) => r.attemptId);
      const waiter = wakes.waiter(id, req.raw.socket);
      const arrived = reported.mark();
      try {
        // Held no longer than that period, whatever the agent asks: the hold writes nothing, so a
        // longer one would let the machine look silent while it waits.
        const deadline = reportedAt + Math.min(body.waitMs ?? 0, periodMs);
        // The heartbeat proper (machine alive, leases renewed, the list reconciled) is written once,
        // when the request arrives; a wake-up while it is held only re-reads what to send.
        // Under load an agent polls again each time work arrives; within half a period of the last
        // written heartbeat, one that changes nothing is only a read (see machineHeartbeat). With
        // the control plane's liveness loop, an idle heartbeat is a read too: its arrival is kept
        // in memory and written with every other machine's within 0.48 of a period
        // (heartbeat-liveness.ts); the row is written here only if what it holds is older than
        // the 1.5 periods detection allows for (the loop lagging), or the list calls for a write.
        // Its arrival is a sign of life whatever its transaction then waits for: recorded before it,
        // so a heartbeat that queues for a connection (PostgreSQL under load: seconds) or is refused
        // busy is still written by the liveness loop within 0.48 of a period of its arrival.
        ctx.liveness?.record(id, reportedAt, periodMs);
        const hb = await store.machineHeartbeat({
          machineId: id,
          running: body.running,
          now: reportedAt,
          leaseMs: ctx.period?.heartbeatLeaseMs ?? config.leaseMs,
          missingAfterMs: 2 * config.heartbeatMs,
          // Started at placement and offered after it arrived, or within a period before: this
          // heartbeat may have left before their answer reached the agent (report-memory.ts).
          spare: reported.notEvidence(id, arrived, reportedAt - periodMs),
          // What the agent's list knows of (docs/failure-detection.md, "What a heartbeat's list knows").
          ...(body.knownAsOf !== undefined ? { knownAsOf: body.knownAsOf } : {}),
          jitter: ctx.random(),
          renewAfterMs: config.heartbeatMs / 2,
          ...(ctx.liveness ? { livenessAfterMs: 1.5 * config.heartbeatMs } : {}),
          period: { heartbeatMs: config.heartbeatMs, periodMs },
        });
        if (hb.lost.length) req.log.warn({ machineId: id, attempts: hb.lost }, 'running attempts no longer reported by their agent: lost');
        // What the agent knows already is not sent (report-memory.ts): a kill of an attempt whose
        // outcome it reported (`news`), nor, below, an assignment a report's answer carried since
        // this heartbeat arrived.
        const news = (k: { attemptId: string }) => !reported.hasEnded(id, k.attemptId);
        let kill = hb.kill.filter(news);
        // Assignments are read when the heartbeat's own read found some placed that the agent does
        // not list, and after each wake-up; an idle machine's heartbeat reads none. A placement
        // committed after that read wakes the waiter, subscribed before it.
        let look = hb.placed.some((a) => !known.includes(a));
        for (;;) {
          const since = reported.offeredSince(id, arrived);
          const assignments = look
            ? await store.machineAssignments({ machineId: id, exclude: since.length ? [...known, ...since] : known, outputs: config.outputs })
            : [];
          const left = deadline - clock.now();
          if (kill.length || assignments.length || left <= 0 || ctx.shutdown.aborted || req.raw.socket.destroyed) {
            // Answered as the server stops: its connection is closed after the answer, not kept
            // alive (a connection that goes idle after the close began would hold the exit for the
            // keep-alive's 60 s).
            if (ctx.shutdown.aborted) reply.header('connection', 'close');
            return { health: hb.health, kill, assignments, heartbeatMs: periodMs, asOf: clock.now() };
          }
          // Held to its end with no wake-up: nothing changed for this machine that the bus told of,
          // and it is answered empty without reading again. A wake-up the bus lost (it carries
          // hints) costs a round trip: the agent's next heartbeat reads as it arrives.
          look = await waiter.wait(left);
          if (!look) continue;
          // The wake-up of a placement made in a report's transaction comes as that transaction
          // commits, before the report's answer records what it carries: let that go first.
          await new Promise((r) => setImmediate(r));
          kill = await store.machineKillList({ machineId: id, running: body.running.filter(news) });
        }
      } finally {
        waiter.done();
      }
    },
  );
}
