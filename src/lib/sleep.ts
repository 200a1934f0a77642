/**
 * Resolves after `ms`, or as soon as `signal` aborts (at once when it has already): it never
 * rejects, so a loop that sleeps between tries looks at its signal afterwards and decides, and an
 * abort never leaves a timer holding the process open.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
