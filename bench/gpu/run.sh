#!/usr/bin/env bash
# GPU throughput of plate_recognition: see bench/gpu/README.md.
#
#   bench/gpu/run.sh prepare [REPO]  # here (no GPU): wheels, slim Triton, models (built as
#                                    # TorchScript unless REPO), clip -> bench/gpu/carry/
#   bench/gpu/run.sh check       # here: unpack the carry like the device does, dry-run the bench
#   bench/gpu/run.sh cpu-smoke   # here: the whole flow on the CPU Triton (short), end to end
#   bench/gpu/run.sh [ARGS...]   # on the GPU machine (carry: bench/gpu/carry); ARGS go to bench_gpu.py
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CARRY="$HERE/carry"
WHEELS="$HERE/wheels"

# Pinned inputs. The tritonserver of nvidia-pytriton 0.7.0 is Triton 2.51 (the project's
# embedded CPU Triton); its Python-backend stub needs numpy 1.x. The client side matches
# the project's .venv (tritonclient 2.73: protobuf 6 gencode, grpc gencode 1.81.1).
PYTRITON_SPEC="nvidia-pytriton==0.7.0"
STUB_SPECS=("numpy==1.26.4")
CLIENT_SPECS=("tritonclient==2.73.0" "protobuf==6.33.6" "grpcio==1.85.3" "python-rapidjson==1.25")
# The GPU machine's python3 (KINDS.md: Python 3.12.3 with torch 2.11+cu130). Only the
# Python-backend stubs of these versions are kept (the wheel has 3.8 to 3.13).
TARGET_PYTHON=${TARGET_PYTHON:-3.12}
STUB_PYTHONS=${STUB_PYTHONS:-$TARGET_PYTHON}
CARRY_LIMIT_MIB=64

die() { echo "run.sh: $*" >&2; exit 2; }

host_python() {
  if [[ -x "$REPO/.venv/bin/python" ]]; then echo "$REPO/.venv/bin/python"; else command -v python3; fi
}

pip_target() {  # pip_target DEST SPEC... : install wheels for the GPU machine's Python into DEST
  local dest=$1; shift
  local py; py=$(host_python)
  local platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  local pyv=${TARGET_PYTHON/./}
  "$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$TARGET_PYTHON" \
    --implementation cp --abi "cp$pyv" --abi abi3 --abi none "${platforms[@]}" \
    --platform any -d "$WHEELS" "$@"
  "$py" -m pip install --quiet --no-deps --no-index --find-links "$WHEELS" --only-binary=:all: \
    --python-version "$TARGET_PYTHON" --implementation cp --abi "cp$pyv" --abi abi3 --abi none \
    "${platforms[@]}" --platform any --no-compile --target "$dest" "$@"
}

pack() {  # pack ARCHIVE DIR : tar.xz of DIR's contents
  tar -C "$2" -cf - . | xz -T0 -9 >"$1"
}

find_clip() {
  local dirs=()
  [[ -n "${LPR_ASSETS_DIR:-}" ]] && dirs+=("$LPR_ASSETS_DIR")
  dirs+=("$REPO/../shared/assets" "${XDG_CACHE_HOME:-$HOME/.cache}/lpr-streamer/assets")
  for d in "${dirs[@]}"; do
    if [[ -f "$d/media/yard_cam.ts" ]]; then echo "$d/media/yard_cam.ts"; return; fi
  done
  return 1
}

