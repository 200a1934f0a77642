import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { ApiContext } from './api-context.js';
import { MachineView } from './contract/job-view.js';
import { machineView } from './views.js';

export function machineRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.get(
    '/v1/machines',
    { schema: { summary: 'Machines, their health and what is allocated on them', tags: ['machines'], response: { 200: Type.Object({ machines: Type.Array(MachineView) }) } } },
    async () => ({ machines: (await ctx.store.machineList()).map(machineView) }),
  );
}
