/**
 * The job spec as users write it (YAML or JSON), its JSON Schema, and the one function that turns
 * it into a normalised JobDefinition or a ValidationError listing every problem with its path.
 *
 * Structure is checked by the schema (the same schema the API route and editors use); what a
 * schema cannot say well (quantities, env names, the stage graph, merged retry bounds) is checked
 * here in code, on whatever parts of the input are well-typed, so one pass reports everything.
 */
import { Type, type Static } from 'typebox';
import { findCycle, topologicalOrder, type Edge } from './dag.js';
import { ValidationError, type ValidationIssue } from '../spec/validation-error.js';
import {
  DEFAULT_PREEMPTION_GRACE_SECONDS,
  DEFAULT_PRIORITY,
  DEFAULT_RETRY,
  DEFAULT_TEAM,
  MAX_PIDS_LIMIT,
  MAX_STAGES,
  MIN_PIDS_LIMIT,
  type JobDefinition,
  type RetryPolicy,
  type StageDefinition,
} from './job-definition.js';
import { formatCpu, formatMemory, parseCpuMillis, parseMemoryBytes, QuantityError } from '../spec/quantity.js';
import { normalizeGpuType } from './resources.js';
import { encodePointerSegment as enc, schemaIssues, suggest } from '../spec/schema-issues.js';

export const MAX_BACKOFF_SECONDS = 7 * 24 * 3600;
export const MAX_TIMEOUT_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

export const NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
export const ENV_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]*$';
const NAME_RULE = "must start with a letter or digit and contain only letters, digits, '.', '_' and '-'";
export const DEFAULT_CPU = '1';
export const DEFAULT_MEMORY = '512Mi';
export const MAX_GPUS_PER_STAGE = 64;
/** The most machines one gang stage runs on (issue 31): a large training run, well beyond what one pass should weigh. */
export const MAX_GANG_MACHINES = 64;
/** What the kernel takes for one exec (argv and environment share about 2 MiB): well under it. */
export const MAX_COMMAND_BYTES = 128 * 1024;
export const MAX_ENV_VARS = 1000;
export const MAX_ENV_BYTES = 64 * 1024;
export const MAX_LABELS = 100;
const MAX_LABEL_CHARS = 256;

const name = (maxLength: number, description: string) => Type.String({ minLength: 1, maxLength, pattern: NAME_PATTERN, description });
/** string -> string. A plain `additionalProperties` schema (TypeBox's Record uses a `^.*$`
 *  pattern, which lets a key containing a newline through unchecked). */
const StringMap = (description: string, limits: { maxProperties: number; maxLength?: number } = { maxProperties: MAX_ENV_VARS }) =>
  Type.Unsafe<Record<string, string>>(
    Type.Object(
      {},
      { additionalProperties: Type.String(limits.maxLength ? { maxLength: limits.maxLength } : {}), maxProperties: limits.maxProperties, description },
    ),
  );
const Labels = (description: string) => StringMap(description, { maxProperties: MAX_LABELS, maxLength: MAX_LABEL_CHARS });
const Quantity = (description: string) => Type.Union([Type.Number(), Type.String()], { description });
const strict = { additionalProperties: false } as const;

export const RetrySpecSchema = Type.Object(
  {
    maxAttempts: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: 'Attempts in all; 1 = no retry.' })),
    backoff: Type.Optional(
      Type.Object(
        {
          // A week: longer is not a backoff, and keeps every computed time a valid date.
          initialSeconds: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: MAX_BACKOFF_SECONDS })),
          maxSeconds: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: MAX_BACKOFF_SECONDS })),
        },
        strict,
      ),
    ),
    onExitCodes: Type.Optional(Type.Array(Type.Integer({ minimum: 0, maximum: 255 }), { description: 'Retry only these exit codes.' })),
    maxLost: Type.Optional(Type.Integer({ minimum: 0, maximum: 100, description: 'Attempts lost to infrastructure allowed.' })),
  },
  strict,
);

