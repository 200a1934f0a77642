import { insecureTransportProblem } from '../api/contract/transport.js';

/** Refuses to start an agent that would send its tokens in clear (src/api/contract/transport.ts). */
export function checkTransport(serverUrl: string): void {
  const problem = insecureTransportProblem(serverUrl);
  if (problem) throw new Error(problem);
}
