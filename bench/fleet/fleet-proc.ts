/**
 * One process of a fleet spread over several (fleet-procs.ts, `bench/fleet.ts --fleet-procs N`):
 * a `Fleet` of its share of the agents, driven over IPC by the bench's process. Not run by hand.
 */
import { Fleet } from './fleet.js';
import type { Counters, ProcMessage, ProcRequest } from './fleet-procs.js';

let fleet: Fleet | undefined;

const send = (m: ProcMessage) => process.send!(m);
const counters = (): Counters => ({ retried: fleet?.retried ?? 0, shed: fleet?.shed ?? 0, errors: fleet?.errors.slice(0, 5) ?? [] });

async function answer(req: ProcRequest): Promise<unknown> {
  if (req.type === 'start') {
    fleet = new Fleet({
      ...req.o,
      onTaken: (t) => send({ type: 'taken', agent: t.agent, machineId: t.machineId, a: t.a, atHost: performance.timeOrigin + t.at }),
    });
    await fleet.start();
    return null;
  }
  if (!fleet) throw new Error(`${req.type} before start`);
  switch (req.type) {
    case 'settled':
      return fleet.settled(req.n, req.timeoutMs);
    case 'window':
      return fleet.window();
    case 'runningOf':
      return fleet.runningOf(req.names);
    case 'kill':
      return fleet.kill(req.names).then(() => null);
    case 'stop':
      await fleet.stop();
      setImmediate(() => process.exit(0));
      return null;
  }
}

process.on('message', (m: ProcRequest & { id: number }) => {
  answer(m).then(
    (value) => send({ type: 'answer', id: m.id, value, counters: counters() }),
    (err: unknown) => send({ type: 'answer', id: m.id, error: err instanceof Error ? err.message : String(err), counters: counters() }),
  );
});
process.on('disconnect', () => process.exit(0));
