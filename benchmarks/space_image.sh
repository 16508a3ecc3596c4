#!/usr/bin/env bash
# The Space's image, built from the Dockerfile as committed and run as a Hugging Face Space runs it, on a machine with
# no Docker daemon and no registry (docs/deployment.md, "The image, checked"). Run as root (podman, mmdebstrap):
#
#   benchmarks/space_image.sh            # the committed HEAD
#   SPACE_REF=<commit> benchmarks/space_image.sh
#
# 1. A stand-in for python:3.11-slim made from Debian's packages (mmdebstrap of bookworm, whose python3 is 3.11, with
#    python and pip of a venv on PATH, and this machine's CA certificates so that pip reaches PyPI through its proxy),
#    tagged docker.io/library/python:3.11-slim so that `FROM python:3.11-slim` finds it without a registry.
# 2. The Dockerfile's CPU torch index (download.pytorch.org) is out of reach here: a local index of the same torch
#    (this machine's /opt/wheels and pip configuration) is mounted into the build and named by its TORCH_INDEX arg.
# 3. `podman build` of `git archive $SPACE_REF`. Podman's builder gives an existing folder to the `COPY --chown` user
#    where Docker's BuildKit keeps its owner, so the app folder's owner just before the first COPY is read from the
#    build's layers: that is what BuildKit leaves. When it is not uid 1000 the check fails, and the container is run
#    with the folder given back to that owner, as a BuildKit image would be.
# 4. The container runs as uid 1000 with a /data volume (a Space's persistent storage): the health endpoint, Home
#    (headless Chromium), the Train page's default run to its end, a save, the saved run opened, and an upload from a
#    page of another site framing the app; then the container is replaced (a Space restart) and the run's link and the
#    saved run are checked again. Figures and screenshots land in $SPACE_WORK/out (default /tmp/space-image/out).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${SPACE_WORK:-/tmp/space-image}
REF=${SPACE_REF:-HEAD}
PORT=${SPACE_PORT:-18501}
PY=${SPACE_PYTHON:-$ROOT/.venv/bin/python}
BASE=docker.io/library/python:3.11-slim
IMAGE=localhost/bert-explorer:${SPACE_TAG:-space-check}
NAME=bert-explorer-${SPACE_TAG:-space-check}
OUT=$WORK/out
mkdir -p "$WORK" "$OUT"
FIG=$OUT/figures.txt
: > "$FIG"
FAILED=0
say() { printf '%s %s\n' "$(date +%T)" "$*"; }
figure() { printf '%s\n' "$*" | tee -a "$FIG"; }
fail() { say "FAIL: $*"; figure "FAIL: $*"; FAILED=1; }

for tool in podman mmdebstrap runc; do
    command -v "$tool" >/dev/null || { say "installing $tool"; apt-get install -y -q podman buildah mmdebstrap uidmap runc >/dev/null; }
done
# This sandbox (a VM with cgroup v1 beside v2, and a hard limit on open files) refuses crun's defaults: runc, and the
# machine's own limits, for the build's steps and the container alike.
cat > "$WORK/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF=${SPACE_CONTAINERS_CONF:-$WORK/containers.conf}

# ------------------------------------------------------------------------------------------------ 1. the base
if ! podman image exists "$BASE" || [ "${SPACE_REBUILD_BASE:-0}" = 1 ]; then
    say "making the stand-in for python:3.11-slim from Debian bookworm"
    CA=$WORK/ca && rm -rf "$CA" && mkdir -p "$CA" && cp /usr/local/share/ca-certificates/*.crt "$CA"/ 2>/dev/null || true
    mmdebstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        --customize-hook="copy-in $CA/. /usr/local/share/ca-certificates/" \
        --customize-hook='chroot "$1" update-ca-certificates' \
        --customize-hook='chroot "$1" python3 -m venv /usr/local/python' \
        --customize-hook='chroot "$1" sh -c "rm -rf /var/lib/apt/lists/* /var/cache/apt/*"' \
        bookworm "$WORK/base.tar" http://deb.debian.org/debian
    podman import \
        --change 'ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["python"]' "$WORK/base.tar" "$BASE" >/dev/null
    rm -f "$WORK/base.tar"
fi
podman run --rm "$BASE" sh -c 'python --version && pip --version' | sed 's/^/base: /'

# ------------------------------------------------------------------------------------ 2. the torch wheel index
TORCH=$(sed -n 's/.*\(torch==[0-9.]*\).*/\1/p' "$ROOT/Dockerfile" | head -1)
INDEX=$WORK/torch-index
if [ ! -f "$INDEX/simple/torch/index.html" ]; then
    say "a local wheel index of $TORCH and its dependencies (download.pytorch.org is out of reach here)"
    rm -rf "$INDEX" && mkdir -p "$INDEX/wheels"
    "$PY" -m pip download -q --only-binary :all: -d "$INDEX/wheels" "$TORCH"
    "$PY" - "$INDEX" <<'EOF'
