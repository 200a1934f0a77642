/** No HTTP answer at all: refused, unresolvable, reset or timed out. */
export class ConnectionError extends Error {
  constructor(
    readonly baseUrl: string,
    readonly causeText: string,
    /** The socket error's code (ECONNREFUSED, …), when there was one. */
    readonly code?: string,
  ) {
    super(`cannot reach Gantry at ${baseUrl}: ${causeText}; is it running? (gantry up)`);
    this.name = 'ConnectionError';
  }
}
