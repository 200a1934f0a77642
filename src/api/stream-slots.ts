import type { FastifyReply } from 'fastify';
import { TooManyStreamsError } from '../domain/errors.js';

/**
 * Open streams per token (`GET /v1/events`, a followed log): each holds a connection, a bus
 * subscription and a read loop for as long as it lasts, so one token could hold the server's
 * memory and sockets by opening thousands (issue 28). Past `perToken` the next is answered 429
 * (too_many_streams); a stream that closes, however it ends, frees its slot. In memory, per
 * server: a replica counts the streams it serves. 0: no cap.
 */
export class StreamSlots {
  private readonly open = new Map<string, number>();

  constructor(private readonly perToken: number) {}

  /** Takes a slot for `tokenId` for as long as `reply`'s connection stays open; throws TooManyStreamsError when none is left. */
  hold(tokenId: string, reply: FastifyReply): void {
    if (!(this.perToken > 0)) return;
    const n = this.open.get(tokenId) ?? 0;
    if (n >= this.perToken)
      throw new TooManyStreamsError(
        `token ${tokenId} has ${n} streams open, the most this server allows a token (GANTRY_STREAMS_PER_TOKEN=${this.perToken}): close one (a stream's slot is freed when its connection closes)`,
      );
    this.open.set(tokenId, n + 1);
    let held = true;
    // The connection's close, not the handler's end: a stream's handler may return before its
    // connection goes, and a client that vanishes ends it only by closing.
    reply.raw.once('close', () => {
      if (!held) return;
      held = false;
      const left = (this.open.get(tokenId) ?? 1) - 1;
      if (left > 0) this.open.set(tokenId, left);
      else this.open.delete(tokenId);
    });
  }
}
