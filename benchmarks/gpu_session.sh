#!/usr/bin/env bash
# One lent-GPU session's checks, as one prepared command (the device time is short and each start costs minutes).
# Needs, in the working tree: the packages the machine lacks or has too old (transformers 5.23, datasets), as
# .gpu/site.tar.xz or as wheels in .whl/, and for the 2x650 runs .gpu/ptb.tar.xz (your PTB copy:
# ptb/ptb.{train,valid,test}.txt; never committed). WikiText-2 is the bundled copy.
# Writes into $OUT (default ./gpu_out): cuda_checks.md, the benchmark table, the 2x650 runs' logs and results.
#   MINUTES=4 bash benchmarks/gpu_session.sh        (EXTRA: more train.py flags, e.g. a CPU dry run's)
#   CHECKS=1 BENCH=0 SPELL=1 BIG=0 BASELINE=byte MINUTES=4.5 TESTS="tests/test_train_raw_text.py -n 4" bash ...
# The tree that travels to a lent machine must fit in 64 MiB and the tracked weights under pretrained/ are 110 MB:
# move the folders a run does not read (cuda_checks.py reads the PTB pointer folder) out of the tree for the call.
set -u
OUT=${OUT:-gpu_out}
MINUTES=${MINUTES:-4}
mkdir -p "$OUT" /tmp/site /tmp/data/wikitext-2 /tmp/runs
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
[ -f .gpu/site.tar.xz ] && tar xJf .gpu/site.tar.xz -C /tmp/site
ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
[ -f .gpu/ptb.tar.xz ] && tar xJf .gpu/ptb.tar.xz -C /tmp/data
for s in train valid test; do xz -dc modeling_pointer_sentinel/data/wikitext-2/wiki.$s.tokens.xz >/tmp/data/wikitext-2/wiki.$s.tokens; done
PY=${PY:-python3}
# The files train.py reads for dataset $1 (ptb, wt2); $2 True or False: with the test split.
flags() { $PY -c "import sys; sys.path.insert(0, 'examples'); from quality_runs import data_flags; from pathlib import Path; print(' '.join(data_flags(Path('/tmp/data'), '$1', test=$2)))"; }
# A 2x200 run's config, without checkpoints (they would not fit the files that come back): $1 a Python expression
# over quality_runs (q) and recipe_study (r).
config() { $PY -c "import json, sys; sys.path.insert(0, 'examples'); import quality_runs as q, recipe_study as r; cfg = $1; print(json.dumps({k: v for k, v in cfg.items() if not k.startswith('checkpoint')}))"; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import torch, transformers, accelerate, datasets; print(torch.__version__, transformers.__version__, accelerate.__version__, datasets.__version__)"; } 2>&1 | tee "$OUT/env.txt"

if [ "${CHECKS:-1}" = 1 ]; then
timeout 180 $PY benchmarks/cuda_checks.py >"$OUT/cuda_checks.md" 2>"$OUT/cuda_checks.err"; echo "cuda_checks rc=$?"
if [ "${BENCH:-1}" = 1 ]; then
timeout 180 $PY benchmarks/run.py --device cuda --dtype bfloat16 --write "$OUT/results_cuda_bf16.md" >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
fi
fi

# SPELL=1: the speller's rows of benchmarks/run.py (generate's step with the speller against placeholders, a spelled
# byte against a word step), timed while nothing else runs.
if [ "${SPELL:-0}" = 1 ]; then
timeout 180 $PY benchmarks/run.py --device cuda --only spell --write "$OUT/results_spell_cuda.md" >"$OUT/spell.log" 2>&1
echo "spell rc=$?"
fi

# BASELINE=NAME: resume the spelling baseline runs/baselines/NAME (examples/baselines.py; carry the folder) on the GPU
# for MINUTES, killed there (its newest checkpoint survives; a checkpoint each CKPT updates), and bring the run back as
# $OUT/baseline_NAME.tar; beside the TESTS below. The same recipe, on another device from the checkpoint on.
if [ -n "${BASELINE:-}" ]; then
  kind=${BASELINE%%[0-9]*}
  timeout -s KILL "$($PY -c "print(int(60 * $MINUTES))")" $PY examples/baselines.py train "$kind" \
    --output_dir "runs/baselines/$BASELINE" --checkpointing_steps "${CKPT:-1000}" >"runs/baselines/$BASELINE/gpu.log" 2>&1 &
  base=$!
fi
# TESTS="pytest arguments": those tests on this host, where train.py's accelerate picks the GPU.
if [ -n "${TESTS:-}" ]; then
  timeout 300 $PY -m pytest -p no:cacheprovider -q $TESTS >"$OUT/tests_gpu.log" 2>&1; echo "tests rc=$?"
fi
if [ -n "${BASELINE:-}" ]; then
  wait $base; echo "baseline rc=$?"
  tar cf "$OUT/baseline_$BASELINE.tar" -C runs/baselines "$BASELINE"
fi

# DECODE=1: issue 30's generate / step-loop ratio (batch 1 and 32, one thread, 25 rounds) on this host's idle CPU
# cores, where the development machine's shared cores swing rounds by +-40%; eager paths only (no onnx extra and no
# compiler assumed here). Before the GPU runs, which would load the host.
if [ "${DECODE:-0}" = 1 ]; then
timeout 300 $PY -c "import sys; sys.path.insert(0, 'benchmarks'); import run; from modeling_pointer_sentinel import \
PointerSentinelForCausalLM as M; print(run.decode_paths(M.from_pretrained(run.ROOT / 'pretrained/ptb-pointer-sentinel-lstm-2x200'), \
'PTB, the lent GPU host CPU', 25, False, configs=((1, 1), (1, 32)), compiled=False))" >"$OUT/decode_host_cpu.md" 2>"$OUT/decode.err"
echo "decode rc=$?"
fi

# 2x650 tied, the paper's window and dropout 0.5 (no zoneout), GluonNLP's SGD 20 + NT-ASGD, bf16 autocast; four runs
# side by side on the one GPU for the same wall-clock budget each.
for ds in $([ "${BIG:-1}" = 1 ] && echo ptb wt2); do
  for kind in pointer plain; do
    ptr=$([ $kind = pointer ] && echo true || echo false)
    cut=$([ $ds = wt2 ] && echo ', "adaptive_softmax_cutoffs": [2000, 10000]' || echo '')
    cat >/tmp/runs/${ds}_$kind.json <<EOF
{"model": {"embedding_size": 650, "hidden_size": 650, "num_layers": 2, "tie_word_embeddings": true,
 "pointer_window": 100, "input_dropout": 0.5, "hidden_dropout": 0.5, "output_dropout": 0.5, "use_pointer": $ptr$cut},
 "scheme": "stateful", "bptt": 35, "per_device_train_batch_size": 20, "per_device_eval_batch_size": 10,
 "optimizer": "ntasgd", "learning_rate": 20.0, "clip": 0.25, "num_train_epochs": 1000, "patience": 1000,
 "log_every": 200}
EOF
    $PY examples/train.py --config /tmp/runs/${ds}_$kind.json $(flags $ds True) --output_dir /tmp/runs/${ds}_$kind \
      --mixed_precision bf16 --max_train_minutes "$MINUTES" ${EXTRA:-} >/tmp/runs/${ds}_$kind.log 2>&1 &
  done
done
# SMALL=1: also the shipped 2x200 WikiText-2 shape with quality_runs.py's SGD recipe, in fp32, as a learning curve
# for the CPU convergence.
if [ "${SMALL:-0}" = 1 ]; then
  for kind in pointer plain; do
    config "q.run_config('wt2', '$kind' == 'pointer', q.RECIPES['sgd'], q.RECIPE_MODEL['sgd']['wt2'])" >/tmp/runs/wt2_small_$kind.json
    $PY examples/train.py --config /tmp/runs/wt2_small_$kind.json $(flags wt2 True) --output_dir /tmp/runs/wt2_small_$kind \
      --max_train_minutes "$MINUTES" >/tmp/runs/wt2_small_$kind.log 2>&1 &
  done
fi
# STUDY="NAME ...": recipe_study.py's candidates, on validation only, for EPOCHS epochs each (or MINUTES), in fp32:
# a per-epoch ranking of recipes, not the study's equal CPU budget.
for name in ${STUDY:-}; do
  config "{**r.config('$name'), 'num_train_epochs': ${EPOCHS:-4}}" >/tmp/runs/$name.json
  ds=$($PY -c "import sys; sys.path.insert(0, 'examples'); from recipe_study import CANDIDATES; print(CANDIDATES['$name'][0])")
  $PY examples/train.py --config /tmp/runs/$name.json $(flags $ds False) --output_dir /tmp/runs/$name \
    --max_train_minutes "$MINUTES" >/tmp/runs/$name.log 2>&1 &
done
wait
ls /tmp/runs/*.log >/dev/null 2>&1 || exit 0
tar czf "$OUT/runs.tar.gz" -C /tmp/runs --exclude='*.safetensors' --exclude='step_*' .
for r in /tmp/runs/*.log; do echo "== $r"; tr '\r' '\n' <"$r" | grep -E "valid ppl|test|Error|error" | tail -n 6; done
