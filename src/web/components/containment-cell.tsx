import type { ContainmentReport } from '../../api/contract/containment';

const ENFORCED = [
  ['memory', 'mem'],
  ['cpu', 'cpu'],
  ['pids', 'pids'],
  ['devices', 'dev'],
] as const;

/** The report in words, one line each: what the hover shows, and what a screen reader reads. */
export function describeContainment(c: ContainmentReport): string {
  const lines = [
    `mechanism: ${c.mechanism}`,
    ...ENFORCED.map(([field]) => `${field}: ${c[field] ? 'enforced' : 'not enforced'}`),
    `kill: ${c.kill}`,
    `user: ${c.user}`,
    `sandbox: ${c.sandbox ?? 'off'}`,
  ];
  return [...lines, ...c.problems.map((p) => `problem: ${p}`)].join('\n');
}

/**
 * A machine's containment, as its agent reported it (docs/containment.md): each of memory, CPU,
 * pids and devices, enforced or not, the mechanism and the user beneath; the whole report on
 * hover; the problems (why something is not enforced) in a disclosure. "not reported" for an agent
 * before containment.
 */
export function ContainmentCell({ containment }: { containment: ContainmentReport | null | undefined }) {
  if (!containment) {
    return (
      <td data-containment="unknown">
        <span className="muted" title="Its agent did not report what it enforces (an agent before containment): assume nothing is.">
          not reported
        </span>
      </td>
    );
  }
  const c = containment;
  return (
    <td data-containment={c.mechanism}>
      <span className="contain" title={describeContainment(c)} aria-label={describeContainment(c)}>
        {ENFORCED.map(([field, word]) => (
          <span key={field} className={`contain-item${c[field] ? ' on' : ''}`}>
            {word}
          </span>
        ))}
      </span>
      <div className="muted small">
        {c.mechanism} · {c.kill}
        {c.sandbox ? ` · ${c.sandbox}` : ''}
      </div>
      {c.problems.length ? (
        <details className="contain-problems small">
          <summary>
            {c.problems.length} problem{c.problems.length === 1 ? '' : 's'}
          </summary>
          <ul>
            {c.problems.map((p) => (
              <li key={p}>{p}</li>
            ))}
          </ul>
        </details>
      ) : null}
    </td>
  );
}
