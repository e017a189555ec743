#!/usr/bin/env bash
# Stand-in base images for the three Dockerfiles, built from Debian packages (debootstrap + `docker import`)
# where no image registry can be reached (issue 34, item 3). Each Dockerfile takes its base as `ARG BASE`;
# the testbed tests pass these tags:
#   python  edgestream-base/python:3.11-bookworm            for docker/Dockerfile (python:3.11.11-slim-bookworm):
#           Debian bookworm minbase + python3 (3.11) + its headers, a venv at /usr/local so `python` and `pip`
#           are /usr/local/bin/{python,pip} as in the official image (and pip installs without PEP 668's refusal)
#   cuda    edgestream-base/cuda:torch<V>-bookworm          for docker/Dockerfile.cuda (pytorch/pytorch:*-runtime):
#           the python stand-in + torch <V> from PyPI (PyPI's Linux torch is the CUDA build: CUDA, cuDNN, NCCL wheels)
#   jetson  edgestream-base/jetson:torch<V>-bookworm-arm64  for docker/Dockerfile.jetson (nvcr.io/nvidia/pytorch:*-igpu):
#           the same for arm64 (debootstrap runs arm64 binaries through qemu-user binfmt) + gcc, as NGC's base has.
#           Its metadata says amd64 on Debian's docker.io 20.10 (the engine ignores `docker import --platform`; fixed
#           in Engine 23): build and run it without --platform, its binaries run through binfmt all the same.
# torch <V>: requirements.lock's pin when the lock exists (torch and its dependencies are installed with the lock
# as constraints), else TORCH_VERSION (default 2.15.0). It is installed by this machine's pip into the root
# filesystem (`pip install --target --platform ...`): no emulated pip for arm64.
# The images trust the CAs this machine trusts (/usr/local/share/ca-certificates; /etc/pip.conf points pip at the
# system bundle), so pip in a build reaches PyPI the way the host does.
#
# Cached: an image is skipped when its tag exists with the same recipe hash (label edgestream.recipe: this
# script, the suite, the mirror, the architecture, the torch pins, the host CAs). Installs debootstrap,
# qemu-user from apt when missing or older than QEMU_MIN (bookworm's 7.2 cannot run torch aarch64: from
# bookworm-backports there; root). Needs a Docker daemon that answers.
#   scripts/testbed/bases.sh [python|cuda|jetson|all]...   (default: all); prints `NAME=TAG` per image on stdout
#   BASES_FORCE=1 rebuilds even when the hash matches.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SUITE=${BASES_SUITE:-bookworm}
MIRROR=${BASES_MIRROR:-http://deb.debian.org/debian}
WORK=${BASES_WORK:-/var/tmp/edgestream-bases}
LOCK=$ROOT/requirements.lock
HOST_PY=${BASES_PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || command -v python3)}
if [ -f "$LOCK" ] && grep -q '^torch==' "$LOCK"; then
    TORCH_VERSION=$(sed -n 's/^torch==\([^ ;]*\).*/\1/p' "$LOCK" | head -1)
else
    TORCH_VERSION=${TORCH_VERSION:-2.15.0}