export const StageSpecSchema = Type.Object(
  {
    name: name(100, 'Unique within the job.'),
    needs: Type.Optional(Type.Array(Type.String(), { description: 'Stages that must succeed first.' })),
    resources: Type.Optional(
      Type.Object(
        {
          cpu: Type.Optional(Quantity('CPUs: a number (2, 0.5) or millicores ("500m"). Default 1.')),
          memory: Type.Optional(Quantity('Bytes, or with a suffix ("2Gi", "512Mi", "1G"). Default 512Mi.')),
          gpu: Type.Optional(
            Type.Object(
              {
                count: Type.Optional(
                  Type.Number({
                    exclusiveMinimum: 0,
                    maximum: MAX_GPUS_PER_STAGE,
                    description:
                      'Whole GPUs on one machine (1–64), or a share of one GPU below 1 with at most 3 decimal places (0.25: a quarter of one GPU). Default 1 when memory is given.',
                  }),
                ),
                memory: Type.Optional(
                  Quantity(
                    'GPU memory ("10Gi"): for a share, that much of its GPU\'s memory is held for it; for whole GPUs, each GPU must have at least that much. Only machines that report their GPUs\' memory take it.',
                  ),
                ),
                type: Type.Optional(
                  Type.Union([Type.String(), Type.Array(Type.String())], {
                    description: 'GPU type, or a list of acceptable types; absent means any.',
                  }),
                ),
              },
              strict,
            ),
          ),
          machines: Type.Optional(
            Type.Integer({
              minimum: 1,
              maximum: MAX_GANG_MACHINES,
              description:
                'A gang (distributed training): run on this many machines at once (2–64), each member taking the cpu, memory and gpu above, placed all or nothing. Default 1: one machine (docs/gangs.md).',
            }),
          ),
        },
        strict,
      ),
    ),
    limits: Type.Optional(
      Type.Object(
        {
          memory: Type.Optional(
            Quantity(
              'The memory limit, at least resources.memory (default: resources.memory): past it the kernel kills the stage, which ends oom-killed. Bytes or with a suffix ("24Gi").',
            ),
          ),
          cpu: Type.Optional(
            Quantity('A hard cap on CPU time, at least resources.cpu (default: no cap; CPU is shared in proportion to resources.cpu). A number or millicores.'),
          ),
          pids: Type.Optional(
            Type.Integer({
              minimum: MIN_PIDS_LIMIT,
              maximum: MAX_PIDS_LIMIT,
              description: "The most processes and threads at once (default: the agent's --pids-max, 4096).",
            }),
          ),
          outputs: Type.Optional(
            Type.Object(
              {
                bytes: Type.Optional(
                  Quantity(
                    'The most bytes the stage\'s outputs may hold together, each file counted by its length (a sparse file by its length too). Bytes or with a suffix ("256Mi", "20Gi"). Default: the server\'s (10Gi unless set), never above its maximum.',
                  ),
                ),
                files: Type.Optional(
                  Type.Integer({ minimum: 1, description: "The most output files. Default: the server's (10,000 unless set), never above its maximum." }),
                ),
              },
              { ...strict, description: 'What the stage may leave in GANTRY_OUTPUT_DIR: over it the attempt ends outputs-failed and nothing is uploaded.' },
            ),
          ),
        },
        { ...strict, description: 'What the agent enforces on the stage beyond its request, where it can (docs/containment.md).' },
      ),
    ),
    outputs: Type.Optional(
      Type.Object(
        {
          ranks: Type.Optional(
            Type.Union([Type.Literal(0), Type.Literal('all')], {
              description:
                "A gang only (resources.machines 2 or more): whose outputs the stage commits. 0 (the default): rank 0's, at their own paths; \"all\": every member's, each rank's under rank-N/ (rank 0's under rank-0/).",
            }),
          ),
        },
        { ...strict, description: 'What the stage commits of what its attempt leaves in GANTRY_OUTPUT_DIR (docs/gangs.md, "Outputs").' },
      ),
    ),
    network: Type.Optional(
      Type.Boolean({
        description:
          'The stage needs the network. Default false; it matters only on agents started with --sandbox, which take the network away from stages that do not say true.',
      }),
    ),
    placement: Type.Optional(
      Type.Object(
        {
          region: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
          labels: Type.Optional(Labels('Machine labels the stage requires.')),
          allowGpuMachines: Type.Optional(
            Type.Boolean({
              description:
                "A CPU stage may run on machines with GPUs (default false: GPU machines keep their CPUs and memory for GPU work). Even then it never takes the share of CPU and memory that goes with the machine's free GPUs.",
            }),
          ),
          sameLabel: Type.Optional(
            Type.String({
              minLength: 1,
              maxLength: MAX_LABEL_CHARS,
              description:
                'A gang only (resources.machines 2 or more): a machine label key; all members run on machines with one value of it (one rack, one NVLink or InfiniBand domain).',
            }),
          ),
        },
        strict,
      ),
    ),
    command: Type.Array(Type.String(), { minItems: 1, maxItems: 10_000, description: 'argv, run without a shell.' }),
    env: Type.Optional(StringMap('Environment variables.')),
    secretEnv: Type.Optional(
      StringMap(
        "Environment variables whose values are secrets: given to the command, never shown by the API, in events or in Gantry's logs, and masked in the stage's log.",
      ),
    ),
    // The largest a Node timer can wait (2^31 - 1 ms, about 24.8 days); longer would fire at once.
    timeoutSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_TIMEOUT_SECONDS })),
    queueTimeoutSeconds: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_TIMEOUT_SECONDS,
        description:
          'Ready this long without being placed (counted from when it became ready, or its retry backoff ended): the stage fails with why it waited as its reason.',
      }),
    ),
    disconnectGraceSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_TIMEOUT_SECONDS,
        description: "How long the stage keeps running while its agent cannot reach the server (default: the cluster's GANTRY_DISCONNECT_GRACE_MS).",
      }),
    ),
    retry: Type.Optional(RetrySpecSchema),
    preemptible: Type.Optional(
      Type.Boolean({
        description:
          "May be preempted by higher-priority work or by a team reclaiming its quota; may borrow idle capacity beyond its team's quota. Default false.",
      }),
    ),
    preemptionGraceSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 3600,
        description: 'When preempted: how long between TERM and KILL, to write a checkpoint into GANTRY_CHECKPOINT_DIR (default 30).',
      }),
    ),
  },
  strict,
);

