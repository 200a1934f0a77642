/**
 * The paper's Random policy without `Math.random`: the planner is pure, so "a machine at random"
 * is the machine with the lowest key, a hash of (seed, draw, machine id), and "a GPU at random"
 * the GPU with the lowest key under it. Keys of different machines (or GPUs) are independent and
 * uniform, so the lowest is each feasible one with equal chance, as the simulator's
 * `rand.Intn(len(feasible))`; the same seed and draw give the same choice, in the server and in the
 * simulator. `draw` numbers the choices made with one seed (the planner counts them).
 */

/** A 32-bit finaliser (MurmurHash3's fmix32): each input bit reaches every output bit. */
function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** FNV-1a of a machine id: its identity in the keys (names differ, so do ids). */
export function idHash(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** 53 bits from two 32-bit words: equal keys on two machines are as rare as a 2^53 collision. */
function unit(hi: number): number {
  const lo = mix32(hi ^ 0x9e3779b9);
  return (hi * 2 ** 21 + (lo >>> 11)) / 2 ** 53;
}

/** What every key of one draw starts from: computed once per draw. */
export function randomDrawBase(seed: number, draw: number): number {
  return mix32((draw + mix32(seed >>> 0)) >>> 0);
}

/**
 * The high 32 bits of a machine's key for a draw: keys order as their words do (a higher word, a
 * higher key), so a scan compares words and builds a key only for a machine that may win.
 */
export function randomMachineWord(base: number, machineIdHash: number): number {
  return mix32(machineIdHash ^ base);
}

/** The key of a machine (by `idHash`) for one draw, in [0, 1): lowest wins. */
export function randomMachineKey(seed: number, draw: number, machineIdHash: number): number {
  return unit(randomMachineWord(randomDrawBase(seed, draw), machineIdHash));
}

/** The key of one GPU choice on that machine (by its first GPU's index), in [0, 1): lowest wins. */
export function randomGpuKey(seed: number, draw: number, machineIdHash: number, gpuIndex: number): number {
  return unit(mix32(randomMachineWord(randomDrawBase(seed, draw), machineIdHash) ^ mix32((gpuIndex + 0x632be5ab) >>> 0)));
}
