/**
 * A stage a rerun reused (docs/rerun.md): `succeeded` from the start with another attempt's
 * outputs; it did not run in this job. Beside its state, not instead of it: the state stays
 * `succeeded`, and reuse is where its outputs came from. The graph draws the same pill in SVG.
 */
export function ReusedBadge({ title }: { title?: string }) {
  return (
    <span className="badge badge-reused" title={title}>
      reused
    </span>
  );
}