export const JobSpecSchema = Type.Object(
  {
    name: name(200, 'Job name.'),
    team: Type.Optional(name(200, 'Team (quota owner). Default "default".')),
    priority: Type.Optional(Type.Integer({ minimum: 0, maximum: 1000, description: 'Higher first. Default 50.' })),
    labels: Type.Optional(Labels('Free-form labels.')),
    retry: Type.Optional(RetrySpecSchema),
    stages: Type.Array(StageSpecSchema, { minItems: 1, maxItems: MAX_STAGES }),
  },
  { ...strict, title: 'Gantry job spec' },
);

export type JobSpec = Static<typeof JobSpecSchema>;
export type StageSpec = Static<typeof StageSpecSchema>;
export type RetrySpec = Static<typeof RetrySpecSchema>;

// ---------------------------------------------------------------------------------------------
// Semantic checks: on raw input, guarded, so they run even where the structure is wrong.
// ---------------------------------------------------------------------------------------------

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const own = (o: Obj, k: string): unknown => (Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);

/** The quantity in its unit when it is a valid one; otherwise the issue is recorded and undefined returned. */
function checkQuantity(issues: ValidationIssue[], path: string, v: unknown, parse: (v: number | string) => number, unit: string): number | undefined {
  if (typeof v !== 'number' && typeof v !== 'string') return undefined;
  try {
    const n = parse(v);
    if (n < 1) issues.push({ path, message: `${JSON.stringify(v)} is less than 1 ${unit}` });
    else if (!Number.isSafeInteger(n)) issues.push({ path, message: `${JSON.stringify(v)} is too large` });
    else return n;
  } catch (e) {
    if (!(e instanceof QuantityError)) throw e;
    issues.push({ path, message: e.message });
  }
  return undefined;
}

