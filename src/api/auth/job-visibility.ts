import { NotFoundError } from '../../domain/errors.js';
import type { Store } from '../../store/store.js';
import { teamScope, type Principal } from './principal.js';

/** Whether a principal may see a team's jobs: an admin every team's, a team token its own team's (docs/security.md). */
export function visible(p: Principal | undefined, team: string): boolean {
  const scope = teamScope(p);
  return scope === null || scope === team;
}

/** Another team's job, to a team token, is not found (404): ids of other teams' jobs do not leak. */
export async function ownJob(store: Pick<Store, 'jobTeam'>, p: Principal | undefined, id: string): Promise<void> {
  const team = await store.jobTeam({ jobId: id });
  if (team === null || !visible(p, team)) throw new NotFoundError('job', id);
}
