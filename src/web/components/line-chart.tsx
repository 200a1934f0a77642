import { formatRelative } from '../format/format-time';
import { linePath, niceCeil, type Point } from './chart-scale';

export interface Series {
  name: string;
  /** Its colour's place in SERIES_COLOURS: the same pool has the same colour in every chart. */
  colour: number;
  points: Point[];
}

const WIDTH = 520;
const HEIGHT = 140;
const LEFT = 44;
const TOP = 8;
const BOTTOM = 20;
/** Colour-blind-safe, in the order pools are listed (cpu first). */
export const SERIES_COLOURS = ['#2563eb', '#d97706', '#059669', '#db2777', '#7c3aed', '#0891b2', '#65a30d', '#dc2626'];

/**
 * A small line chart over time: one line per series, a y axis from 0 to a round top, the window's
 * start and end below. SVG drawn here, no chart library: a few paths.
 */
export function LineChart(p: { title: string; series: Series[]; t0: number; t1: number; format: (v: number) => string; floor?: number; now: number }) {
  const max = Math.max(0, ...p.series.flatMap((s) => s.points.map((x) => x.v ?? 0)));
  const top = niceCeil(max, p.floor ?? 1);
  const box = { t0: p.t0, t1: p.t1, top, width: WIDTH - LEFT, height: HEIGHT - TOP - BOTTOM };
  const latest = (s: Series) => [...s.points].reverse().find((x) => x.v !== null)?.v ?? null;
  return (
    <figure className="chart">
      <figcaption>{p.title}</figcaption>
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        role="img"
        aria-label={`${p.title}: ${p.series.map((s) => `${s.name} ${latest(s) === null ? 'no data' : p.format(latest(s)!)}`).join(', ')}`}
      >
        <g transform={`translate(${LEFT} ${TOP})`}>
          {[0, 0.5, 1].map((f) => (
            <g key={f}>
              <line className="chart-grid" x1={0} x2={box.width} y1={box.height * (1 - f)} y2={box.height * (1 - f)} />
              <text className="chart-label" x={-6} y={box.height * (1 - f) + 4} textAnchor="end">
                {p.format(top * f)}
              </text>
            </g>
          ))}
          {p.series.map((s) => (
            <path key={s.name} className="chart-line" d={linePath(s.points, box)} stroke={SERIES_COLOURS[s.colour % SERIES_COLOURS.length]}>
              <title>{`${s.name}: ${latest(s) === null ? 'no data' : p.format(latest(s)!)} now`}</title>
            </path>
          ))}
          <text className="chart-label" x={0} y={HEIGHT - TOP - 4}>
            {formatRelative(p.t0, p.now)}
          </text>
          <text className="chart-label" x={box.width} y={HEIGHT - TOP - 4} textAnchor="end">
            now
          </text>
        </g>
      </svg>
      <ul className="chart-legend">
        {p.series.map((s) => (
          <li key={s.name}>
            <span className="swatch" data-colour={s.colour % SERIES_COLOURS.length} aria-hidden="true" />
            {s.name} <span className="muted">{latest(s) === null ? '–' : p.format(latest(s)!)}</span>
          </li>
        ))}
      </ul>
    </figure>
  );
}