import re, sys
from pathlib import Path
root = Path(sys.argv[1])
projects = {}
for wheel in sorted((root / "wheels").glob("*.whl")):
    projects.setdefault(re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower(), []).append(wheel.name)
for name, wheels in projects.items():
    folder = root / "simple" / name
    folder.mkdir(parents=True)
    links = "".join(f'<a href="../../wheels/{w}">{w}</a>\n' for w in wheels)
    (folder / "index.html").write_text(f"<!doctype html><html><body>\n{links}</body></html>\n")
EOF
fi
ls "$INDEX/wheels" | grep '^torch-' | sed 's/^/torch wheel: /'

# ---------------------------------------------------------------------------------------------- 3. the build
CONTEXT=$WORK/context
rm -rf "$CONTEXT" && mkdir -p "$CONTEXT"
git -C "$ROOT" archive "$REF" | tar -x -C "$CONTEXT"
figure "commit: $(git -C "$ROOT" rev-parse --short "$REF")"
say "podman build (log: $OUT/build.log)"
T0=$(date +%s)
if ! podman build --format docker --layers --network host -v "$INDEX:/torch-index:ro" \
        --build-arg TORCH_INDEX=file:///torch-index/simple -t "$IMAGE" "$CONTEXT" > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"; fail "the image did not build"; exit 1
fi
figure "build: $(( $(date +%s) - T0 )) s, $(grep -c '^--> Using cache' "$OUT/build.log" || true) steps from cache (on $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
grep -E '^(polarity|ag_news|conll2000|error|warning):' "$OUT/build.log" | sed 's/^/build-time download: /' | tee -a "$FIG" || true
SIZE=$(podman image inspect "$IMAGE" --format '{{.Size}}')
figure "image size: $(awk "BEGIN {printf \"%.2f GB\", $SIZE / 1e9}") ($SIZE bytes)"

# The app folder's owner just before the first COPY, in the image of the step before it (the build's history, oldest
# first). Buildah makes a WORKDIR's folder only when a later step needs it; BuildKit makes it at the WORKDIR, as the
# USER then in effect (root when none), so a folder missing there counts as that user's.
APP_DIR=$(awk '/^WORKDIR/ {print $2; exit}' "$CONTEXT/Dockerfile")
BEFORE=$(podman history --no-trunc --format '{{.ID}} {{.CreatedBy}}' "$IMAGE" | tac |
         awk '/#\(nop\) COPY/ {print prev; exit} {prev = $1}')
if ! OWNER=$(podman run --rm --user 0 --entrypoint stat "$BEFORE" -c '%u' "$APP_DIR" 2>/dev/null); then
    USER_THEN=$(podman image inspect --format '{{.Config.User}}' "$BEFORE")
    OWNER=$(podman run --rm --user 0 --entrypoint id "$BEFORE" -u "${USER_THEN:-root}")
    figure "$APP_DIR does not exist before the first COPY: BuildKit's WORKDIR makes it as ${USER_THEN:-root}"
fi
figure "owner of $APP_DIR before the first COPY (what BuildKit keeps): uid $OWNER"
RUN_IMAGE=$IMAGE
if [ "$OWNER" != 1000 ]; then
    fail "$APP_DIR is uid $OWNER's before COPY --chown: under BuildKit the app could not write in it"
    printf 'FROM %s\nUSER root\nRUN chown %s %s\nUSER user\n' "$IMAGE" "$OWNER" "$APP_DIR" |
        podman build --format docker -t "$IMAGE-buildkit" -f - "$WORK" >/dev/null
    RUN_IMAGE=$IMAGE-buildkit
