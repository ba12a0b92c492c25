#!/bin/bash
# gpu-check.sh STRATA_BINARY: on a host with an NVIDIA GPU and PyTorch,
# starts one agent (NVML discovery on), prints the GPUs it found, runs a
# one-GPU TrainingJob (PyTorch on cuda: a logistic regression, 300 Adam
# steps) through it and prints the job's state and output. Exit status 0
# when the job succeeded.
set -u
bin=${1:?usage: gpu-check.sh STRATA_BINARY}
dir=$(mktemp -d)
export STRATA_ADDR=http://127.0.0.1:7470
"$bin" agent -name gpu-0 -tier onprem -site dc -data-dir "$dir/data" -api 127.0.0.1:7470 -bind 127.0.0.1:7946 -data-addr 127.0.0.1:7471 > "$dir/agent.log" 2>&1 &
agent=$!
trap 'kill $agent; wait $agent; rm -rf "$dir"' EXIT
for _ in $(seq 1 30); do "$bin" node gpu-0 -o json > "$dir/node.json" 2>/dev/null && break; sleep 1; done # the agent's start
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('GPUs found:', json.dumps(d['capabilities']['gpus']))" "$dir/node.json"
cat > "$dir/job.yaml" <<'Y'
apiVersion: strata/v1
kind: TrainingJob
metadata: {name: gpu-check}
spec:
  resources: {cpu: 500m, memory: 1Gi, gpus: {count: 1}}
  launcher: exec
  command: [python3, -c, "import torch; d='cuda'; torch.manual_seed(0); X=torch.randn(65536,64,device=d); y=(X@torch.randn(64,1,device=d)>0).float(); m=torch.nn.Linear(64,1).to(d); o=torch.optim.Adam(m.parameters(),lr=0.05); f=torch.nn.BCEWithLogitsLoss(); [(o.zero_grad(), f(m(X),y).backward(), o.step()) for _ in range(300)]; print('device', torch.cuda.get_device_name(0), 'loss', f(m(X),y).item(), 'accuracy', ((m(X)>0).float()==y).float().mean().item())"]
Y
"$bin" apply -f "$dir/job.yaml" || exit 1
state=
for _ in $(seq 1 120); do # the job's run, up to 2 minutes
  state=$("$bin" jobs -o json 2>/dev/null | python3 -c "import json,sys; print(''.join(j['state'] for j in json.load(sys.stdin) if j['name']=='gpu-check'))" 2>/dev/null)
  case $state in succeeded|failed) break ;; esac
  sleep 1
done
"$bin" jobs
"$bin" logs gpu-check
[ "$state" = succeeded ]
