#!/usr/bin/env bash
# Two CPU ranks train the quickstart recipe on the bundled WikiText-2 for 200 updates, are SIGKILLed mid-training and
# resumed with `latest`; the same command runs uninterrupted beside it; the 2-rank step_100 is resumed on 1 process.
# Prints each command ("$ ...") and its stdout (progress bars go to WORK/*.err). Run from the repository root with
# the venv active (a few minutes on 2 cores); kill_resume_cpu.txt beside this script is its output:
#   bash results/distributed/kill_resume.sh [WORK] > results/distributed/kill_resume_cpu.txt
set -euo pipefail
WORK=${1:-outputs/kill_resume}
[ -e "$WORK" ] && { echo "$WORK exists: give another folder" >&2; exit 2; }
mkdir -p "$WORK"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
ARGS="--config examples/configs/quickstart_cpu.json --num_threads 1 --max_train_steps 200 --checkpointing_steps 50"
ARGS="$ARGS --log_every 10"
TWO="accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no"
TWO="$TWO --main_process_port 29871 examples/train.py --cpu $ARGS"
ONE="accelerate launch --cpu --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no"
ONE="$ONE examples/train.py $ARGS --per_device_train_batch_size 64 --per_device_eval_batch_size 64"
echo "\$ TWO=\"$TWO\""

run() {  # run NAME SHOWN ARGS...: show "$ SHOWN ARGS...", run the command SHOWN names with ARGS, show its stdout
    local name=$1 shown=$2 cmd=${!2}; shift 2
    echo "\$ \$$shown $*"
    $cmd "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" || echo "(exit status $?)"
    cat "$WORK/$name.out"
}
last_step() { tail -n 1 "$1/log.jsonl" 2>/dev/null | python -c "import json,sys; print(json.load(sys.stdin)['step'])" \
    2>/dev/null || echo 0; }

# 1. the 2-rank run, SIGKILLed (the launcher and both rank processes) once it has logged step 130
echo "\$ \$TWO --output_dir $WORK/two &"
$TWO --output_dir "$WORK/two" > "$WORK/two.out" 2> "$WORK/two.err" &
launcher=$!
trap 'kill -KILL $(pgrep -P $launcher) $launcher 2>/dev/null || true' EXIT
while [ "$(last_step "$WORK/two")" -lt 130 ]; do
    kill -0 $launcher 2>/dev/null || { echo "the run ended before step 130" >&2; exit 1; }
    sleep 0.2
done
ranks=$(pgrep -P $launcher | tr '\n' ' ')
echo "\$ kill -KILL $launcher ${ranks% }  # the launcher and its 2 ranks; log.jsonl's last step: $(last_step "$WORK/two")"
kill -KILL $launcher $ranks
wait $launcher 2>/dev/null || echo "(exit status $?)"
cat "$WORK/two.out"
echo "# checkpoints left:" $(ls "$WORK/two" | grep '^step_' | sort -t_ -k2 -n)
trap - EXIT

# 2. the same command resumed from the newest checkpoint, and the same command uninterrupted
run two_resumed TWO --output_dir "$WORK/two" --resume_from_checkpoint latest
run uninterrupted TWO --output_dir "$WORK/uninterrupted"
echo "# log.jsonl and results.json: killed + resumed vs uninterrupted"
python - "$WORK/two" "$WORK/uninterrupted" <<'PY'
import json, sys
from pathlib import Path
rows = [[json.loads(r) for r in (Path(d) / "log.jsonl").read_text().splitlines()] for d in sys.argv[1:]]
ref = {r["step"]: r["train_loss"] for r in rows[1] if "train_loss" in r}
got = [(r["step"], r["train_loss"]) for r in rows[0] if "train_loss" in r]
same = all(loss == ref[step] for step, loss in got)
print(f"train_loss at {len(got)} logged steps (before the kill and after the resume): "
      f"{'all equal' if same else 'DIFFERENT'} to the uninterrupted run's ({len(ref)} steps)")
res = [json.loads((Path(d) / "results.json").read_text()) for d in sys.argv[1:]]
for k in ("validation_ppl", "test_ppl", "targets_seen"):
    print(f"{k}: {res[0][k]!r} vs {res[1][k]!r}: {'equal' if res[0][k] == res[1][k] else 'DIFFERENT'}")
PY

# 3. the 2-rank step_100 resumed on one process with batch 64: the same 64 streams, re-sharded
echo "\$ ONE=\"$ONE\""
run one ONE --output_dir "$WORK/one" --resume_from_checkpoint "$WORK/two/step_100"
