/**
 * A state as a coloured badge. The colours say the same thing everywhere: green done, blue
 * running, violet placed, amber waiting for a machine, grey waiting for something else, red
 * failed, and a darker grey for what was stopped on purpose (canceled, skipped).
 */
export function StateBadge({ state, title }: { state: string; title?: string }) {
  return (
    <span className={`badge state-${state}`} title={title}>
      {state}
    </span>
  );
}