/**
 * A GPU request is whole GPUs or a share of one GPU in thousandths (issue 29): 1.5 GPUs would be a
 * whole GPU and half of another, which no machine hands out as one device set, so it is refused
 * rather than rounded either way. The schema bounds the number; here its form.
 */
function checkGpu(issues: ValidationIssue[], path: string, gpu: Obj): void {
  const count = num(own(gpu, 'count'));
  if (count !== undefined && count > 0 && count <= MAX_GPUS_PER_STAGE && !Number.isInteger(count)) {
    if (count > 1) {
      issues.push({
        path: `${path}/count`,
        message: `${count} GPUs: a share is of one GPU only; use a whole number of GPUs, or a share below 1`,
      });
    } else if (gpuShareMilli(count) === undefined) {
      issues.push({ path: `${path}/count`, message: `${count}: a share of a GPU has at most 3 decimal places (thousandths of a GPU, 0.001 to 0.999)` });
    }
  }
  if (own(gpu, 'count') === undefined && own(gpu, 'memory') === undefined) {
    issues.push({ path: `${path}/count`, message: 'a GPU request needs a count (whole GPUs, or a share below 1) or a memory' });
  }
  checkQuantity(issues, `${path}/memory`, own(gpu, 'memory'), parseMemoryBytes, 'byte');
}

/**
 * A gang (resources.machines ≥ 2) is N members of whole GPUs on N machines; `sameLabel` groups a
 * gang's members and `outputs.ranks` says whose outputs it commits: both mean nothing for one
 * machine, so they are refused there rather than ignored.
 * A share of a GPU is refused in a gang: a distributed run's ranks each drive whole devices, and
 * a share per member would spread one training run over N machines' leftovers.
 */
function checkGang(issues: ValidationIssue[], p: string, stage: Obj): void {
  const res = own(stage, 'resources');
  const machines = isObj(res) ? num(own(res, 'machines')) : undefined;
  const gang = machines !== undefined && Number.isInteger(machines) && machines >= 2;
  const placement = own(stage, 'placement');
  const sameLabel = isObj(placement) ? own(placement, 'sameLabel') : undefined;
  // A `machines` the schema refused is reported there; sameLabel is judged against a valid one only.
  const valid = machines === undefined || (Number.isInteger(machines) && machines >= 1 && machines <= MAX_GANG_MACHINES);
  if (typeof sameLabel === 'string' && valid && !gang) {
    issues.push({
      path: `${p}/placement/sameLabel`,
      message: `sameLabel keeps a gang's members on machines with one value of a label: it needs resources.machines of 2 or more (this stage runs on ${machines ?? 1})`,
    });
  }
  // A gang's ranks mean nothing on one machine: its only rank is 0, whose outputs it commits anyway.
  const outputs = own(stage, 'outputs');
  if (isObj(outputs) && own(outputs, 'ranks') !== undefined && valid && !gang) {
    issues.push({
      path: `${p}/outputs/ranks`,
      message: `only a gang stage (resources.machines 2 or more) has ranks: this stage runs on ${machines ?? 1} machine and commits its own outputs`,
    });
  }
  const gpu = isObj(res) ? own(res, 'gpu') : undefined;
  const count = isObj(gpu) ? num(own(gpu, 'count')) : undefined;
  if (gang && count !== undefined && count > 0 && count < 1) {
    issues.push({ path: `${p}/resources/gpu/count`, message: `${count}: a gang's members take whole GPUs (1 or more each), not a share of one` });
  }
}

