/**
 * A transition table maps each state to the states it may move to. Code that changes a state asks
 * `canTransition` first; tests walk every pair of states through it, so the table is the single
 * statement of what may happen.
 */
export type TransitionTable<S extends string> = Readonly<Record<S, readonly S[]>>;

export function canTransition<S extends string>(table: TransitionTable<S>, from: S, to: S): boolean {
  return table[from].includes(to);
}

/** States with no way out. */
export function terminalStates<S extends string>(table: TransitionTable<S>): S[] {
  return (Object.keys(table) as S[]).filter((s) => table[s].length === 0);
}
