/**
 * `gantry sim`'s table for a terminal: per pod list, a row per policy and a column per arrived
 * workload of the paper, then the paper's own rows for reference. Plain aligned text (no colour):
 * it goes into logs, issues and the README as it is.
 */
import { DEFAULT_SHARE_POLICY } from '../scheduler/share-policies.js';
import { paperPolicyOf, type ShareExperiment } from './share-experiment.js';

const fixed = (x: number | null) => (x === null ? '–' : x.toFixed(2));

/** Columns padded to their widest cell: the first left-aligned, the figures right-aligned. */
function aligned(rows: readonly string[][]): string[] {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => [...(r[c] ?? '')].length)));
  return rows.map((r) =>
    r
      .map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!)))
      .join('  ')
      .trimEnd(),
  );
}

function seedsText(seeds: readonly number[]): string {
  const contiguous = seeds.every((s, i) => i === 0 || s === seeds[i - 1]! + 1);
  if (seeds.length === 1) return `seed ${seeds[0]}`;
  return contiguous ? `mean of seeds ${seeds[0]}–${seeds[seeds.length - 1]}` : `mean of seeds ${seeds.join(', ')}`;
}

export function shareTableText(e: ShareExperiment): string {
  const blocks = e.lists.map((info) => {
    const head = ['policy', ...e.arrived.map((a) => `${a} %`)];
    const rows = [head];
    for (const r of e.runs.filter((x) => x.list === info.list)) {
      const paper = paperPolicyOf(r.policy);
      const name = `${r.policy}${r.policy === DEFAULT_SHARE_POLICY ? ' (default)' : ''}`;
      rows.push([paper === null ? name : `${name} ~ paper ${paper}`, ...r.unallocated.map(fixed)]);
    }
    const paperRows = Object.entries(info.paper);
    if (paperRows.length > 0) {
      rows.push(head.map(() => ''));
      for (const [name, values] of paperRows) rows.push([`paper ${name}`, ...values.map(fixed)]);
    }
    const title = `${info.file}: unallocated GPU % at an arrived workload of x % of the cluster's GPUs (${seedsText(e.seeds)}; lower is better)`;
    return [title, '', ...aligned(rows).map((l) => `  ${l}`.trimEnd())].join('\n');
  });
  const footer = `${e.machines} GPU machines, ${e.gpus} GPUs; ${e.runs.length} policy × list runs of ${e.seeds.length} seed${e.seeds.length === 1 ? '' : 's'} in ${e.totalSeconds.toFixed(1)} s.`;
  return `${blocks.join('\n\n')}\n\n${footer}\n`;
}
