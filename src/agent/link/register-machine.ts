import os from 'node:os';
import type { RegisterRequest, RegisterResponse } from '../../api/contract/agent-protocol.js';
import type { ContainmentReport } from '../../api/contract/containment.js';
import type { AgentState } from '../disk/agent-state.js';
import type { DetectedMachine } from '../machine/machine-detect.js';
import { AgentHttpError, type AgentClient } from './agent-client.js';
import { agentVersion } from './agent-version.js';

/** Where gangs whose rank 0 runs on this machine meet (docs/gangs.md, "Rendezvous"): `--advertise-addr` (absent: the host's name) and `--gang-ports` (absent: the server's default range). */
export interface Rendezvous {
  advertiseAddr?: string;
  gangPorts?: { first: number; last: number };
}

/**
 * What the agent says of its machine and of itself when it registers; `containment`: what it
 * enforces on attempts (docs/containment.md); `rendezvous`: its address and gang ports, inside
 * `agent` (which servers from before them accept with any field).
 */
export function registerRequest(m: DetectedMachine, containment?: ContainmentReport, rendezvous: Rendezvous = {}): RegisterRequest {
  return {
    name: m.name,
    cpuMillis: m.cpuMillis,
    memoryBytes: m.memoryBytes,
    // The wire's fields only: which device file a GPU is the agent's own business.
    gpus: m.gpus.map(({ index, uuid, name, type, memoryMiB }) => ({ index, uuid, name, type, memoryMiB })),
    gpusDeclared: m.gpusDeclared,
    region: m.region,
    labels: m.labels,
    agent: {
      version: agentVersion(),
      host: os.hostname(),
      pid: process.pid,
      ...(containment ? { containment } : {}),
      ...(rendezvous.advertiseAddr !== undefined ? { advertiseAddr: rendezvous.advertiseAddr } : {}),
      ...(rendezvous.gangPorts ? { gangPorts: rendezvous.gangPorts } : {}),
    },
  };
}

/**
 * One registration: the machine's credential first, when it has one; the join token when there is
 * none, or the server refuses it (401: revoked, or another server's). A credential that comes back
 * is kept (docs/security.md).
 */
export async function registerWithToken(
  o: {
    client: AgentClient;
    state: Pick<AgentState, 'readCredential' | 'writeCredential'>;
    joinToken: string | null;
    log: (line: string) => void;
    signal: AbortSignal;
  },
  req: RegisterRequest,
): Promise<RegisterResponse> {
  const credential = o.state.readCredential();
  const tokens = [credential, o.joinToken].filter((t, i, all): t is string => t !== null && all.indexOf(t) === i);
  if (tokens.length === 0)
    throw new Error(
      'no token to register with: give the agent a join token (--token, $GANTRY_JOIN_TOKEN; an admin makes one with `gantry token create --kind join`)',
    );
  for (const [i, token] of tokens.entries()) {
    o.client.setToken(token);
    try {
      const res = await o.client.register(req, o.signal);
      if (res.credential) {
        await o.state.writeCredential(res.credential);
        o.client.setToken(res.credential);
        if (credential) o.log('joined again with the join token; the machine has a new credential');
      }
      return res;
    } catch (err) {
      const refused = err instanceof AgentHttpError && err.status === 401;
      if (!refused || i === tokens.length - 1) throw err;
      o.log(`the machine's credential was refused (${err.message}); joining again with the join token`);
    }
  }
  throw new Error('unreachable');
}
