import type { ReactNode } from 'react';
import { errorText } from '../../lib/error-text';

/** What a page shows when there is nothing to show yet, and what to do about it. */
export function EmptyState({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="empty">
      <p className="empty-title">{title}</p>
      {children ? <div className="empty-body">{children}</div> : null}
    </div>
  );
}

/** A request that failed, said plainly, with a way to try again. */
export function ErrorNote({ error, retry }: { error: unknown; retry?: () => void }) {
  return (
    <div className="error-note" role="alert">
      {errorText(error)}
      {retry ? (
        <button type="button" className="button button-small" onClick={retry}>
          Try again
        </button>
      ) : null}
    </div>
  );
}
