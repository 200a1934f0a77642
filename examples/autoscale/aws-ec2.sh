#!/usr/bin/env bash
# An example `command` provider for Gantry's autoscaler (docs/autoscaling.md, "Providers"):
# starts and stops EC2 instances with the aws CLI, one instance per machine name.
#
# UNTESTED: this project's machines have no AWS access, so this script has never run against
# EC2. Only its syntax is checked (`bash -n`, in src/autoscale/aws-ec2-example.test.ts). Read it,
# try it on one machine (min 0, max 1) and adapt it before you rely on it.
#
# What it assumes:
# - Here (where the Gantry server runs): bash, jq and the aws CLI v2, with credentials allowed to
#   ec2:RunInstances, ec2:DescribeInstances, ec2:CreateTags and ec2:TerminateInstances.
# - GANTRY_EC2_AMI: an AMI with Node 20 and gantry installed (`gantry` on the PATH of root) and
#   systemd; NVIDIA drivers on it for GPU templates. Required.
# - AWS_REGION (or the CLI's configured region); optionally GANTRY_EC2_SUBNET,
#   GANTRY_EC2_SECURITY_GROUP (it must reach the server's API port), GANTRY_EC2_INSTANCE_PROFILE,
#   GANTRY_EC2_KEY_NAME.
# - The instance type comes from the template's GPUs (type and count) or, for a CPU template, its
#   CPUs (instance_type below); GANTRY_EC2_INSTANCE_TYPE overrides it. The instance must have at
#   least the template's CPU and memory: the agent declares exactly the template's (--cpu,
#   --memory), so the scheduler sees what the autoscaler planned for. GPUs are found by
#   nvidia-smi on the instance; the template's gpus.type must be the type `gantry machines` shows
#   for them (h100 for p5).
# - The template's `region` is Gantry's label for the machine (--region), not an AWS region.
#
# Security: the join token rides in the instance's user-data, which any process on the instance
# and anyone allowed ec2:DescribeInstanceAttribute can read. The agent trades it for a credential
# of its own at its first start; use a join token made for this pool (`gantry token create
# --kind join`) and revoke it if it leaks. It is never written to this script's stdout or stderr.
#
# The request arrives on stdin, the answer goes to stdout (nothing else may: aws output goes to
# stderr), and the script is idempotent by machine name: an instance tagged Name=<name> that is
# pending or running is answered as started, a name with no live instance as stopped.
set -euo pipefail

request=$(cat)
action=$(jq -r '.action' <<<"$request")
pool=$(jq -r '.pool' <<<"$request")

aws_() { aws --output json "$@"; }

# The live instance of a machine name in this pool, if any (its id on stdout).
instance_of() {
  aws_ ec2 describe-instances \
    --filters "Name=tag:Name,Values=$1" "Name=tag:gantry-pool,Values=$pool" "Name=instance-state-name,Values=${2:-pending,running}" \
    --query 'Reservations[].Instances[].InstanceId' | jq -r '.[]'
}

instance_type() {
  if [[ -n "${GANTRY_EC2_INSTANCE_TYPE:-}" ]]; then
    echo "$GANTRY_EC2_INSTANCE_TYPE"
    return
  fi
  local gpus cpu
  gpus=$(jq -r '.template.gpus // empty | "\(.type):\(.count)"' <<<"$request")
  cpu=$(jq -r '.template.cpu' <<<"$request")
  case "$gpus" in
    h100:8) echo p5.48xlarge ;;
    a100:8) echo p4d.24xlarge ;;
    a10g:1) echo g5.2xlarge ;;
    a10g:4) echo g5.12xlarge ;;
    a10g:8) echo g5.48xlarge ;;
    l4:1) echo g6.2xlarge ;;
    l4:4) echo g6.12xlarge ;;
    t4:1) echo g4dn.2xlarge ;;
    t4:4) echo g4dn.12xlarge ;;
    "")
      # CPU templates: the smallest m7i with at least the template's CPUs (4 GiB per vCPU).
      case "$cpu" in
        *m) echo m7i.large ;;
        1 | 2) echo m7i.large ;;
        3 | 4) echo m7i.xlarge ;;
        [5-8]) echo m7i.2xlarge ;;
        9 | 1[0-6]) echo m7i.4xlarge ;;
        1[7-9] | 2[0-9] | 3[0-2]) echo m7i.8xlarge ;;
        *) echo m7i.16xlarge ;;
      esac
      ;;
    *)
      echo "aws-ec2.sh: no instance type for GPUs $gpus; set GANTRY_EC2_INSTANCE_TYPE" >&2
      exit 2
      ;;
  esac
}