fi
PY_TAG=edgestream-base/python:3.11-bookworm
CUDA_TAG=edgestream-base/cuda:torch${TORCH_VERSION}-bookworm
JETSON_TAG=edgestream-base/jetson:torch${TORCH_VERSION}-bookworm-arm64
PKGS=python3,python3-venv,python3-dev,ca-certificates,passwd
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { echo "bases.sh: $*" >&2; }
need() {  # need CMD PACKAGE...: install PACKAGE from apt when CMD is missing
    local cmd=$1; shift
    command -v "$cmd" >/dev/null && return
    [ "$(id -u)" = 0 ] || { say "installing $* needs root"; exit 1; }
    say "installing $* from apt"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null; }
}
#: the oldest qemu-user that runs torch aarch64: 7.2 (bookworm's) crashes in `import torch` (oneDNN's xbyak_aarch64
#: probing the CPU: `qemu: uncaught target signal 11`); 10.0 (bookworm-backports, trixie) imports it and trains
QEMU_MIN=10
qemu_bin() { command -v qemu-aarch64 || command -v qemu-aarch64-static || true; }
qemu_major() {  # the major version of a qemu-aarch64 binary ($1, default the one on PATH); 0 when none
    local q=${1:-$(qemu_bin)}
    [ -n "$q" ] && [ -x "$q" ] || { echo 0; return; }
    "$q" --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p' | head -1 | grep . || echo 0
}
candidate_major() {  # the major version apt would install of package $1 (0: none)
    apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: \([0-9]*:\)\{0,1\}\([0-9][0-9]*\)\..*/\2/p' | grep . || echo 0
}
new_qemu() {  # qemu-user >= QEMU_MIN from apt: the suite's own, else its backports (bookworm: bookworm-backports)
    local codename target=() list=/etc/apt/sources.list.d/edgestream-backports.list
    [ "$(id -u)" = 0 ] || { say "qemu-user >= $QEMU_MIN is needed (found $(qemu_major)); installing it needs root"; exit 1; }
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    say "qemu-user $(qemu_major | sed "s/^0$/(none)/") cannot run torch aarch64: installing qemu-user >= $QEMU_MIN from apt"
    apt-get update -qq || true
    if [ "$(candidate_major qemu-user)" -lt "$QEMU_MIN" ] && [ -n "$codename" ]; then
        say "adding ${codename}-backports ($MIRROR) in $list"
        echo "deb $MIRROR ${codename}-backports main" > "$list"
        apt-get update -qq
        target=(-t "${codename}-backports")
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${target[@]}" qemu-user qemu-user-binfmt \
        >/dev/null || { say "apt could not install qemu-user ${target[*]}"; exit 1; }
    [ "$(qemu_major)" -ge "$QEMU_MIN" ] || { say "apt gave qemu-user $(qemu_major); torch aarch64 needs >= $QEMU_MIN"; exit 1; }
}
arm64_binfmt() {  # qemu-user (>= QEMU_MIN) binfmt for aarch64, with the F flag (it works inside chroots and containers)
    local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64 conf interp
    [ "$(qemu_major)" -ge "$QEMU_MIN" ] || new_qemu
    [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    # qemu-user >= 9 ships systemd-binfmt's line (flags OPF); no systemd here, so it is written to the kernel
    conf=$(ls /usr/lib/binfmt.d/qemu-aarch64.conf /usr/share/qemu/binfmt.d/qemu-aarch64.conf 2>/dev/null | head -1 || true)
    [ -n "$conf" ] || { say "qemu-user $(qemu_major) has no qemu-aarch64 binfmt line (install qemu-user-binfmt)"; exit 1; }
    interp=$(cut -d: -f7 "$conf")
    # another interpreter's entry (an older qemu's: with F its binary stays open even after an upgrade) goes
    if [ -e "$entry" ] && ! grep -qx "interpreter $interp" "$entry"; then echo -1 > "$entry"; fi
    [ -e "$entry" ] || cat "$conf" > /proc/sys/fs/binfmt_misc/register
    grep -q '^enabled' "$entry" || { say "qemu-aarch64 binfmt is not enabled"; exit 1; }
    grep -q '^flags:.*F' "$entry" || { say "the qemu-aarch64 binfmt lacks the F flag (containers need it): $(grep flags "$entry")"; exit 1; }
    interp=$(readlink -f "$(sed -n 's/^interpreter //p' "$entry")")
    [ "$(qemu_major "$interp")" -ge "$QEMU_MIN" ] \
        || { say "the qemu-aarch64 binfmt runs $interp, qemu $(qemu_major "$interp") < $QEMU_MIN"; exit 1; }
}
torch_pins() {  # the lock's lines for torch and what it pulls in (the rest of the lock does not touch a base)
    [ -f "$LOCK" ] || return 0
    grep -E '^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z-]+|filelock|typing-extensions|setuptools|sympy|mpmath|networkx|jinja2|markupsafe|fsspec)==' "$LOCK" || true
}
body() { sed -n "/^$1() {/,/^}/p" "${BASH_SOURCE[0]}"; }
recipe() {  # recipe NAME ARCH: the hash the image is labelled with (what makes the image, not this whole script)
    {
        body rootfs; body import_image
        echo "$1 $2 $SUITE $MIRROR $PKGS $IMAGE_PATH"
        [ "$1" = python ] || { body platforms; body add_torch; echo "torch=$TORCH_VERSION"; torch_pins; }
        [ "$1" = jetson ] && echo "gcc,libc6-dev"
        cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true
    } | sha256sum | cut -c1-16
}
current() { docker image inspect -f '{{ index .Config.Labels "edgestream.recipe" }}' "$1" 2>/dev/null || true; }

rootfs() {  # rootfs DIR ARCH EXTRA_PKGS: debootstrap + CAs + venv at /usr/local + cleanup (kept as a tarball in WORK)
    local dir=$1 arch=$2 extra=$3 key tarball
    key=$( { echo "$SUITE $MIRROR $arch $PKGS $extra"; sed -n '/^rootfs() {/,/^}/p' "${BASH_SOURCE[0]}";
             cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true; } | sha256sum | cut -c1-16)
    tarball=$WORK/rootfs-$SUITE-$arch-$key.tar
    rm -rf "$dir"; mkdir -p "$dir"
    if [ -f "$tarball" ]; then
        say "root filesystem from $tarball"
        tar -C "$dir" --numeric-owner -xf "$tarball"
        return
    fi
    say "debootstrap $SUITE $arch into $dir"
    debootstrap --variant=minbase --arch="$arch" --include="$PKGS${extra:+,$extra}" "$SUITE" "$dir" "$MIRROR" \
        > "$dir.debootstrap.log" 2>&1 || { tail -20 "$dir.debootstrap.log" >&2; exit 1; }
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
    fi
    chroot "$dir" update-ca-certificates >/dev/null 2>&1
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$dir/etc/pip.conf"
    chroot "$dir" /usr/bin/python3 -m venv /usr/local
    chroot "$dir" /usr/local/bin/python -c 'import sys, ssl; assert sys.prefix == "/usr/local", sys.prefix'
    chroot "$dir" apt-get clean
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/log/* "$dir"/tmp/* "$dir"/root/.cache
    : > "$dir/etc/resolv.conf"; : > "$dir/etc/hostname"
    rm -f "$dir.debootstrap.log" "$WORK"/rootfs-"$SUITE"-"$arch"-*.tar
    tar -C "$dir" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
}
platforms() {  # pip --platform flags for a manylinux glibc <= bookworm's 2.36
    local a=$1 n
    for n in 5 12 $(seq 17 36); do echo "--platform manylinux_2_${n}_$a"; done
    echo "--platform manylinux2014_$a"
}
add_torch() {  # add_torch DIR PYTHON_ARCH: torch from PyPI into the venv's site-packages by this machine's pip
    local dir=$1 parch=$2 c=() wheels=$WORK/wheels/$2 pf
    [ -f "$LOCK" ] && c=(-c "$LOCK")
    pf=$(platforms "$parch")
    mkdir -p "$wheels"
    # the venv's own setuptools (ensurepip's) makes way for the one torch pins (--target does not replace it)
    rm -rf "$dir"/usr/local/lib/python3.11/site-packages/{setuptools,setuptools-*,_distutils_hack,pkg_resources,distutils-precedence.pth}
    say "torch==$TORCH_VERSION ($parch) from PyPI into $dir (wheels kept in $wheels)"
    # shellcheck disable=SC2086
    "$HOST_PY" -m pip download -q --only-binary=:all: $pf --python-version 3.11 --implementation cp --abi cp311 \
        -d "$wheels" "${c[@]}" "torch==$TORCH_VERSION"
    # shellcheck disable=SC2086
    "$HOST_PY" -m pip install -q --no-index --find-links "$wheels" --no-compile --only-binary=:all: $pf \
        --python-version 3.11 --implementation cp --abi cp311 \
        --target "$dir/usr/local/lib/python3.11/site-packages" "${c[@]}" "torch==$TORCH_VERSION"
    rm -rf "$dir/usr/local/lib/python3.11/site-packages/bin"   # console scripts with this machine's shebang
}
import_image() {  # import_image DIR TAG PLATFORM HASH
    local dir=$1 tag=$2 platform=$3 hash=$4 old
    old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
    say "docker import $tag ($platform)"
    tar -C "$dir" --numeric-owner -cf - . | docker import \
        --platform "$platform" \
        --change "ENV PATH=$IMAGE_PATH" --change 'ENV LANG=C.UTF-8' \
        --change "LABEL edgestream.recipe=$hash" --change 'LABEL org.opencontainers.image.description="edgestream stand-in base (scripts/testbed/bases.sh)"' \
        --change 'CMD ["python3"]' - "$tag" >/dev/null
    rm -rf "$dir"
    # the image the tag named before: removed unless something still uses it (an image built on it)
    [ -z "$old" ] || docker rmi "$old" >/dev/null 2>&1 || true
}

build() {  # build NAME
    local name=$1 tag arch platform parch extra hash t0
    case $name in
        python) tag=$PY_TAG; arch=amd64; platform=linux/amd64; parch=""; extra="" ;;
        cuda) tag=$CUDA_TAG; arch=amd64; platform=linux/amd64; parch=x86_64; extra="" ;;
        jetson) tag=$JETSON_TAG; arch=arm64; platform=linux/arm64; parch=aarch64; extra="gcc,libc6-dev" ;;
        *) say "unknown base $name (python, cuda, jetson, all)"; exit 2 ;;
    esac
    hash=$(recipe "$name" "$arch")
    if [ "${BASES_FORCE:-0}" != 1 ] && [ "$(current "$tag")" = "$hash" ]; then
        say "$tag is up to date ($hash)"
    else
        t0=$(date +%s)
        need debootstrap debootstrap
        [ "$arch" = arm64 ] && arm64_binfmt
        mkdir -p "$WORK"
        rootfs "$WORK/$name" "$arch" "$extra"
        [ -n "$parch" ] && add_torch "$WORK/$name" "$parch"
        import_image "$WORK/$name" "$tag" "$platform" "$hash"
        say "$tag built in $(( $(date +%s) - t0 )) s, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.2f GB", $1/1e9}')"
    fi
    echo "$name=$tag"
}

docker info >/dev/null 2>&1 || { say "no Docker daemon answers (scripts/testbed/engine.sh starts one)"; exit 1; }
# one build at a time (two test runs may ask for the same base at once)
mkdir -p "$WORK"; exec 9>"$WORK/.lock"; flock 9
if [ "${1:-}" = --recipe ]; then recipe "$2" "$3"; exit; fi  # --recipe NAME ARCH: print the hash only
names=("$@"); [ ${#names[@]} -eq 0 ] && names=(all)
for n in "${names[@]}"; do
    if [ "$n" = all ]; then for m in python cuda jetson; do build "$m"; done; else build "$n"; fi
done
