import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A small trace in the Alibaba trace's CSV format (`src/sim/alibaba-trace.ts`), for `gantry sim`
 * tests that must not depend on ../shared: 24 GPU machines (192 GPUs: V100s and T4s) and a CPU
 * one, and 240 pods of every kind the replay meets — shares of a GPU, whole GPUs, several GPUs, a GPU
 * type asked for, CPU only. Both pod lists hold the same pods, but gpuspec33 names types.
 */
const NODES = [
  'sn,cpu_milli,memory_mib,gpu,model',
  'node-cpu,32000,131072,0,',
  ...Array.from({ length: 16 }, (_, i) => `node-v100-${i},96000,393216,8,V100M32`),
  ...Array.from({ length: 8 }, (_, i) => `node-t4-${i},64000,262144,8,T4`),
];

function pods(typed: boolean): string {
  const head = 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time';
  // [num_gpu, gpu_milli, cpu_milli, spec]
  const kinds: [number, number, number, string][] = [
    [1, 250, 4000, ''],
    [1, 500, 8000, ''],
    [1, 300, 2000, 'T4'],
    [1, 1000, 12000, ''],
    [2, 1000, 16000, 'V100M32'],
    [0, 0, 4000, ''],
    [1, 700, 6000, ''],
    [1, 250, 2000, ''],
    [1, 500, 4000, 'T4'],
    [1, 1000, 8000, ''],
    [4, 1000, 32000, ''],
  ];
  const rows = Array.from({ length: 240 }, (_, i) => {
    const [gpus, milli, cpu, spec] = kinds[i % kinds.length]!;
    return `pod-${String(i).padStart(3, '0')},${cpu},16384,${gpus},${milli},${typed ? spec : ''},LS,Running,${i * 10},${i * 10 + 1000},${i * 10}`;
  });
  return [head, ...rows].join('\n') + '\n';
}

/** Writes the trace into a fresh directory (readable by anyone: the CLI may run as another user) and returns it. */
export function syntheticTraceDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-sim-trace-'));
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, 'openb_node_list_all_node.csv'), NODES.join('\n') + '\n');
  writeFileSync(join(dir, 'openb_pod_list_default.csv'), pods(false));
  writeFileSync(join(dir, 'openb_pod_list_gpuspec33.csv'), pods(true));
  return dir;
}
