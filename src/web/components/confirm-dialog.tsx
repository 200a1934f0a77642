import { useEffect, useId, useRef, type ReactNode } from 'react';

/**
 * A modal question with two buttons, on the browser's own <dialog>: focus moves into it and
 * stays there, Escape closes it, and the safe choice has the focus first. `tone`: the confirm
 * button red for what cannot be undone (a cancel), blue for what only adds (a rerun makes a new
 * job); `confirmDisabled` while there is nothing to confirm yet (a plan still loading, or refused).
 */
export function ConfirmDialog(p: {
  open: boolean;
  title: string;
  children: ReactNode;
  confirm: string;
  cancel: string;
  busy?: boolean;
  confirmDisabled?: boolean;
  tone?: 'danger' | 'primary';
  wide?: boolean;
  onConfirm: () => void;
  onClose: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  // Its own id: a job page can hold two (cancel, and rerun), and each must be named by its own title.
  const titleId = useId();
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (p.open && !d.open) d.showModal();
    if (!p.open && d.open) d.close();
  }, [p.open]);
  return (
    <dialog ref={ref} className={`dialog${p.wide ? ' dialog-wide' : ''}`} aria-labelledby={titleId} onClose={p.onClose} onCancel={p.onClose}>
      <h2 id={titleId}>{p.title}</h2>
      <div className="dialog-body">{p.children}</div>
      <div className="dialog-actions">
        <button type="button" className="button" autoFocus onClick={p.onClose}>
          {p.cancel}
        </button>
        <button
          type="button"
          className={`button ${p.tone === 'primary' ? 'button-primary' : 'button-danger'}`}
          disabled={p.busy || p.confirmDisabled}
          onClick={p.onConfirm}
        >
          {p.busy ? 'Working…' : p.confirm}
        </button>
      </div>
    </dialog>
  );
}
