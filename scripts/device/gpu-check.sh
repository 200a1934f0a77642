#!/usr/bin/env bash
# A check of Gantry on a real NVIDIA GPU machine (the device machine of a session: docs/gpu-check.md).
# Runs from a folder holding node.xz (this machine's Node, xz-compressed) and app.tar.xz (dist/ and
# the production node_modules), both made by scripts/device/pack.sh. Writes everything it sees to
# $OUT (default ./out): the GPUs nvidia-smi reports, what the agent detected and enforces, a GPU
# stage's view of its devices (PyTorch), and whether a cancel leaves a GPU process behind.
# GPU_CHECK_DECLARED=h200:1 runs the same flow on a machine without a GPU (the stages then skip
# PyTorch): to try the script itself before spending device time.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PACK=${PACK:-$HERE}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/gantry-gpu-check.XXXXXX)
chmod 0711 "$W"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/steps.log"; }
step() { local name=$1; shift; log "\$ $*"; "$@" > "$OUT/$name.out" 2>&1; local rc=$?; log "  rc=$rc ($name)"; tail -n 40 "$OUT/$name.out" | sed 's/^/  | /'; return $rc; }

xz -dc "$PACK/node.xz" > "$W/node" && chmod 0755 "$W/node"
mkdir -p "$W/app" && tar xJf "$PACK/app.tar.xz" -C "$W/app"
chmod -R a+rX "$W/app"
NODE="$W/node"
G() { "$NODE" "$W/app/dist/cli/main.js" "$@"; }
# The id of the last JSON document (pretty-printed or one per line) in a file or stdin.
last_id() { "$NODE" -e 'const t=require("fs").readFileSync(process.argv[1]||0,"utf8").trim();let j;try{j=JSON.parse(t)}catch{const i=t.lastIndexOf("\n{");j=JSON.parse(t.slice(i+1))}console.log(j.id)' "$@"; }
export GANTRY_SERVER=http://127.0.0.1:7391 GANTRY_DATA_DIR="$W/server"

{ uname -a; id; cat /etc/os-release | head -3; "$NODE" --version; nproc; free -g; } > "$OUT/host.txt" 2>&1
{ cat /proc/self/cgroup; echo; grep cgroup /proc/self/mountinfo; echo; cat /proc/devices; } > "$OUT/cgroups.txt" 2>&1
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv > "$OUT/gpus.csv" 2>&1
python3 -c 'import torch,sys; print(torch.__version__, torch.cuda.is_available(), torch.__file__)' > "$OUT/torch-root.txt" 2>&1

mkdir -p "$W/server" "$W/agent"
G server --data-dir "$W/server" --port 7391 > "$OUT/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do [ -s "$W/server/admin.token" ] && G machines > /dev/null 2>&1 && break; sleep 0.2; done
JOIN=$(G token create --kind join --name gpu-check --json | "$NODE" -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token))')
printf '%s' "$JOIN" > "$W/join.token"

start_agent() {
  local mode=$1
  local declared=()
  [ -n "${GPU_CHECK_DECLARED:-}" ] && declared=(--gpus "$GPU_CHECK_DECLARED")
  G agent --server "$GANTRY_SERVER" --token-file "$W/join.token" --name gpu-box --data-dir "$W/agent" \
    --containment "$mode" "${declared[@]}" --verbose > "$OUT/agent-$mode.log" 2>&1 &
  AGENT=$!
  for _ in $(seq 1 100); do G machines --json 2>/dev/null | grep -q '"gpu-box"' && break; sleep 0.2; done
  step "machines-$mode" G machines --json
  step "machine-show-$mode" G machine show gpu-box
}

# The GPU stage: what the stage sees of its devices, and a real kernel on the GPU.
cat > "$W/probe.py" <<'PY'
import os, sys, time
print("uid", os.getuid(), "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
if os.environ.get("GPU_CHECK_DECLARED"):
    print("declared GPUs: no PyTorch run"); sys.exit(0)
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "count", torch.cuda.device_count())
d = torch.device("cuda:0")
print("name", torch.cuda.get_device_name(0))
a = torch.randn(8192, 8192, device=d); b = torch.randn(8192, 8192, device=d)
torch.cuda.synchronize(); t = time.time()
for _ in range(20): c = a @ b
torch.cuda.synchronize(); dt = time.time() - t
print("matmul TFLOP/s %.1f" % (20 * 2 * 8192**3 / dt / 1e12))
x = torch.empty(int(8 * 2**30) // 4, device=d)  # 8 GiB of GPU memory held
print("allocated GiB", torch.cuda.memory_allocated() / 2**30)
PY
cat > "$W/hold.py" <<'PY'
import os, time
if not os.environ.get("GPU_CHECK_DECLARED"):
    import torch
    x = torch.empty(int(4 * 2**30) // 4, device="cuda:0")
    print("holding 4 GiB on", torch.cuda.get_device_name(0), flush=True)
else:
    print("holding (declared)", flush=True)
open(os.path.join(os.environ["GANTRY_OUTPUT_DIR"], "started"), "w").close()
time.sleep(600)
PY
chmod 0644 "$W/probe.py" "$W/hold.py"

job_spec() { # name script
  cat <<YAML
name: $1
stages:
  - name: gpu
    resources: { cpu: 2, memory: 16Gi, gpu: { count: 1 } }
    timeoutSeconds: 300
    retry: { maxAttempts: 1 }
    env: { GPU_CHECK_DECLARED: '${GPU_CHECK_DECLARED:-}', PYTHONUNBUFFERED: '1' }
    command: [python3, $W/$2]
YAML
}

run_probe() {
  local mode=$1
  job_spec "probe-$mode" probe.py > "$W/probe-$mode.yaml"
  step "probe-$mode" G submit "$W/probe-$mode.yaml" --wait --json
  local id
  id=$(last_id "$OUT/probe-$mode.out" 2>/dev/null)
  [ -n "$id" ] && { step "probe-$mode-logs" G logs "$id" gpu; step "probe-$mode-status" G status "$id"; }
}

cancel_check() {
  local mode=$1
  job_spec "hold-$mode" hold.py > "$W/hold-$mode.yaml"
  local id
  id=$(G submit "$W/hold-$mode.yaml" --json | last_id)
  log "hold job $id"
  for _ in $(seq 1 150); do G logs "$id" gpu 2>/dev/null | grep -q holding && break; sleep 0.2; done
  step "hold-$mode-running" bash -c "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; ps -eo pid,uid,args | grep [h]old.py"
  local t0; t0=$(date +%s.%N)
  step "hold-$mode-cancel" G cancel "$id"
  local gone=no
  for _ in $(seq 1 100); do
    if ! pgrep -f "$W/hold.py" > /dev/null && ! { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -q .; }; then gone=yes; break; fi
    sleep 0.1
  done
  log "after cancel ($mode): processes and GPU contexts gone=$gone in $(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 2))") s"
  step "hold-$mode-after" bash -c "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; ps -eo pid,uid,args | grep [h]old.py; true"
  step "hold-$mode-status" G status "$id"
}

start_agent auto
run_probe auto
cancel_check auto
kill "$AGENT"; wait "$AGENT" 2>/dev/null
start_agent off
run_probe off
kill "$AGENT"; wait "$AGENT" 2>/dev/null
kill "$SERVER"; wait "$SERVER" 2>/dev/null
cp "$W"/agent/*.log "$OUT/" 2>/dev/null
log "done"