fi

# ------------------------------------------------------------------------------------------------ 4. the runs
DATA=$WORK/data
rm -rf "$DATA" && mkdir -p "$DATA" && chown 1000:1000 "$DATA"
start() {  # start the container; HEALTHY: the seconds to a healthy answer
    podman rm -f "$NAME" >/dev/null 2>&1 || true
    STARTED=$(date +%s.%N)
    # (podman's timer for the image's HEALTHCHECK needs systemd, absent here: it is run once by hand below)
    podman run -d --name "$NAME" --user 1000 -p "127.0.0.1:$PORT:8501" -v "$DATA:/data" "$RUN_IMAGE" >/dev/null 2>&1
    for _ in $(seq 1 1200); do
        if curl -fsS "http://127.0.0.1:$PORT/_stcore/health" 2>/dev/null | grep -q ok; then
            HEALTHY=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $STARTED}"); return 0
        fi
        sleep 0.1
    done
    podman logs "$NAME" | tail -20 >&2; return 1
}
cleanup() { podman rm -f "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT

say "first start"
start || { fail "the container never answered its health check"; exit 1; }
figure "healthy after start: $HEALTHY s"
podman healthcheck run "$NAME" >/dev/null && figure "the image's HEALTHCHECK: healthy" || fail "the image's HEALTHCHECK failed"
figure "container user: $(podman exec "$NAME" id -u), app folder owner: $(podman exec "$NAME" stat -c %u "$APP_DIR")"
"$PY" "$ROOT/benchmarks/space_image_checks.py" first "http://localhost:$PORT" --started "$STARTED" --out "$OUT" \
    || fail "a check of the first start failed (see $OUT/checks-first.json)"
"$PY" - "$OUT/checks-first.json" <<'EOF' | tee -a "$FIG"
import json, sys
f = json.load(open(sys.argv[1]))
print(f"Home drawn after start: {f.get('home_s', float('nan')):.1f} s")
run = f.get("run") or {}
print(f"default run: {run.get('finished', 'did not finish')} ({run.get('run_s', '?')} s from Start; "
      f"held-out masked-token accuracy {run.get('held_out')})")
print(f"saved run reopened: {f.get('saved', 'no')}")
print(f"upload from another site's page: {f.get('upload', 'not tried')}")
for x in f["failed"]:
    print(f"FAIL: {x}")
EOF
RUN_URL=$("$PY" -c "import json,sys; print((json.load(open(sys.argv[1])).get('run') or {}).get('run_url', ''))" "$OUT/checks-first.json")
figure "written under /data: $(cd "$DATA" && find . -maxdepth 4 -name '*.json' | sort | tr '\n' ' ')"
[ -f "$DATA/runs/app/space-check/model.safetensors" ] || fail "no saved run under /data/runs/app"
NOT_USERS=$(find "$DATA" ! -uid 1000 | wc -l)
[ "$NOT_USERS" = 0 ] || fail "$NOT_USERS files under /data are not uid 1000's"
podman logs "$NAME" > "$OUT/container-first.log" 2>&1

say "restart: a new container of the same image on the same /data"
start || { fail "the restarted container never answered"; exit 1; }
figure "healthy after the restart: $HEALTHY s"
if [ -n "$RUN_URL" ]; then
    "$PY" "$ROOT/benchmarks/space_image_checks.py" restart "http://localhost:$PORT" --started "$STARTED" \
        --out "$OUT" --run-url "$RUN_URL" || fail "a check after the restart failed (see $OUT/checks-restart.json)"
    "$PY" -c "
import json, sys
f = json.load(open(sys.argv[1]))
print(f\"Home drawn after the restart: {f.get('home_s', float('nan')):.1f} s\")
print(f\"the run's link after the restart: {f.get('run_after_restart', 'not found')}\")
print(f\"saved run after the restart: {f.get('saved', 'not found')}\")" "$OUT/checks-restart.json" | tee -a "$FIG"
fi
podman logs "$NAME" > "$OUT/container-restart.log" 2>&1
say "figures ($FIG):"
cat "$FIG"
exit $FAILED