prepare() {
  local models=${1:-}
  local py; py=$(host_python)
  local build; build=$(mktemp -d "${TMPDIR:-/tmp}/lpr-bench-prepare.XXXXXX")
  trap 'rm -rf "$build"' RETURN
  mkdir -p "$WHEELS"
  rm -rf "$CARRY.new"
  mkdir -p "$CARRY.new"

  # 1. A CPU-target model repository of TorchScript files (the GPU machine's torch runs
  # them on the GPU), built here unless one is given: make models builds OpenVINO by default.
  if [[ -z "$models" ]]; then
    models="$build/built"
    echo "building a CPU TorchScript repository into $models ..."
    (cd "$REPO" && "$py" -m converters build --target cpu --runtime torchscript --out "$models") \
      || die "building the TorchScript repository failed"
  fi
  "$py" - "$models" <<'EOF'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
info = json.loads((root / "build_info.json").read_text())
if info.get("target") != "cpu":
    sys.exit(f"{root}: built for {info.get('target')!r}; run `make models TARGET=cpu` first")
for name in ("detector", "stn", "lprnet"):
    if not (root / name / "1" / "model.pt").is_file():
        sys.exit(f"{root}/{name}/1/model.pt is missing; run `make models`")
print(f"models: {root} ({info})")
EOF
  mkdir -p "$build/models"
  (cd "$models" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - \
    build_info.json detector stn lprnet plate_recognition) | tar -C "$build/models" -xf -
  pack "$CARRY.new/models.tar.xz" "$build/models"

  # 2. The clip.
  local clip; clip=$(find_clip) || die "yard_cam.ts not found: run \`.venv/bin/python -m converters fetch\` or set LPR_ASSETS_DIR"
  cp "$clip" "$CARRY.new/yard_cam.ts"

  # 3. The tritonserver of the nvidia-pytriton wheel, slimmed to what the server needs.
  "$py" -m pip download --quiet --no-deps -d "$WHEELS" "$PYTRITON_SPEC"
  local wheel; wheel=$(find "$WHEELS" -maxdepth 1 -name 'nvidia_pytriton-0.7.0-*.whl' | head -1)
  [[ -n "$wheel" ]] || die "no nvidia_pytriton-0.7.0 wheel in $WHEELS"
  "$py" -m pip install --quiet --no-deps --no-index --no-compile --target "$build/triton-site" "$wheel"
  local server="$build/triton-site/pytriton/tritonserver"
  [[ -x "$server/bin/tritonserver" ]] || die "no bin/tritonserver in $wheel"
  for stub in "$server"/python_backend_stubs/*; do
    [[ " $STUB_PYTHONS " == *" $(basename "$stub") "* ]] || rm -rf "$stub"
  done
  # The bundled libpython 3.13 is linked by the 3.13 stub alone.
  [[ " $STUB_PYTHONS " == *" 3.13 "* ]] || rm -f "$build/triton-site/nvidia_pytriton.libs/"libpython3-*.so*
  # The package itself is not needed, only its folder: EmbeddedTriton finds it with find_spec.
  find "$build/triton-site/pytriton" -mindepth 1 -maxdepth 1 ! -name tritonserver -exec rm -rf {} +
  : >"$build/triton-site/pytriton/__init__.py"
  rm -rf "$build/triton-site/bin" "$build/triton-site"/nvidia_pytriton-*.dist-info/RECORD
  pack "$CARRY.new/triton-site.tar.xz" "$build/triton-site"

  # 4. numpy<2 for the Python-backend stub; the gRPC client for the bench's streams.
  pip_target "$build/stub-site" "${STUB_SPECS[@]}"
  rm -rf "$build/stub-site/bin"
  pack "$CARRY.new/stub-site.tar.xz" "$build/stub-site"
  pip_target "$build/client-site" "${CLIENT_SPECS[@]}"
  rm -rf "$build/client-site/bin"
  pack "$CARRY.new/client-site.tar.xz" "$build/client-site"

  "$py" - "$CARRY.new" "$models" "$wheel" "$STUB_PYTHONS" <<'EOF'
import hashlib, json, sys, time
from pathlib import Path
carry, models, wheel, stubs = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
bls = models / "plate_recognition" / "1"
manifest = {
    "prepared": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "pytriton_wheel": {"name": wheel.name, "bytes": wheel.stat().st_size},
    "stub_pythons": stubs.split(),
    "models_build_info": json.loads((models / "build_info.json").read_text()),
    "bls_sources_sha256": {p.name: sha(p) for p in sorted(bls.glob("*.py"))},
    "files": {p.name: {"bytes": p.stat().st_size, "sha256": sha(p)} for p in sorted(carry.iterdir())},
}
(carry / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
EOF
  rm -rf "$CARRY"
  mv "$CARRY.new" "$CARRY"
  report_size
  echo
  echo "ready. On the GPU machine: run(command='bash bench/gpu/run.sh', carry=['bench/gpu/carry'], timeout_s=480)"
}

report_size() {
  local carry_bytes tree_bytes
  carry_bytes=$(du -sb "$CARRY" | cut -f1)
  tree_bytes=$(cd "$REPO" && git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  ls -l "$CARRY"
  "$(host_python)" - "$carry_bytes" "$tree_bytes" "$CARRY_LIMIT_MIB" <<'EOF'
import sys
carry, tree, limit = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
total = (carry + tree) / 2**20
print(f"carry {carry / 2**20:.1f} MiB + working tree {tree / 2**20:.1f} MiB = {total:.1f} MiB "
      f"(limit {limit} MiB)")
if total > limit - 2:
    sys.exit("too large for the device tool: drop something from the carry")
EOF
}

unpack() {  # unpack WORK : the carry's archives into WORK (what the GPU machine does)
  local work=$1 py=$2
  rm -rf "$work/models" "$work/triton-site" "$work/stub-site" "$work/client-site"
  "$py" - "$CARRY" "$work" <<'EOF'
import sys, tarfile, time
from pathlib import Path
carry, work = Path(sys.argv[1]), Path(sys.argv[2])
started = time.monotonic()
for name in ("models", "triton-site", "stub-site", "client-site"):
    archive = carry / f"{name}.tar.xz"
    if not archive.is_file():
        sys.exit(f"{archive} is missing: run `bench/gpu/run.sh prepare` here and carry bench/gpu/carry")
    with tarfile.open(archive) as tar:
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(work / name, **kwargs)
print(f"unpacked the carry into {work} in {time.monotonic() - started:.1f} s")
EOF
}

stale_check() {  # warn when the BLS sources changed since `prepare`
  "$1" - "$CARRY/manifest.json" "$REPO/model_repository/plate_recognition/1" <<'EOF' || true
import hashlib, json, sys
from pathlib import Path
manifest = json.loads(Path(sys.argv[1]).read_text())
for name, digest in manifest["bls_sources_sha256"].items():
    path = Path(sys.argv[2]) / name
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        print(f"WARNING: {path} changed since `run.sh prepare` ({manifest['prepared']}): "
              "the carry holds the old one; run prepare again")
EOF
}

check() {
  local py; py=$(host_python)
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/lpr-bench-check.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  [[ -f "$CARRY/manifest.json" ]] || die "no $CARRY/manifest.json: run \`bench/gpu/run.sh prepare\` first"
  "$py" -m py_compile "$HERE/bench_gpu.py"
  bash -n "$HERE/run.sh"
  report_size
  stale_check "$py"
  unpack "$work" "$py"
  local server="$work/triton-site/pytriton/tritonserver"
  ls "$server/python_backend_stubs"
  for f in "$server/bin/tritonserver" "$server"/python_backend_stubs/*/triton_python_backend_stub \
    "$server/backends/python/libtriton_python.so"; do
    [[ -x "$f" || -f "$f" ]] || die "missing $f"
    echo "$f: $(LD_LIBRARY_PATH="$work/triton-site/nvidia_pytriton.libs" ldd "$f" | grep -c 'not found') libraries not found here:" \
      "$(LD_LIBRARY_PATH="$work/triton-site/nvidia_pytriton.libs" ldd "$f" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
  done
  ls "$work/stub-site" "$work/client-site"
  # The bench's CPU-independent parts: repository copy + config parse, frames, model check.
  # --device cuda: the GPU repository (KIND_GPU, GPU batching) as it will be written there.
  local device
  for device in cpu cuda; do
    OUT="$work/out-$device" "$py" "$HERE/bench_gpu.py" --dry-run --device "$device" \
      --models "$work/models" --clip "$CARRY/yard_cam.ts" --work "$work" --frames 8 \
      --micro-repeats 1 "$@" 2>"$work/dry-run-$device.log" || { cat "$work/dry-run-$device.log"; die "dry run ($device) failed"; }
    "$py" - "$work/out-$device/bench_gpu.json" "$work/model_repository" <<'EOF'
import json, sys
from pathlib import Path
report = json.load(open(sys.argv[1]))
print(f"dry run --device {report['args']['device']}: {report['finished']}, frames {report['frames']}")
print(f"  model check: {report['model_check']}")
print(f"  stub packages: {report.get('stub_packages', '-')}")
print(f"  parsed/compiled: {', '.join(report['repository']['checked'])}")
for config in sorted(Path(sys.argv[2]).glob("*/config.pbtxt")):
    keep = [l.strip() for l in config.read_text().splitlines()
            if l.strip().startswith(("max_batch_size", "preferred_batch_size", "kind", "count", "max_queue"))
            or '"device"' in l]
    print(f"  {config.parent.name}: {' | '.join(keep)}")
EOF
  done
}

