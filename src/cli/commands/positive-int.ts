import { InvalidArgumentError } from '@commander-js/extra-typings';

/** A commander argument parser; its error becomes a usage error that names the option. */
export function positiveInt(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}
