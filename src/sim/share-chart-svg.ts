/**
 * The chart `gantry sim --out` writes per pod list: unallocated GPU % (y) against arrived workload
 * % (x), one line per policy (mean of seeds), the paper's figures as markers. Hand-written SVG
 * (no charting package for one chart kind): plain elements, no script, no external reference, so
 * it renders the same in a browser, on GitHub and in an image viewer.
 */
import { DEFAULT_SHARE_POLICY } from '../scheduler/share-policies.js';
import { paperPolicyOf, type ListInfo, type PolicyRun } from './share-experiment.js';

/** The chart's frame, in SVG units: the plot area sits inside the margins, the legend on the right. */
export const CHART = { width: 760, height: 440, left: 64, right: 190, top: 48, bottom: 56 } as const;

/**
 * The chart starts at 80 % arrived, though the curves start at 50: below 90 % every policy places
 * everything (unallocated = 100 − arrived), and a y axis tall enough for 50 % would squeeze the
 * 2–3 points between policies past 90 % into a few pixels.
 */
export const CHART_ARRIVED_FROM = 80;

/** Line colours by policy order (Okabe–Ito: told apart with the common colour blindnesses); then grey. */
const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000'];
/** Marker shapes for the paper's policies, in the order of its table. */
const MARKERS = ['circle', 'square', 'diamond', 'triangle'] as const;
type Marker = (typeof MARKERS)[number];

export interface ChartInput {
  info: ListInfo;
  runs: readonly PolicyRun[];
  curveArrived: readonly number[];
  /** The paper's arrived points (ARRIVED), where its markers go. */
  arrived: readonly number[];
  seeds: readonly number[];
}

/** Where the data sits: linear scales from the x and y domains to the plot area. */
export interface ChartScale {
  x: (arrived: number) => number;
  y: (unallocated: number) => number;
  xDomain: readonly [number, number];
  yDomain: readonly [number, number];
}

export function chartScale(xDomain: readonly [number, number], yMax: number): ChartScale {
  const plotW = CHART.width - CHART.left - CHART.right;
  const plotH = CHART.height - CHART.top - CHART.bottom;
  return {
    x: (a) => CHART.left + ((a - xDomain[0]) / (xDomain[1] - xDomain[0])) * plotW,
    y: (u) => CHART.top + plotH - (u / yMax) * plotH,
    xDomain,
    yDomain: [0, yMax],
  };
}

