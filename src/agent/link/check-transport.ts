import { insecureTransportProblem } from '../../api/contract/transport.js';

/** Refuses to start an agent that would send its tokens in clear (src/api/contract/transport.ts). */
export function checkTransport(serverUrls: string): void {
  for (const url of serverUrls.split(',').map((u) => u.trim()).filter(Boolean)) {
    const problem = insecureTransportProblem(url);
    if (problem) throw new Error(problem);
  }
}