cpu_smoke() {
  local py; py=$(host_python)
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/lpr-bench-smoke.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  local clip; clip=$(find_clip) || die "yard_cam.ts not found"
  OUT="${OUT:-$HERE/out}" PYTHONUNBUFFERED=1 "$py" "$HERE/bench_gpu.py" --device cpu \
    --models "$REPO/model_repository" --clip "$clip" --work "$work" \
    --streams 1,2 --in-flight 1 --duration 8 --warmup 8 --server-warmup 0 --frames 12 \
    --micro-repeats 1 --startup-timeout 300 "$@"
}

device() {
  local out=${OUT:-$HERE/out}
  local work=${LPR_BENCH_WORK:-/tmp/lpr-bench-gpu}
  local py=${PYTHON:-python3}
  mkdir -p "$out" "$work"
  exec > >(tee -a "$out/run_log.txt") 2>&1
  echo "== $(date -u +%FT%TZ) lpr-streamer GPU bench on $(hostname)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,utilization.gpu --format=csv || echo "no nvidia-smi"
  echo "python: $(command -v "$py") $("$py" -V 2>&1); cpus: $(nproc); /dev/shm: $(df -h /dev/shm | tail -1)"
  [[ -f "$CARRY/manifest.json" ]] || die "no $CARRY: run \`bench/gpu/run.sh prepare\` on the dev machine and carry bench/gpu/carry"
  unpack "$work" "$py"

  local minor; minor=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  local libs="$work/triton-site/nvidia_pytriton.libs"
  local server="$work/triton-site/pytriton/tritonserver"
  local stub="$server/python_backend_stubs/$minor/triton_python_backend_stub"
  [[ -f "$stub" ]] || die "no Python-backend stub for Python $minor in the carry: prepare with TARGET_PYTHON=$minor"
  # The stub links the system libpython$minor.so.1.0 (not in the wheel): find it.
  if LD_LIBRARY_PATH="$libs" ldd "$stub" | grep -q "libpython$minor.so.1.0 => not found"; then
    local dir found=""
    for dir in "$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')" \
      "$(dirname "$(dirname "$(readlink -f "$(command -v "$py")")")")/lib" \
      /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/lib; do
      if [[ -n "$dir" && -e "$dir/libpython$minor.so.1.0" ]]; then found=$dir; break; fi
    done
    if [[ -z "$found" ]]; then
      found=$(find /usr /opt /root -maxdepth 7 -name "libpython$minor.so.1.0" 2>/dev/null | head -1 | xargs -r dirname)
    fi
    [[ -n "$found" ]] || { echo "FATAL: libpython$minor.so.1.0 not found: the Python-backend stub cannot run here"; exit 3; }
    echo "libpython$minor.so.1.0 from $found"
    export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  for f in "$stub" "$server/bin/tritonserver" "$server/backends/python/libtriton_python.so"; do
    if LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}" ldd "$f" | grep 'not found'; then
      echo "FATAL: $f has unresolved libraries (above)"; exit 3
    fi
  done

  export PYTHONPATH="$work/client-site:$work/triton-site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1
  unset LPR_TRITON_PYTHON_ENV
  "$py" -c 'import grpc, tritonclient.grpc.aio, cv2, numpy, torch; print("client: grpc", grpc.__version__, "numpy", numpy.__version__, "cv2", cv2.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available())' \
    || { echo "FATAL: the bench's own imports fail (above)"; exit 3; }
  set +e
  "$py" -u "$HERE/bench_gpu.py" --models "$work/models" --clip "$CARRY/yard_cam.ts" --work "$work" \
    --out "$out" --stub-site "$work/stub-site" "$@"
  local rc=$?
  set -e
  echo "== bench_gpu.py exit code $rc; files in $out:"
  find "$out" -maxdepth 1 -type f -printf '%f %s bytes\n'
  return $rc
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  check) shift; check "$@" ;;
  cpu-smoke) shift; cpu_smoke "$@" ;;
  -h|--help) sed -n '2,8p' "$0" ;;
  *) device "$@" ;;
esac
