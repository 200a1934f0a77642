import { describe, expect, it } from 'vitest';
import { characterMajors, deviceAllowRules } from './v1-device-rules.js';

// The shape of /proc/devices on a host with the NVIDIA driver (majors past 254 are dynamic).
const PROC_DEVICES = `Character devices:
  1 mem
  4 /dev/vc/0
136 pts
195 nvidia-frontend
195 nvidia
234 nvidia-caps-imex-channels
508 nvidia-uvm
511 nvidia-caps

Block devices:
  8 sd
259 blkext
`;

describe('characterMajors', () => {
  it("lists the character majors once each, and finds nvidia-caps by its exact name, not IMEX's", () => {
    expect(characterMajors(PROC_DEVICES)).toEqual({ majors: [1, 4, 136, 195, 234, 508, 511], nvidiaCaps: 511 });
  });

  it('finds no nvidia-caps on a host without it', () => {
    expect(characterMajors('Character devices:\n  1 mem\n195 nvidia\n\nBlock devices:\n  8 sd\n')).toEqual({ majors: [1, 195], nvidiaCaps: null });
  });
});

describe('deviceAllowRules', () => {
  const { majors, nvidiaCaps } = characterMajors(PROC_DEVICES);
  const others = ['b *:* rwm', 'c 1:* rwm', 'c 4:* rwm', 'c 136:* rwm', 'c 234:* rwm', 'c 508:* rwm'];

  it("allows a MIG attempt its GPU's device file and only its MIG device's two capability files", () => {
    expect(deviceAllowRules(majors, [0], nvidiaCaps, [21, 22])).toEqual([
      ...others,
      'c 195:0 rwm',
      'c 195:254 rwm',
      'c 195:255 rwm',
      'c 511:21 rwm',
      'c 511:22 rwm',
    ]);
  });

  it('allows a whole-GPU attempt, and a CPU attempt, no capability file at all', () => {
    expect(deviceAllowRules(majors, [1], nvidiaCaps, [])).toEqual([...others, 'c 195:1 rwm', 'c 195:254 rwm', 'c 195:255 rwm']);
    expect(deviceAllowRules(majors, [], nvidiaCaps)).toEqual([...others, 'c 195:254 rwm', 'c 195:255 rwm']);
  });

  it("falls back to the whole nvidia-caps major for an attempt whose MIG device's files are unknown", () => {
    expect(deviceAllowRules(majors, [0], nvidiaCaps, 'all')).toEqual([...others, 'c 195:0 rwm', 'c 195:254 rwm', 'c 195:255 rwm', 'c 511:* rwm']);
  });

  it('leaves every non-NVIDIA major whole on a host without nvidia-caps', () => {
    expect(deviceAllowRules([1, 195, 508], [0], null, [21, 22])).toEqual([
      'b *:* rwm',
      'c 1:* rwm',
      'c 508:* rwm',
      'c 195:0 rwm',
      'c 195:254 rwm',
      'c 195:255 rwm',
    ]);
  });
});
