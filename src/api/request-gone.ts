import type { FastifyReply } from 'fastify';
import { RequestAbandoned } from '../domain/errors.js';

/**
 * A signal that aborts if the client closes its connection before this request is answered (the
 * agent's timeout ended its report), with RequestAbandoned as its reason; `done()` once the work
 * it guards is over, so that a connection kept alive for later requests holds no listener of this
 * one's. It watches the response, not the request: a request's 'close' comes as soon as its body
 * has been read, the response's only when it is sent or its connection is gone.
 */
export function requestGone(reply: FastifyReply, what: string): { signal: AbortSignal; done: () => void } {
  const gone = new AbortController();
  const hungUp = () => {
    if (!reply.raw.writableFinished) gone.abort(new RequestAbandoned(what));
  };
  reply.raw.once('close', hungUp);
  return { signal: gone.signal, done: () => void reply.raw.off('close', hungUp) };
}
