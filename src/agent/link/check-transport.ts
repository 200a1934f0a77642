import { insecureTransportProblem } from '../../api/contract/transport.js';
import { serverList } from '../../lib/server-list.js';

/** Refuses to start an agent that would send its tokens in clear (src/api/contract/transport.ts). */
export function checkTransport(serverUrls: string): void {
  for (const url of serverList(serverUrls)) {
    const problem = insecureTransportProblem(url);
    if (problem) throw new Error(problem);
  }
}
