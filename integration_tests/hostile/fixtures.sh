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
