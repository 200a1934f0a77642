import type { ApiApp } from './api-app.js';
import { Type, type TSchema } from 'typebox';
import { NotFoundError } from '../domain/errors.js';
import type { AutoscaleRow } from '../autoscale/autoscale-row.js';
import type { AuditEntry } from '../store/records.js';
import type { MachineSchedulingChange, Store } from '../store/store.js';
import { auditBy } from './auth/audit-entry.js';
import type { ApiContext } from './api-context.js';
import { ErrorBody, MachineChange, MachineView } from './contract/job-view.js';
import { heldAttemptView, machineView } from './views.js';
import { HeldAttemptView } from './contract/held-attempt-view.js';
import { teamScope } from './auth/principal.js';

const tags = ['machines'];
const MachineParams = Type.Object({ machine: Type.String({ minLength: 1, maxLength: 200, description: 'machine name or id' }) });
const errors = { 400: ErrorBody, 404: ErrorBody };

type OperatorVerb = (p: { machine: string; now: number; stopNow: boolean; jitter: number; audit: AuditEntry }) => Promise<MachineSchedulingChange>;

/** The operator's routes, one per verb: what each does, in the OpenAPI document. */
const verbs: {
  name: string;
  path: string;
  method: 'POST' | 'DELETE';
  summary: string;
  description: string;
  querystring?: TSchema;
  verb: (s: Store) => OperatorVerb;
}[] = [
  {
    name: 'cordon',
    path: '/v1/machines/:machine/cordon',
    method: 'POST',
    summary: 'Cordon a machine: no new work is placed there',
    description:
      'What runs there goes on. A cordoned or draining machine is left as it is (`changed: false`). Survives the agent restarting and the machine being lost.',
    verb: (s) => (p) => s.machineCordon(p),
  },
  {
    name: 'uncordon',
    path: '/v1/machines/:machine/uncordon',
    method: 'POST',
    summary: 'Put a cordoned or draining machine back in service',
    description: 'An eligible machine is left as it is (`changed: false`).',
    verb: (s) => (p) => s.machineUncordon(p),
  },
  {
    name: 'drain',
    path: '/v1/machines/:machine/drain',
    method: 'POST',
    summary: 'Drain a machine: no new work; what runs there finishes',
    description:
      'Its `scheduling` reads `draining` until no attempt holds resources there, then `drained`. Running stages are not stopped, ' +
      'unless `now=true`: then they are stopped at once (lost, back in the queue, charged to no budget; the agent kills them), and `stopped` says how many.',
    querystring: Type.Object({ now: Type.Optional(Type.Boolean({ description: 'stop what runs there at once' })) }),
    verb: (s) => (p) => s.machineDrain({ machine: p.machine, now: p.now, stopRunning: p.stopNow, jitter: p.jitter, audit: p.audit }),
  },
  {
    name: 'remove',
    path: '/v1/machines/:machine',
    method: 'DELETE',
    summary: 'Remove (forget) a machine',
    description:
      'Only a lost machine, or a cordoned or drained one with nothing running, can be removed; otherwise 409 says why. ' +
      'It leaves listings and the scheduler; jobs keep naming it in their attempts. An agent still running there registers it again, back in service: stop the agent first.',
    verb: (s) => (p) => s.machineRemove(p),
  },
];

/**
 * `?now=true`, on the verb whose schema takes it (drain; validated and coerced there). The verbs
 * share one registration, so their query's type is the union of theirs: read here, not cast.
 */
function nowAsked(query: unknown): boolean {
  return typeof query === 'object' && query !== null && 'now' in query && query.now === true;
}

export function machineRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  // The autoscaler's machines not yet released, by name (its agent registers under the row's
  // name). Not read when no pool is autoscaled: the listing costs what it did before issue 30.
  const autoscaledByName = async () =>
    ctx.config.pools.length === 0 ? new Map<string, AutoscaleRow>() : new Map((await store.autoscaleRows({ active: true })).map((r) => [r.name, r]));
  app.get(
    '/v1/machines',
    {
      config: { access: 'user' },
      schema: { summary: 'Machines, their health and what is allocated on them', tags, response: { 200: Type.Object({ machines: Type.Array(MachineView) }) } },
    },
    async () => {
      const [machines, autoscaled] = await Promise.all([store.machineList(), autoscaledByName()]);
      return { machines: machines.map((m) => machineView(m, ctx.config, autoscaled.get(m.name))) };
    },
  );

  app.get(
    '/v1/attempts',
    {
      config: { access: 'user' },
      schema: {
        summary: "What runs where: every attempt that holds resources on a machine now (to a team token, other teams' attempts show their resources only)",
        tags,
        response: { 200: Type.Object({ attempts: Type.Array(HeldAttemptView) }), 401: ErrorBody },
      },
    },
    async (req) => {
      const scope = teamScope(req.principal);
      return { attempts: (await store.attemptsHeld()).map((a) => heldAttemptView(a, scope === null || scope === a.team)) };
    },
  );

  app.get(
    '/v1/machines/:machine',
    { config: { access: 'user' }, schema: { summary: 'One machine, by name or id', tags, params: MachineParams, response: { 200: MachineView, ...errors } } },
    async (req) => {
      const { machine } = req.params;
      const m = await store.machineFind({ machine });
      if (!m) throw new NotFoundError('machine', machine);
      return machineView(m, ctx.config, (await autoscaledByName()).get(m.name));
    },
  );

  for (const v of verbs) {
    const verb = v.verb(store);
    app.route({
      method: v.method,
      url: v.path,
      config: { access: 'admin', audit: `machine.${v.name}` },
      schema: {
        summary: v.summary,
        description: v.description,
        tags,
        params: MachineParams,
        ...(v.querystring ? { querystring: v.querystring } : {}),
        response: { 200: MachineChange, ...errors, 409: ErrorBody },
      },
      handler: async (req) => {
        const { machine } = req.params;
        const r = await verb({
          machine,
          now: clock.now(),
          stopNow: nowAsked(req.query),
          jitter: ctx.random(),
          audit: auditBy(req, `machine.${v.name}`, machine),
        });
        req.log.info(
          { machine: r.machine.name, machineId: r.machine.id, scheduling: r.machine.scheduling, changed: r.changed, stopped: r.stopped },
          `machine ${v.name}`,
        );
        return { changed: r.changed, machine: machineView(r.machine, ctx.config), ...(r.stopped !== undefined ? { stopped: r.stopped } : {}) };
      },
    });
  }
}