/** Thousandths of one GPU for a share 0 < x < 1 with at most 3 decimal places, else undefined. */
export function gpuShareMilli(count: number): number | undefined {
  const milli = Math.round(count * 1000);
  // 0.1 × 1000 is 100.00000000000001 in binary: compare with a tolerance far below a thousandth.
  if (milli < 1 || milli > 999 || Math.abs(count * 1000 - milli) > 1e-6) return undefined;
  return milli;
}

/** The quantities a stage may limit above its request: how each is read, its default request, how it is written back. */
const LIMITED = [
  { field: 'memory', parse: parseMemoryBytes, unit: 'byte', fallback: DEFAULT_MEMORY, format: formatMemory, what: 'the limit' },
  { field: 'cpu', parse: parseCpuMillis, unit: 'millicore (1m)', fallback: DEFAULT_CPU, format: formatCpu, what: 'the cap' },
] as const;

/**
 * A limit is a ceiling above the request (docs/containment.md): one below it would kill or starve
 * the stage on a machine that has the room the scheduler reserved for it. Compared with the
 * request as it will be, its default included; a request that is itself wrong is reported at its
 * own path and not compared.
 */
function checkLimits(issues: ValidationIssue[], p: string, stage: Obj): void {
  const limits = own(stage, 'limits');
  if (!isObj(limits)) return;
  const outputs = own(limits, 'outputs');
  if (isObj(outputs)) checkQuantity(issues, `${p}/limits/outputs/bytes`, own(outputs, 'bytes'), parseMemoryBytes, 'byte');
  const res = own(stage, 'resources');
  for (const q of LIMITED) {
    const path = `${p}/limits/${q.field}`;
    const limit = checkQuantity(issues, path, own(limits, q.field), q.parse, q.unit);
    if (limit === undefined) continue;
    const asked = isObj(res) ? own(res, q.field) : undefined;
    if (asked !== undefined && typeof asked !== 'number' && typeof asked !== 'string') continue;
    let request: number;
    try {
      request = q.parse(asked ?? q.fallback);
    } catch (e) {
      if (!(e instanceof QuantityError)) throw e;
      continue;
    }
    if (limit >= request) continue;
    const shown = `${q.format(request)}${asked === undefined ? ', the default' : ''}`;
    issues.push({
      path,
      message: `${q.format(limit)} must be at least resources.${q.field} (${shown}): ${q.what} is a ceiling above what the stage reserves`,
    });
  }
}

/** Effective backoff must have maxSeconds >= initialSeconds; reported where the user set it. */
function checkRetry(
  issues: ValidationIssue[],
  path: string,
  retry: unknown,
  inherited: { initialSeconds: number; maxSeconds: number },
): { initialSeconds: number; maxSeconds: number } {
  const backoff = isObj(retry) ? own(retry, 'backoff') : undefined;
  if (!isObj(backoff)) return inherited;
  const ini = num(own(backoff, 'initialSeconds'));
  const max = num(own(backoff, 'maxSeconds'));
  const eff = { initialSeconds: ini ?? inherited.initialSeconds, maxSeconds: max ?? inherited.maxSeconds };
  if (eff.initialSeconds > 0 && eff.maxSeconds > 0 && eff.maxSeconds < eff.initialSeconds) {
    const at = max !== undefined ? 'maxSeconds' : 'initialSeconds';
    issues.push({
      path: `${path}/backoff/${at}`,
      message: `backoff maxSeconds (${eff.maxSeconds}) must be >= initialSeconds (${eff.initialSeconds})`,
    });
  }
  return eff;
}

function checkEnv(issues: ValidationIssue[], path: string, env: unknown): void {
  if (!isObj(env)) return;
  const re = new RegExp(ENV_NAME_PATTERN);
  for (const key of Object.keys(env)) {
    const p = `${path}/${enc(key)}`;
    if (!re.test(key)) {
      issues.push({ path: p, message: `"${key}" is not a valid environment variable name (letters, digits and '_', not starting with a digit)` });
    } else if (key.startsWith('GANTRY_')) {
      issues.push({ path: p, message: `"${key}": names starting with GANTRY_ are reserved for Gantry` });
    } else if (key === 'CUDA_VISIBLE_DEVICES') {
      issues.push({ path: p, message: 'CUDA_VISIBLE_DEVICES is set by Gantry to the GPUs it assigns; request GPUs with resources.gpu instead' });
    }
  }
}

