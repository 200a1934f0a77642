import { describe, expect, it } from 'vitest';
import { allElements, parseXml, textOf, type XmlElement } from '../../test/support/xml-tree.js';
import { CHART, CHART_ARRIVED_FROM, chartScale, shareChartSvg } from './share-chart-svg.js';
import { ARRIVED, CURVE_ARRIVED, PAPER_UNALLOCATED, type PolicyRun } from './share-experiment.js';

/** A run whose curve is a line we can check point by point: 100 − arrived up to 90, then flat at `floor`; a gap at 120–122 for `gapped`. */
function run(policy: PolicyRun['policy'], floor: number, gapped = false): PolicyRun {
  const curve = CURVE_ARRIVED.map((a) => (gapped && a >= 120 && a <= 122 ? null : a <= 90 ? 100 - a : floor + (130 - a) / 100));
  return { list: 'default', policy, unallocated: [10, floor, floor, floor, floor], curve, perSeed: [], wallSeconds: 0 };
}

const runs = [run('fgd', 4.5), run('best-fit', 6.9, true)];
const info = { list: 'default' as const, file: 'pods & <more>.csv', targetShapes: 3, paper: PAPER_UNALLOCATED.default };
const svg = shareChartSvg({ info, runs, curveArrived: CURVE_ARRIVED, arrived: ARRIVED, seeds: [42, 43] });
const root = parseXml(svg);
const els = allElements(root);
const byClass = (c: string) => els.filter((e) => e.attrs.class === c);
// The largest figure drawn is 100 − 80 = 20 (the curves at 80 %): the y axis goes to 20.
const scale = chartScale([CHART_ARRIVED_FROM, 130], 20);

/** `M x y L x y …` as segments of [x, y] points. */
function segments(d: string): [number, number][][] {
  const tokens = d.split(' ');
  const out: [number, number][][] = [];
  for (let k = 0; k < tokens.length; k += 3) {
    const point: [number, number] = [Number(tokens[k + 1]), Number(tokens[k + 2])];
    if (tokens[k] === 'M') out.push([point]);
    else if (tokens[k] === 'L') out[out.length - 1]!.push(point);
    else throw new Error(`unexpected path command ${tokens[k]}`);
  }
  return out;
}

describe('shareChartSvg', () => {
  it('is well-formed SVG with a size, a title, axis labels and text escaped', () => {
    expect(root.name).toBe('svg');
    expect(root.attrs.xmlns).toBe('http://www.w3.org/2000/svg');
    expect(root.attrs.viewBox).toBe(`0 0 ${CHART.width} ${CHART.height}`);
    expect(textOf(byClass('title')[0]!)).toBe('Unallocated GPUs against arrived workload: pods & <more>.csv');
    expect(textOf(byClass('x-label')[0]!)).toBe("arrived workload (% of the cluster's GPUs)");
    expect(textOf(byClass('y-label')[0]!)).toBe('unallocated GPUs (%)');
    expect(parseXml('<a><b x="1"/>&amp;</a>').children[0]!.attrs.x).toBe('1'); // the reader itself reads
    expect(() => parseXml('<a><b></a>')).toThrow(/closes/);
    expect(() => parseXml('<a>&</a>')).toThrow(/bare/);
  });

  it('maps the domain onto the plot area: 80 % arrived at the y axis, 130 % at its right end, 0 at the bottom, the top figure at the top', () => {
    expect([scale.x(CHART_ARRIVED_FROM), scale.x(130)]).toEqual([CHART.left, CHART.width - CHART.right]);
    expect([scale.y(0), scale.y(20)]).toEqual([CHART.height - CHART.bottom, CHART.top]);
    const axes = byClass('axes')[0]!.children.map((l) => [l.attrs.x1, l.attrs.y1, l.attrs.x2, l.attrs.y2].map(Number));
    expect(axes).toContainEqual([CHART.left, CHART.height - CHART.bottom, CHART.width - CHART.right, CHART.height - CHART.bottom]);
  });

  it('draws one line per policy through its curve, every point where the numbers say, a gap where a point is missing', () => {
    const paths = byClass('series');
    expect(paths.map((p) => p.attrs['data-policy'])).toEqual(['fgd', 'best-fit']);
    for (const [k, p] of paths.entries()) {
      const want = CURVE_ARRIVED.flatMap((a, i) => {
        const y = runs[k]!.curve[i];
        return a >= CHART_ARRIVED_FROM && y !== null && y !== undefined ? [[a, y] as const] : [];
      });
      const got = segments(p.attrs.d!);
      expect(got.length).toBe(k === 0 ? 1 : 2); // best-fit: no point at 120–122
      const points = got.flat();
      expect(points).toHaveLength(want.length);
      points.forEach(([x, y], i) => {
        expect(x).toBeCloseTo(scale.x(want[i]![0]), 1);
        expect(y).toBeCloseTo(scale.y(want[i]![1]), 1);
      });
      expect(points[0]![0]).toBeCloseTo(CHART.left, 1); // starts at the axis
    }
    // Lower is better and lower is further down: fgd's line sits below best-fit's at 100 %.
    const at100 = (p: XmlElement) => segments(p.attrs.d!).flat()[100 - CHART_ARRIVED_FROM]![1];
    expect(at100(paths[0]!)).toBeGreaterThan(at100(paths[1]!));
  });

  it("marks the paper's FGD and BestFit figures at its arrived points, in the colour of the policy that reproduces them", () => {
    const groups = byClass('paper');
    expect(groups.map((g) => g.attrs['data-paper'])).toEqual(['BestFit', 'FGD']);
    for (const g of groups) {
      const name = g.attrs['data-paper']!;
      expect(g.children.map((m) => Number(m.attrs['data-arrived']))).toEqual([...ARRIVED]);
      g.children.forEach((m, i) => {
        const u = PAPER_UNALLOCATED.default[name]![i]!;
        expect(Number(m.attrs['data-unallocated'])).toBe(u);
        const [cx, cy] =
          m.name === 'circle' ? [Number(m.attrs.cx), Number(m.attrs.cy)] : m.name === 'rect' ? [Number(m.attrs.x) + 3.5, Number(m.attrs.y) + 3.5] : [NaN, NaN];
        expect(cx).toBeCloseTo(scale.x(ARRIVED[i]!), 1);
        expect(cy).toBeCloseTo(scale.y(u), 1);
      });
      const policy = name === 'FGD' ? 'fgd' : 'best-fit';
      const line = byClass('series').find((p) => p.attrs['data-policy'] === policy)!;
      expect(g.children[0]!.attrs.stroke).toBe(line.attrs.stroke);
    }
  });

  it('has a legend naming every line and every set of markers', () => {
    const legend = textOf(byClass('legend')[0]!);
    for (const want of ['Gantry fgd (default)', 'Gantry best-fit', 'paper FGD', 'paper BestFit']) expect(legend).toContain(want);
  });

  it('scales y to the largest figure drawn, up to a multiple of 5', () => {
    const low = shareChartSvg({
      info,
      runs: [{ ...run('fgd', 3), curve: CURVE_ARRIVED.map(() => 3) }],
      curveArrived: CURVE_ARRIVED,
      arrived: ARRIVED,
      seeds: [1],
    });
    const ticks = allElements(parseXml(low))
      .filter((e) => e.attrs.class === 'ticks')[0]!
      .children.filter((t) => t.attrs['text-anchor'] === 'end')
      .map((t) => Number(t.text));
    // The paper's markers (up to 10.02 at 90 %) are drawn too: the axis reaches 15, in steps of 5.
    expect(ticks).toEqual([0, 5, 10, 15]);
  });
});