# The instance's first boot: a systemd unit running `gantry agent` for this machine name. Written
# to a private file, so the join token is on no command line (`ps` shows those to every user).
user_data() {
  local name=$1 args ca_pem='' token
  # The agent's flags, each quoted for bash.
  args=$(jq -r --arg name "$name" '
    ["agent", "--server", .server, "--name", $name, "--data-dir", "/var/lib/gantry/agent",
     "--cpu", .template.cpu, "--memory", .template.memory]
    + (if .template.region then ["--region", .template.region] else [] end)
    + ([.template.labels // {} | to_entries[] | "--label", "\(.key)=\(.value)"])
    | @sh' <<<"$request")
  token=$(jq -r '.joinToken | @sh' <<<"$request")
  if jq -e '.ca' <<<"$request" >/dev/null; then ca_pem=$(base64 -w0 <"$(jq -r '.ca' <<<"$request")"); fi
  cat <<EOF
#!/bin/bash
set -euo pipefail
install -d -m 700 /etc/gantry /var/lib/gantry
umask 077
printf 'GANTRY_JOIN_TOKEN=%s\n' $token > /etc/gantry/agent.env
if [ -n '$ca_pem' ]; then
  echo '$ca_pem' | base64 -d > /etc/gantry/ca.pem
  echo 'GANTRY_CA=/etc/gantry/ca.pem' >> /etc/gantry/agent.env
fi
cat > /usr/local/bin/gantry-agent-run <<'RUN'
#!/bin/bash
exec gantry $args
RUN
chmod 700 /usr/local/bin/gantry-agent-run
cat > /etc/systemd/system/gantry-agent.service <<'UNIT'
[Unit]
Description=Gantry agent
After=network-online.target
Wants=network-online.target
[Service]
EnvironmentFile=/etc/gantry/agent.env
ExecStart=/usr/local/bin/gantry-agent-run
Restart=always
RestartSec=5
[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now gantry-agent
EOF
}

start() {
  local type answer='[]' name id
  type=$(instance_type)
  for name in $(jq -r '.names[]' <<<"$request"); do
    id=$(instance_of "$name" | head -n 1)
    if [[ -z "$id" ]]; then
      local extra=()
      [[ -n "${GANTRY_EC2_SUBNET:-}" ]] && extra+=(--subnet-id "$GANTRY_EC2_SUBNET")
      [[ -n "${GANTRY_EC2_SECURITY_GROUP:-}" ]] && extra+=(--security-group-ids "$GANTRY_EC2_SECURITY_GROUP")
      [[ -n "${GANTRY_EC2_INSTANCE_PROFILE:-}" ]] && extra+=(--iam-instance-profile "Name=$GANTRY_EC2_INSTANCE_PROFILE")
      [[ -n "${GANTRY_EC2_KEY_NAME:-}" ]] && extra+=(--key-name "$GANTRY_EC2_KEY_NAME")
      local data
      data=$(umask 077 && mktemp)
      user_data "$name" >"$data"
      # --client-token: EC2's own idempotency, should this run die between the call and its answer.
      id=$(aws_ ec2 run-instances \
        --image-id "${GANTRY_EC2_AMI:?set GANTRY_EC2_AMI to an AMI with Node 20 and gantry installed}" \
        --instance-type "$type" --count 1 \
        --client-token "gantry-$pool-$name" \
        --user-data "file://$data" \
        --tag-specifications "ResourceType=instance,Tags=[{Key=Name,Value=$name},{Key=gantry-pool,Value=$pool}]" \
        "${extra[@]}" \
        --query 'Instances[0].InstanceId' | jq -r .) || {
        rm -f "$data"
        exit 1
      }
      rm -f "$data"
      echo "aws-ec2.sh: started $name as $id ($type)" >&2
    else
      echo "aws-ec2.sh: $name runs already as $id" >&2
    fi
    answer=$(jq -c --arg name "$name" --arg id "$id" '. + [{name: $name, id: $id}]' <<<"$answer")
  done
  jq -c -n --argjson machines "$answer" '{machines: $machines}'
}

stop() {
  local stopped='[]' name ids
  for name in $(jq -r '.machines[].name' <<<"$request"); do
    ids=$(instance_of "$name" pending,running,stopping,stopped)
    if [[ -n "$ids" ]]; then
      # shellcheck disable=SC2086 # one word per instance id
      aws_ ec2 terminate-instances --instance-ids $ids >&2
      echo "aws-ec2.sh: terminated $name ($ids)" >&2
    else
      echo "aws-ec2.sh: $name has no live instance: stopped already" >&2
    fi
    stopped=$(jq -c --arg name "$name" '. + [$name]' <<<"$stopped")
  done
  jq -c -n --argjson stopped "$stopped" '{stopped: $stopped}'
}

case "$action" in
  start) start ;;
  stop) stop ;;
  *)
    echo "aws-ec2.sh: unknown action \"$action\"" >&2
    exit 2
    ;;
esac