/** What one exec can take, and what it cannot take at all (a NUL byte ends a C string). */
function checkExecSize(issues: ValidationIssue[], p: string, stage: Record<string, unknown>): void {
  const command = own(stage, 'command');
  if (Array.isArray(command)) {
    let bytes = 0;
    command.forEach((arg, i) => {
      if (typeof arg !== 'string') return;
      bytes += Buffer.byteLength(arg) + 1;
      if (arg.includes('\u0000')) issues.push({ path: `${p}/command/${i}`, message: 'an argument cannot hold a NUL character' });
    });
    if (bytes > MAX_COMMAND_BYTES) issues.push({ path: `${p}/command`, message: `the command is ${bytes} bytes; at most ${MAX_COMMAND_BYTES}` });
  }
  const env = own(stage, 'env');
  const secret = own(stage, 'secretEnv');
  let bytes = 0;
  for (const [field, map] of [
    ['env', env],
    ['secretEnv', secret],
  ] as const) {
    if (!isObj(map)) continue;
    for (const [k, v] of Object.entries(map)) {
      if (typeof v !== 'string') continue;
      bytes += Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
      if (v.includes('\u0000')) issues.push({ path: `${p}/${field}/${enc(k)}`, message: 'a value cannot hold a NUL character' });
      if (field === 'secretEnv' && isObj(env) && Object.hasOwn(env, k))
        issues.push({ path: `${p}/secretEnv/${enc(k)}`, message: `${k} is in env too: a variable is one or the other` });
    }
  }
  if (bytes > MAX_ENV_BYTES) issues.push({ path: `${p}/env`, message: `env and secretEnv hold ${bytes} bytes; at most ${MAX_ENV_BYTES}` });
}

function semanticIssues(input: unknown): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  if (!isObj(input)) return issues;
  const jobBackoff = checkRetry(issues, '/retry', own(input, 'retry'), DEFAULT_RETRY.backoff);
  const stages = own(input, 'stages');
  if (!Array.isArray(stages)) return issues;

  const firstIndex = new Map<string, number>();
  stages.forEach((stage, i) => {
    if (!isObj(stage)) return;
    const n = own(stage, 'name');
    if (typeof n !== 'string') return;
    const first = firstIndex.get(n);
    if (first === undefined) firstIndex.set(n, i);
    else issues.push({ path: `/stages/${i}/name`, message: `duplicate stage name "${n}" (already used by /stages/${first})` });
  });

  const edges: Edge[] = [];
  stages.forEach((stage, i) => {
    if (!isObj(stage)) return;
    const p = `/stages/${i}`;
    const stageName = own(stage, 'name');
    const command = own(stage, 'command');
    if (Array.isArray(command) && typeof command[0] === 'string' && command[0].trim() === '') {
      issues.push({ path: `${p}/command/0`, message: 'the program (first element of command) must not be empty' });
    }
    const res = own(stage, 'resources');
    if (isObj(res)) {
      checkQuantity(issues, `${p}/resources/cpu`, own(res, 'cpu'), parseCpuMillis, 'millicore (1m)');
      checkQuantity(issues, `${p}/resources/memory`, own(res, 'memory'), parseMemoryBytes, 'byte');
      const gpu = own(res, 'gpu');
      if (isObj(gpu)) checkGpu(issues, `${p}/resources/gpu`, gpu);
      const types = isObj(gpu) ? own(gpu, 'type') : undefined;
      if (Array.isArray(types)) {
        types.forEach((t, j) => {
          if (typeof t === 'string' && t.trim() === '') {
            issues.push({ path: `${p}/resources/gpu/type/${j}`, message: 'GPU type must not be empty (omit type to accept any)' });
          }
        });
      }
    }
    checkLimits(issues, p, stage);
    checkGang(issues, p, stage);
    checkEnv(issues, `${p}/env`, own(stage, 'env'));
    checkEnv(issues, `${p}/secretEnv`, own(stage, 'secretEnv'));
    checkExecSize(issues, p, stage);
    checkRetry(issues, `${p}/retry`, own(stage, 'retry'), jobBackoff);
    const needs = own(stage, 'needs');
    if (!Array.isArray(needs)) return;
    needs.forEach((need, j) => {
      if (typeof need !== 'string') return;
      if (need === stageName) {
        issues.push({ path: `${p}/needs/${j}`, message: `stage "${need}" cannot need itself` });
      } else if (!firstIndex.has(need)) {
        const hint = suggest(need, [...firstIndex.keys()]);
        issues.push({ path: `${p}/needs/${j}`, message: `unknown stage "${need}"${hint ? ` (did you mean "${hint}"?)` : ''}` });
      } else if (typeof stageName === 'string') {
        edges.push([need, stageName]);
      }
    });
  });

  // Bad needs (unknown, self) are reported above and left out of the graph; a cycle among the rest
  // is still worth reporting in the same pass.
  const cycle = findCycle([...firstIndex.keys()], edges);
  if (cycle) issues.push({ path: '/stages', message: `cycle: ${cycle.join(' -> ')} (each stage needs the one before it)` });
  return issues;
}