/** The y axis' top: the largest figure drawn, up to the next multiple of 5 (at least 5). */
function yMaxOf(values: readonly number[]): number {
  return Math.max(5, Math.ceil(Math.max(0, ...values) / 5) * 5);
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const n = (x: number) => String(Math.round(x * 100) / 100);

/** The paper's policies to mark: FGD and BestFit always (the paper's best and its baseline), and any a run reproduces. */
function paperMarked(info: ListInfo, runs: readonly PolicyRun[]): string[] {
  const reproduced = runs.map((r) => paperPolicyOf(r.policy));
  return Object.keys(info.paper).filter((name) => name === 'FGD' || name === 'BestFit' || reproduced.includes(name));
}

function marker(shape: Marker, x: number, y: number, colour: string, attrs: string): string {
  const common = `fill="white" stroke="${colour}" stroke-width="1.6" ${attrs}`;
  switch (shape) {
    case 'circle':
      return `<circle cx="${n(x)}" cy="${n(y)}" r="4" ${common}/>`;
    case 'square':
      return `<rect x="${n(x - 3.5)}" y="${n(y - 3.5)}" width="7" height="7" ${common}/>`;
    case 'diamond':
      return `<polygon points="${n(x)},${n(y - 5)} ${n(x + 5)},${n(y)} ${n(x)},${n(y + 5)} ${n(x - 5)},${n(y)}" ${common}/>`;
    case 'triangle':
      return `<polygon points="${n(x)},${n(y - 5)} ${n(x + 5)},${n(y + 4)} ${n(x - 5)},${n(y + 4)}" ${common}/>`;
  }
}

/** The line's path: a gap (a point no seed reached) starts a new segment. */
function linePath(xs: readonly number[], ys: readonly (number | null)[], s: ChartScale): string {
  const cmds: string[] = [];
  let pen = false;
  ys.forEach((y, i) => {
    if (xs[i]! < s.xDomain[0] || xs[i]! > s.xDomain[1]) return;
    if (y === null) {
      pen = false;
      return;
    }
    cmds.push(`${pen ? 'L' : 'M'} ${n(s.x(xs[i]!))} ${n(s.y(y))}`);
    pen = true;
  });
  return cmds.join(' ');
}

export function shareChartSvg(input: ChartInput): string {
  const { info, runs, curveArrived, arrived, seeds } = input;
  const xDomain = [Math.max(CHART_ARRIVED_FROM, curveArrived[0] ?? 0), curveArrived[curveArrived.length - 1] ?? 100] as const;
  const marked = paperMarked(info, runs);
  const inX = (a: number) => a >= xDomain[0] && a <= xDomain[1];
  const drawn = [
    ...runs.flatMap((r) => r.curve.filter((y, i): y is number => y !== null && inX(curveArrived[i]!))),
    ...marked.flatMap((name) => info.paper[name]!.filter((_, i) => inX(arrived[i]!))),
  ];
  const s = chartScale(xDomain, yMaxOf(drawn));
  const colourOf = (policy: string) =>
    COLOURS[
      Math.min(
        runs.findIndex((r) => r.policy === policy),
        COLOURS.length - 1,
      )
    ]!;
  const plotRight = CHART.width - CHART.right;
  const plotBottom = CHART.height - CHART.bottom;
  const seedText = seeds.length === 1 ? `seed ${seeds[0]}` : `mean of ${seeds.length} seeds`;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${CHART.width}" height="${CHART.height}" viewBox="0 0 ${CHART.width} ${CHART.height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<title>Unallocated GPUs against arrived workload, ${esc(info.file)}</title>`,
    `<rect width="${CHART.width}" height="${CHART.height}" fill="white"/>`,
    `<text class="title" x="${CHART.left}" y="22" font-size="15" font-weight="bold">Unallocated GPUs against arrived workload: ${esc(info.file)}</text>`,
    `<text x="${CHART.left}" y="38" fill="#555">Gantry's share planner on the Alibaba trace, ${esc(seedText)}; markers: the FGD paper's figures (lower is better)</text>`,
  );
  // Grid and ticks: x every 10 %, y every 5 points (10 on a tall axis, 2 on a short one).
  out.push('<g class="grid" stroke="#e4e4e4" stroke-width="1">');
  const yStep = s.yDomain[1] > 50 ? 10 : s.yDomain[1] <= 10 ? 2 : 5;
  for (let y = 0; y <= s.yDomain[1]; y += yStep) out.push(`<line x1="${CHART.left}" y1="${n(s.y(y))}" x2="${plotRight}" y2="${n(s.y(y))}"/>`);
  for (let x = Math.ceil(xDomain[0] / 10) * 10; x <= xDomain[1]; x += 10)
    out.push(`<line x1="${n(s.x(x))}" y1="${CHART.top}" x2="${n(s.x(x))}" y2="${plotBottom}"/>`);
  out.push('</g>');
  out.push('<g class="axes" stroke="#333" stroke-width="1.2" fill="none">');
  out.push(`<line x1="${CHART.left}" y1="${plotBottom}" x2="${plotRight}" y2="${plotBottom}"/>`);
  out.push(`<line x1="${CHART.left}" y1="${CHART.top}" x2="${CHART.left}" y2="${plotBottom}"/>`);
  out.push('</g>');
  out.push('<g class="ticks" fill="#333">');
  for (let y = 0; y <= s.yDomain[1]; y += yStep) out.push(`<text x="${CHART.left - 8}" y="${n(s.y(y) + 4)}" text-anchor="end">${y}</text>`);
  for (let x = Math.ceil(xDomain[0] / 10) * 10; x <= xDomain[1]; x += 10)
    out.push(`<text x="${n(s.x(x))}" y="${plotBottom + 18}" text-anchor="middle">${x}</text>`);
  out.push('</g>');
  out.push(
    `<text class="x-label" x="${n((CHART.left + plotRight) / 2)}" y="${CHART.height - 14}" text-anchor="middle">arrived workload (% of the cluster's GPUs)</text>`,
    `<text class="y-label" transform="translate(18 ${n((CHART.top + plotBottom) / 2)}) rotate(-90)" text-anchor="middle">unallocated GPUs (%)</text>`,
  );
  // One line per policy.
  for (const r of runs) {
    out.push(
      `<path class="series" data-policy="${esc(r.policy)}" d="${linePath(curveArrived, r.curve, s)}" fill="none" stroke="${colourOf(r.policy)}" stroke-width="2" stroke-linejoin="round"/>`,
    );
  }
  // The paper's figures, coloured as the Gantry policy that reproduces them (grey when none ran).
  const paperColour = (name: string) => {
    const r = runs.find((x) => paperPolicyOf(x.policy) === name);
    return r ? colourOf(r.policy) : '#777';
  };
  marked.forEach((name, k) => {
    const shape = MARKERS[k % MARKERS.length]!;
    out.push(`<g class="paper" data-paper="${esc(name)}">`);
    info.paper[name]!.forEach((u, i) => {
      const a = arrived[i]!;
      if (inX(a)) out.push(marker(shape, s.x(a), s.y(u), paperColour(name), `data-arrived="${a}" data-unallocated="${u}"`));
    });
    out.push('</g>');
  });
  // Legend: the policies' lines, then the paper's markers.
  const lx = plotRight + 18;
  let ly = CHART.top + 8;
  out.push('<g class="legend">');
  for (const r of runs) {
    const label = `${r.policy}${r.policy === DEFAULT_SHARE_POLICY ? ' (default)' : ''}`;
    out.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 24}" y2="${ly}" stroke="${colourOf(r.policy)}" stroke-width="2"/>`);
    out.push(`<text x="${lx + 32}" y="${ly + 4}">Gantry ${esc(label)}</text>`);
    ly += 20;
  }
  marked.forEach((name, k) => {
    out.push(marker(MARKERS[k % MARKERS.length]!, lx + 12, ly, paperColour(name), ''));
    out.push(`<text x="${lx + 32}" y="${ly + 4}">paper ${esc(name)}</text>`);
    ly += 20;
  });
  out.push('</g>', '</svg>', '');
  return out.join('\n');
}
