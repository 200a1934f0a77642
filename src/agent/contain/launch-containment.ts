/**
 * What an attempt's command is started inside (docs/containment.md, "Joining before exec"): given to
 * every way the agent starts a command (the Python launcher, the bash launcher, its own spawn), which
 * all do the same, in this order, in the command's own process before it `exec`s: write its pid into
 * each of `procsFiles`, drop to `user` (no supplementary groups, no new privileges), then exec `wrap`
 * followed by the command. So nothing the command forks was ever outside its cgroups or root.
 */
export interface LaunchContainment {
  /** The `cgroup.procs` files of the attempt's cgroups, one per hierarchy (attempt-cgroup.ts). */
  readonly procsFiles: readonly string[];
  /** Who the command runs as; null: the agent's own user. */
  readonly user: { readonly uid: number; readonly gid: number } | null;
  /** An argv put before the command (the sandbox's bubblewrap); empty: none. */
  readonly wrap: readonly string[];
}