// ---------------------------------------------------------------------------------------------
// Normalisation: only once the input is known to be valid.
// ---------------------------------------------------------------------------------------------

function copyMap(m: Record<string, string> | undefined): Record<string, string> {
  // fromEntries defines own properties, so a key like "__proto__" stays a plain key.
  return Object.fromEntries(Object.entries(m ?? {}));
}

function mergeRetry(base: RetryPolicy, spec: RetrySpec | undefined): RetryPolicy {
  return {
    maxAttempts: spec?.maxAttempts ?? base.maxAttempts,
    backoff: {
      initialSeconds: spec?.backoff?.initialSeconds ?? base.backoff.initialSeconds,
      maxSeconds: spec?.backoff?.maxSeconds ?? base.backoff.maxSeconds,
    },
    onExitCodes: spec?.onExitCodes ? [...new Set(spec.onExitCodes)] : base.onExitCodes ? [...base.onExitCodes] : null,
    maxLost: spec?.maxLost ?? base.maxLost,
  };
}

function gpuTypes(type: string | string[] | undefined): string[] {
  const list = type === undefined ? [] : Array.isArray(type) ? type : [type];
  return [...new Set(list.map(normalizeGpuType).filter((t) => t !== ''))];
}

/** `count: 0.25` → one GPU at 250 thousandths; `memory` in bytes; no count with a memory → one GPU. */
function normaliseGpu(gpu: NonNullable<NonNullable<StageSpec['resources']>['gpu']>): NonNullable<StageDefinition['resources']['gpu']> {
  const count = gpu.count ?? 1;
  const milli = Number.isInteger(count) ? undefined : gpuShareMilli(count);
  return {
    count: milli === undefined ? count : 1,
    types: gpuTypes(gpu.type),
    ...(milli !== undefined ? { milli } : {}),
    ...(gpu.memory !== undefined ? { memoryBytes: parseMemoryBytes(gpu.memory) } : {}),
  };
}

