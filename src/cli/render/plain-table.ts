import Table from 'cli-table3';

// Borderless, like kubectl: easy to read, and `awk '{print $1}'` still works on it.
const NO_BORDERS = {
  top: '',
  'top-mid': '',
  'top-left': '',
  'top-right': '',
  bottom: '',
  'bottom-mid': '',
  'bottom-left': '',
  'bottom-right': '',
  left: '',
  'left-mid': '',
  mid: '',
  'mid-mid': '',
  right: '',
  'right-mid': '',
  middle: '  ',
};

/** A column-aligned table; cells may carry colour codes (widths ignore them). */
export function plainTable(head: string[], rows: string[][]): string {
  // cli-table3 colours headings red by default; style them ourselves (or not at all).
  const table = new Table({ head, chars: NO_BORDERS, style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 } });
  table.push(...rows);
  return table
    .toString()
    .split('\n')
    .map((line) => line.trimEnd())
    .join('\n');
}
