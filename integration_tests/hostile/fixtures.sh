# Fixtures of the hostile-input catalogue (cases.tsv), sourced by
# run_catalogue.py in each case's scratch directory ($W) before the case's
# setup and command run. Nothing here writes to stderr.

# hostile KIND PATH: makes PATH into KIND and prints nothing.
hostile() {
  local kind=$1 path=$2
  rm -rf "$path"
  case $kind in
    dir) mkdir -p "$path" ;;
    fifo) mkfifo "$path" ;;
    socket) python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$path" ;;
    empty) : >"$path" ;;
    nul) printf '[1, 2\0, 3]\n' >"$path" ;;
    nul_only) head -c 4096 /dev/zero >"$path" ;;
    deep) python3 -c 'import sys; open(sys.argv[1],"w").write("["*200000+"]"*200000)' "$path" ;;
    deep_object) python3 -c 'import sys; open(sys.argv[1],"w").write("{\"a\":"*100000+"1"+"}"*100000)' "$path" ;;
    garbage) head -c 8192 /dev/urandom >"$path" ;;
    latin1) printf '[4096, 12\xe9]\n' >"$path" ;;
    truncated_json) printf '[4096, 812, 7' >"$path" ;;
    trailing) printf '[4096, 812] [1]\n' >"$path" ;;
    huge_sparse) truncate -s 3G "$path" ;;
    long_line) python3 -c 'import sys; open(sys.argv[1],"w").write("["+",".join(["7"]*300000)+"]")' "$path" ;;
    symloop) ln -s "$path" "$path" ;;
    enotdir) : >"$path.file" ;;  # use "$path.file/x" as the path
    dangling) ln -s "$path.nowhere" "$path" ;;
    *) return 1 ;;
  esac
}

# A small, fast training configuration: one worker, a tiny model, one step.
tiny_config() {
  cat >"$1" <<YAML
parallel:
  dp_size: 1
  cp_size: 1
model:
  hidden_size: 16
  num_layers: 1
  num_heads: 2
  vocab_size: 64
data:
  seq_length: 32
  global_batch_size: 2
  num_samples: 16
  max_length: 32
train:
  steps: 1
dist:
  timeout_s: 10
  op_timeout_s: 10
YAML
}

# A JSONL token file of N samples with ids below 64.
tiny_jsonl() {
  python3 -c 'import sys
with open(sys.argv[1], "w") as f:
    for i in range(16): f.write("[" + ",".join(str((i * 7 + j) % 64) for j in range(20)) + "]\n")' "$1"
}

# A listener holding TCP port $1 until the case ends.
hold_port() {
  python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); time.sleep(60)' "$1" &
  sleep 0.5
}

# A Megatron .idx/.bin pair PREFIX of 2000 int32 sequences of 5 to 40 ids
# below 64, written by the published MMIDIDX layout.
tiny_megatron() {
  python3 - "$1" <<'PY'
import random, struct, sys
random.seed(1)
seqs = [[random.randrange(64) for _ in range(random.randint(5, 40))] for _ in range(2000)]
pointers, at = [], 0
for s in seqs:
    pointers.append(at)
    at += 4 * len(s)
idx = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, 4, len(seqs), len(seqs) + 1)
idx += b"".join(struct.pack("<i", len(s)) for s in seqs)
idx += b"".join(struct.pack("<q", p) for p in pointers)
idx += b"".join(struct.pack("<q", i) for i in range(len(seqs) + 1))
open(sys.argv[1] + ".idx", "wb").write(idx)
open(sys.argv[1] + ".bin", "wb").write(b"".join(struct.pack(f"<{len(s)}i", *s) for s in seqs))
PY
}

# The sets of a small balancer.schedule.profile: auto job (hybrid, 2 ranks,
# a refit after every step) that the checkpoint-entry cases train and resume.
AUTO_SETS="--set parallel.mode=hybrid --set parallel.world_size=2 --set balancer.schedule.profile=auto --set balancer.schedule.refit_every=1"

# auto_checkpoint CONFIG DIR: trains that job for 2 steps, writing
# DIR/step-00000002.ckpt with its refitted profile.
auto_checkpoint() {
  # shellcheck disable=SC2086
  $F train --config "$1" $AUTO_SETS --set train.steps=2 --set train.checkpoint_every=2 \
    --set train.checkpoint_dir="$2" >/dev/null 2>&1
}

# ckpt_entry MODE FILE: rewrites the checkpoint FILE's schedule/profile_refit
# entry and makes its CRCs right again, so that only the entry's own checks
# can refuse it. MODE: truncate (its last 5 bytes cut), version (99), foreign
# (another model's K/V bytes per token), steps (2^62 steps in the window),
# nan (the last sample's seconds NaN), tail (a byte after its end), drop
# (no entry: an older checkpoint), peers (the last sample's peers 2^20),
# group (the last sample's group 2^20 + 1, past what a schedule places),
# partial (the last sample's partial tiles 2^40, past its tiles). The
# offsets are the entry's version 2 (runtime/train/checkpoint_profile.h):
# ten profile doubles, and 60 bytes a sample ending in its row tokens and
# partial tiles.
ckpt_entry() {
  python3 - "$1" "$2" <<'PY'
import struct, sys, zlib
mode, path = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
head, payload = bytearray(data[:56]), data[56:]
(count,) = struct.unpack_from("<I", payload, 0)
at, blobs = 4, []
for _ in range(count):
    (n,) = struct.unpack_from("<I", payload, at)
    name = payload[at + 4:at + 4 + n]
    (m,) = struct.unpack_from("<Q", payload, at + 4 + n)
    blobs.append([name, bytearray(payload[at + 12 + n:at + 12 + n + m])])
    at += 12 + n + m
entry = next(b for b in blobs if b[0] == b"schedule/profile_refit")
e = entry[1]
(name_length,) = struct.unpack_from("<Q", e, 20)
steps_at = 112 + name_length
if mode == "truncate": entry[1] = e[:-5]
elif mode == "version": struct.pack_into("<I", e, 0, 99)
elif mode == "foreign": struct.pack_into("<d", e, 4, 1.0)
elif mode == "steps": struct.pack_into("<Q", e, steps_at, 1 << 62)
elif mode == "nan": struct.pack_into("<d", e, len(e) - 24, float("nan"))
elif mode == "peers": struct.pack_into("<q", e, len(e) - 40, 1 << 20)
elif mode == "group": struct.pack_into("<i", e, len(e) - 60, (1 << 20) + 1)
elif mode == "partial": struct.pack_into("<q", e, len(e) - 8, 1 << 40)
elif mode == "tail": e.append(0)
elif mode == "drop": blobs.remove(entry)
else: sys.exit("ckpt_entry: unknown mode " + mode)
out = struct.pack("<I", len(blobs)) + b"".join(
    struct.pack("<I", len(n)) + n + struct.pack("<Q", len(d)) + bytes(d) for n, d in blobs)
struct.pack_into("<QI", head, 40, len(out), zlib.crc32(out))
struct.pack_into("<I", head, 52, zlib.crc32(bytes(head[:52])))
open(path, "wb").write(bytes(head) + out)
PY
}
