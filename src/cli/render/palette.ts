import pc from 'picocolors';

export type Colors = ReturnType<typeof pc.createColors>;

/** Colours on or off; undefined defers to picocolors (NO_COLOR, FORCE_COLOR, TTY detection). */
export function palette(color?: boolean): Colors {
  return pc.createColors(color ?? pc.isColorSupported);
}
