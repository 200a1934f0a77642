import { useMemo, type KeyboardEvent } from 'react';
import type { StageView } from '../../api/contract/job-view';
import { DEFAULT_SIZES, layoutDag } from './dag-layout';
import { boxChars, boxText, boxTitle, boxWidth, clip } from './dag-text';

const H = DEFAULT_SIZES.nodeHeight;

/**
 * A job's stages as a graph: each box coloured by its state, edges for `needs`, left to right by
 * depth (dag-layout.ts). A box is a button: click it, or focus it and press Enter, to select the stage.
 */
export function DagView({ stages, selected, onSelect }: { stages: StageView[]; selected: string | null; onSelect: (name: string) => void }) {
  // Boxes as wide as their texts need (up to a limit; what is cut still is whole in the box's title).
  const W = useMemo(() => boxWidth(stages), [stages]);
  const layout = useMemo(() => layoutDag(stages, { ...DEFAULT_SIZES, nodeWidth: W }), [stages, W]);
  const byName = new Map(stages.map((s) => [s.name, s]));
  const key = (name: string) => (e: KeyboardEvent) => {
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      onSelect(name);
    }
  };
  return (
    <div className="dag-scroll">
      <svg
        className="dag"
        width={layout.width}
        height={layout.height}
        viewBox={`0 0 ${layout.width} ${layout.height}`}
        aria-label="the job's stages and what each needs"
      >
        <defs>
          <marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto">
            <path d="M0,0 L8,4 L0,8 z" className="dag-arrow" />
          </marker>
        </defs>
        {layout.edges.map((e) => (
          <path key={`${e.from}>${e.to}`} d={e.path} className={`dag-edge edge-${byName.get(e.from)?.state ?? ''}`} markerEnd="url(#arrow)" />
        ))}
        {layout.boxes.map((b) => {
          const s = byName.get(b.name)!;
          const a = s.attempts.at(-1);
          const progress = s.state === 'running' ? a?.progress?.fraction : undefined;
          const t = boxText(s);
          const fits = boxChars(W, s.reused !== undefined);
          return (
            <g
              key={b.name}
              transform={`translate(${b.x} ${b.y})`}
              className={`dag-node state-${s.state}${selected === b.name ? ' selected' : ''}`}
              role="button"
              tabIndex={0}
              aria-pressed={selected === b.name}
              aria-label={`stage ${s.name}, ${s.state}${s.reused ? `, reused from job ${s.reused.jobId}` : ''}`}
              data-stage={s.name}
              data-state={s.state}
              data-reused={s.reused?.jobId}
              onClick={() => onSelect(b.name)}
              onKeyDown={key(b.name)}
            >
              <title>{boxTitle(s)}</title>
              <rect className="dag-box" width={W} height={H} rx={7} />
              <rect className="dag-band" width={6} height={H} rx={3} />
              <text className="dag-name" x={14} y={20}>
                {clip(t.name, fits.name)}
              </text>
              {s.reused ? (
                // The ReusedBadge pill, drawn in SVG: the stage's outputs are another job's (its id on the third line, and a link in the panel).
                <g className="dag-reused">
                  <rect x={W - 62} y={7} width={54} height={17} rx={8.5} />
                  <text x={W - 35} y={19.5} textAnchor="middle">
                    reused
                  </text>
                </g>
              ) : null}
              <text x={14} y={37}>
                <tspan className="dag-state">{s.state}</tspan>
                <tspan className="dag-detail"> · {clip(t.detail, fits.line - s.state.length - 3)}</tspan>
              </text>
              <text className="dag-detail" x={14} y={52}>
                {clip(t.third, fits.line)}
              </text>
              {progress !== undefined ? (
                <>
                  <rect className="dag-progress-track" x={120} y={46} width={W - 130} height={5} rx={2} />
                  <rect className="dag-progress" x={120} y={46} width={(W - 130) * Math.min(1, Math.max(0, progress))} height={5} rx={2} />
                </>
              ) : null}
            </g>
          );
        })}
      </svg>
    </div>
  );
}