function normaliseStage(s: StageSpec, jobRetry: RetryPolicy): StageDefinition {
  const gpu = s.resources?.gpu;
  return {
    name: s.name,
    needs: [...new Set(s.needs ?? [])],
    resources: {
      cpuMillis: parseCpuMillis(s.resources?.cpu ?? DEFAULT_CPU),
      memoryBytes: parseMemoryBytes(s.resources?.memory ?? DEFAULT_MEMORY),
      gpu: gpu ? normaliseGpu(gpu) : null,
      // An ordinary stage carries no `machines`, so its definition is the one it always was.
      ...(s.resources?.machines !== undefined && s.resources.machines > 1 ? { machines: s.resources.machines } : {}),
    },
    placement: {
      region: s.placement?.region ?? null,
      labels: copyMap(s.placement?.labels),
      ...(s.placement?.allowGpuMachines ? { allowGpuMachines: true } : {}),
      ...(s.placement?.sameLabel !== undefined ? { sameLabel: s.placement.sameLabel } : {}),
    },
    command: [...s.command],
    env: copyMap(s.env),
    ...(s.secretEnv && Object.keys(s.secretEnv).length ? { secretEnv: copyMap(s.secretEnv) } : {}),
    timeoutSeconds: s.timeoutSeconds ?? null,
    disconnectGraceSeconds: s.disconnectGraceSeconds ?? null,
    retry: mergeRetry(jobRetry, s.retry),
    preemptible: s.preemptible ?? false,
    ...(s.preemptible ? { preemptionGraceSeconds: s.preemptionGraceSeconds ?? DEFAULT_PREEMPTION_GRACE_SECONDS } : {}),
    ...(s.queueTimeoutSeconds ? { queueTimeoutSeconds: s.queueTimeoutSeconds } : {}),
    limits: {
      memoryBytes: s.limits?.memory !== undefined ? parseMemoryBytes(s.limits.memory) : null,
      cpuMillis: s.limits?.cpu !== undefined ? parseCpuMillis(s.limits.cpu) : null,
      pids: s.limits?.pids ?? null,
    },
    ...(s.limits?.outputs
      ? {
          outputLimits: {
            bytes: s.limits.outputs.bytes !== undefined ? parseMemoryBytes(s.limits.outputs.bytes) : null,
            files: s.limits.outputs.files ?? null,
          },
        }
      : {}),
    network: s.network ?? false,
    // Only a gang asking for every rank's outputs carries it: rank 0's alone is what a definition without it means.
    ...(s.outputs?.ranks === 'all' ? { outputs: { ranks: 'all' as const } } : {}),
  };
}

/**
 * Validates a parsed job spec and returns it normalised (defaults filled in, quantities in
 * millicores and bytes, retry merged stage over job over DEFAULT_RETRY, GPU types normalised).
 * Throws ValidationError listing every problem found, each with the JSON pointer of its field.
 */
export function parseJobSpec(input: unknown): JobDefinition {
  const issues = schemaIssues(JobSpecSchema, input, {
    patterns: { [NAME_PATTERN]: NAME_RULE },
    message: (e, value) =>
      e.keyword === 'maxItems' && e.instancePath === '/stages'
        ? `too many stages: ${Array.isArray(value) ? value.length : '?'} (a job may have at most ${MAX_STAGES})`
        : undefined,
  });
  const seen = new Set(issues.map((i) => `${i.path}\u0000${i.message}`));
  for (const i of semanticIssues(input)) {
    if (!seen.has(`${i.path}\u0000${i.message}`)) issues.push(i);
  }
  if (issues.length > 0) throw new ValidationError(issues);

  const spec = input as JobSpec;
  const jobRetry = mergeRetry(DEFAULT_RETRY, spec.retry);
  return {
    name: spec.name,
    team: spec.team ?? DEFAULT_TEAM,
    priority: spec.priority ?? DEFAULT_PRIORITY,
    labels: copyMap(spec.labels),
    stages: spec.stages.map((s) => normaliseStage(s, jobRetry)),
  };
}

/** Stage names in a topological order (every stage after the stages it needs; ties in spec order). */
export function stageOrder(def: JobDefinition): string[] {
  const names = def.stages.map((s) => s.name);
  const edges: Edge[] = def.stages.flatMap((s) => s.needs.map((n): Edge => [n, s.name]));
  const order = topologicalOrder(names, edges);
  if (!order) throw new Error(`job ${def.name} has a cycle in its stages`);
  return order;
}
