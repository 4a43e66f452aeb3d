#!/usr/bin/env bash
# fmstack data prepare + train + generate end to end on the King James Bible:
# gpt-mini's held-out loss falls steadily and clearly below the unigram
# entropy of the corpus (which `data prepare` computes), its checkpoint
# resumes in another run, and the trained model generates text from it.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$FMSTACK" data prepare --out "$tmp/kjv" >"$tmp/prepare.txt"
cat "$tmp/prepare.txt"
unigram=$(sed -n 's/.*unigram entropy \([0-9.]*\) nats.*/\1/p' "$tmp/prepare.txt")

cat >"$tmp/job.toml" <<TOML
name = "kjv-short"
model = "gpt-mini"
[train]
micro_batch = 4
global_batch = 4
steps = 80
eval_interval = 40
eval_batches = 10
[optim]
lr = 2e-3
warmup_steps = 10
[data]
dir = "$tmp/kjv"
TOML
"$FMSTACK" train "$tmp/job.toml" --out "$tmp/run" >"$tmp/summary.txt" 2>"$tmp/progress.txt"
cat "$tmp/summary.txt"
grep 'held-out loss' "$tmp/progress.txt"
mapfile -t held_out < <(sed -n 's/.*held-out loss \([0-9.]*\).*/\1/p' "$tmp/progress.txt")
echo "unigram entropy $unigram; held-out loss at steps 40, 80: ${held_out[*]}"
/usr/bin/python3 - "$unigram" "${held_out[@]}" <<'PY'
import sys
unigram, at40, at80 = map(float, sys.argv[1:4])
assert at80 < at40, f"held-out loss did not fall: {at40} -> {at80}"
assert at80 < unigram - 0.4, f"held-out loss {at80} is not clearly below the unigram entropy {unigram}"
PY

# A bad spec names the file and key.
printf 'model = "gpt-mini"\n[optim]\nlr = 1e-3\nmin_lr = 1e-2\n' >"$tmp/bad.toml"
if "$FMSTACK" train "$tmp/bad.toml" 2>"$tmp/err.txt"; then echo "bad spec accepted"; exit 1; fi
grep -q "bad.toml:4.*optim.min_lr" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }

# A resume under another schedule (82 steps, the checkpoint's run had 80) is
# refused before training, naming the change and the flag that accepts it.
rc=0
"$FMSTACK" train "$tmp/job.toml" --resume "$tmp/run/ckpt" --steps 82 --out "$tmp/run2" \
  >/dev/null 2>"$tmp/refused.err" || rc=$?
[ "$rc" = 2 ] || { cat "$tmp/refused.err"; echo "a schedule change: exit $rc, expected 2"; exit 1; }
grep -q 'step-00000080 was written under another schedule (train.steps 80 -> 82).*--allow-schedule-change' \
  "$tmp/refused.err" || { cat "$tmp/refused.err"; echo "the refusal does not name the change"; exit 1; }
[ ! -e "$tmp/run2/ckpt" ] || { echo "the refused resume left a checkpoint directory"; exit 1; }
# With the flag it continues from the checkpoint and says what changed; a
# corrupt checkpoint is refused by name.
"$FMSTACK" train "$tmp/job.toml" --resume "$tmp/run/ckpt" --steps 82 --out "$tmp/run2" \
  --allow-schedule-change >"$tmp/resume.txt" 2>"$tmp/resume3.err"
grep -q "82 (from 80)" "$tmp/resume.txt" || { cat "$tmp/resume.txt"; exit 1; }
grep -q 'the schedule differs from the run that wrote step-00000080 (train.steps 80 -> 82)' \
  "$tmp/resume3.err" || { cat "$tmp/resume3.err"; echo "the schedule change was not said"; exit 1; }
mkdir -p "$tmp/corrupt"
cp -r "$tmp/run/ckpt/step-00000080" "$tmp/corrupt/"
shard="$tmp/corrupt/step-00000080/rank-00000.safetensors"
printf '\x7f\x7f\x7f\x7f' | dd of="$shard" bs=1 seek=$(( $(stat -c %s "$shard") - 4096 )) conv=notrunc status=none
if "$FMSTACK" train "$tmp/job.toml" --resume "$tmp/corrupt" --out "$tmp/run3" 2>"$tmp/err.txt"; then
  echo "corrupt checkpoint accepted"; exit 1
fi
grep -q "rank-00000.safetensors: checksum mismatch" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
grep -q "no committed checkpoint" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }

"$FMSTACK" generate --ckpt "$tmp/run/ckpt" --prompt "And God said" --tokens 30 >"$tmp/sample.txt"
cat "$tmp/sample.txt"
[ "$(wc -c <"$tmp/sample.txt")" -gt 40 ] || { echo "no text generated"; exit 1; }
echo "train_kjv: ok"
