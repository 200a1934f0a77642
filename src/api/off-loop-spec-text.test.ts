import { describe, expect, it } from 'vitest';
import { issuesOf } from '../../test/support/validation-issues.js';
import { parseJobBatchText, parseJobSpecText } from '../spec/job-spec-text.js';
import { defaultSpecThreads, INLINE_SPEC_CHARS, OffLoopSpecText } from './off-loop-spec-text.js';

/** A valid spec of about `chars` characters. */
const specOf = (chars: number) => {
  const stages = Array.from(
    { length: Math.ceil(chars / 10_000) },
    (_, i) => `  - name: s${i}\n    command: [${Array.from({ length: 800 }, (_, j) => `--a${j}=1`).join(', ')}]\n`,
  );
  return `name: large\nstages:\n${stages.join('')}`;
};

describe('OffLoopSpecText', () => {
  it('reads a large text on its thread exactly as on the loop, values and refusals alike', async () => {
    const texts = new OffLoopSpecText();
    try {
      const text = specOf(200_000);
      expect(text.length).toBeGreaterThan(INLINE_SPEC_CHARS);
      expect(await texts.read('spec', text)).toEqual(parseJobSpecText(text));
      const batch = `jobs:\n${text.replace(/^/gm, '    ').replace(/^ {4}name: large/m, '  - name: large')}`;
      expect(await texts.read('batch', batch)).toEqual(parseJobBatchText(batch));
      // Refused on the thread (a syntax error past the scan), with the same issues.
      const bad = `${text}  - name: [unclosed\n`;
      const refused = await texts.read('spec', bad).catch((e: unknown) => e);
      expect(
        issuesOf(() => {
          throw refused;
        }),
      ).toEqual(issuesOf(() => parseJobSpecText(bad)));
      // Past the bounds: refused before the thread.
      const deep = `name: j\nstages: ${'['.repeat(INLINE_SPEC_CHARS)}`;
      expect(await texts.read('spec', deep).catch((e: unknown) => (e as Error).message)).toMatch(/nests deeper than 32 levels/);
    } finally {
      await texts.close();
    }
  });

  it('reads texts that arrive together on a pool of threads, each to the least busy, started as needed', async () => {
    expect([1, 2, 4, 8, 16, 64].map((cores) => defaultSpecThreads(cores))).toEqual([2, 2, 2, 4, 4, 4]);
    const texts = new OffLoopSpecText(undefined, 2);
    try {
      expect(texts.running()).toBe(0);
      const one = specOf(100_000);
      expect(await texts.read('spec', one)).toEqual(parseJobSpecText(one));
      // One at a time: the idle thread takes each, no second is started.
      expect(await texts.read('spec', one)).toEqual(parseJobSpecText(one));
      expect(texts.running()).toBe(1);
      // Three together: a second thread starts, the third text waits behind one of the two.
      const many = [specOf(100_000), specOf(150_000), specOf(120_000)];
      const read = many.map((t) => texts.read('spec', t));
      expect(texts.running()).toBe(2);
      expect(await Promise.all(read)).toEqual(many.map((t) => parseJobSpecText(t)));
    } finally {
      await texts.close();
    }
    expect(texts.running()).toBe(0);
  });

  it('a thread that runs out of its heap refuses the text (400), and the next read starts a new one', async () => {
    const starved = new OffLoopSpecText(2);
    const text = specOf(400_000);
    try {
      const e = await starved.read('spec', text).catch((err: unknown) => err);
      expect(
        issuesOf(() => {
          throw e;
        }),
      ).toEqual([{ path: '', message: expect.stringMatching(/^cannot read the spec: the parser stopped/) }]);
    } finally {
      await starved.close();
    }
    const texts = new OffLoopSpecText();
    try {
      expect(await texts.read('spec', text)).toEqual(parseJobSpecText(text));
    } finally {
      await texts.close();
    }
  });
});
