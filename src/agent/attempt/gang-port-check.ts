import { createServer } from 'node:net';
import type { GangWire } from '../../api/contract/agent-protocol.js';

/**
 * Rank 0's check before its member starts (docs/gangs.md, "Rendezvous"): the server reserves a
 * gang's master port among gangs only, so a process outside Gantry on this machine may hold it,
 * and the member (torchrun's store, a barrier) would then fail to listen while the other members
 * wait for it until their own timeouts. Listening on the advertised address and the port, and
 * closing at once, finds that before anything runs: the member then ends `spawn-failed` saying
 * which port and where, so the gang ends once, charged as a spawn failure (not retried: a retry
 * would most likely be given the same port), and the operator knows what to move.
 *
 * Null: free (the member may listen), or not a rank 0. Only a port in use is a problem here: an
 * address this host cannot listen on (one that reaches it through NAT, a name it cannot resolve)
 * is the member's own business, as before this check, which says nothing of it.
 */
export async function gangPortProblem(gang: GangWire | undefined): Promise<string | null> {
  if (!gang || gang.rank !== 0) return null;
  const code = await listenError(gang.masterAddr, gang.masterPort);
  return code === 'EADDRINUSE' ? `gang master port ${gang.masterPort} on ${gang.masterAddr} is in use by another process (--gang-ports)` : null;
}

/** The error code of listening there (then closed), or null when it listened. */
function listenError(host: string, port: number): Promise<string | null> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'EUNKNOWN'));
    // Closed before the member starts, which listens there itself: a listener that took no connection leaves nothing behind.
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(null)));
  });
}
