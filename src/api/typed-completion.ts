import type { AttemptCompletion } from '../store/store.js';
import type { CompleteRequest } from './contract/agent-protocol.js';
import { legacyAttemptEnd } from './legacy-attempt-end.js';

/**
 * An agent's outcome as the server handles it, whichever protocol the agent speaks: typed once,
 * here, at the edge. Protocol 2 sends `end`; its detail, when it has none, is the outcome's reason
 * text (still what people read). Protocol 1 sends only the text, mapped by legacyAttemptEnd.
 */
export function typedCompletion(attemptId: string, o: CompleteRequest): AttemptCompletion {
  const end = o.end ? { kind: o.end.kind, detail: o.end.detail ?? o.reason } : legacyAttemptEnd(o);
  return {
    attemptId,
    token: o.token,
    exitCode: o.exitCode,
    signal: o.signal,
    end,
    outputs: o.outputs,
    ...(o.logBytes ? { logBytes: o.logBytes } : {}),
    // Protocol 3: what it used, from its cgroup; older agents send none.
    ...(o.usage ? { usage: { memoryPeakBytes: o.usage.memoryPeakBytes, cpuSeconds: o.usage.cpuSeconds } } : {}),
  };
}
