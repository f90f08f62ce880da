#!/usr/bin/env bash
# A four-node Slurm cluster on this one machine, for tests: slurmctld plus slurmd node1 to node4.
#
#   slurm_cluster.sh up     [STATE_DIR]   install what is missing, write the config, start, wait for idle nodes
#   slurm_cluster.sh down   [STATE_DIR]   stop every daemon this state dir started and remove the dir
#   slurm_cluster.sh status [STATE_DIR]   the daemons and `sinfo`; exit 0 only when all nodes are idle
#   slurm_cluster.sh exec   STATE_DIR -- COMMAND...   run a client (sbatch, squeue, …) against this cluster
#
# STATE_DIR defaults to $HPCDIST_SLURM_STATE, else /tmp/hpcdist-slurm. Everything the cluster writes
# lives there: slurm.conf, mpi.conf, gres.conf, a private munged (own key and socket), spool, state,
# logs, pid files, and STATE_DIR/netns, a network namespace of its own. Daemons get
# `-f STATE_DIR/etc/slurm.conf`, clients SLURM_CONF, so /etc/slurm, /etc/munge and /run/munge are unused.
#
# The network: slurmctld and every slurmd run inside STATE_DIR/netns, which has `lo` and one veth
# pair with 10.250.0.1/24 on hpc0, so jobs (Slurm, PRRTE, MPI, gloo) talk only to addresses inside a
# namespace this script made; no port of the host is used, and two state dirs never collide.
# Clients must enter it too: `nsenter --net=STATE_DIR/netns` (what `exec` does) with SLURM_CONF set.
# Each slurmd also has its own UTS and mount namespace (`unshare --uts --mount`): its own hostname
# and STATE_DIR/etc/hosts bind-mounted over /etc/hosts, so node1 to node4 resolve (to 10.250.0.1)
# inside jobs only; /etc/hosts itself is never edited.
#
# Outside STATE_DIR `up` only ever installs the Debian packages below when a command is missing (with a
# temporary /usr/sbin/policy-rc.d, removed again, when none exists) and adds the unversioned
# libpmix.so symlink Slurm dlopens.
#
# Knobs: HPCDIST_SLURM_TIMEOUT (seconds `up` waits for each step, default 60); HPCDIST_SLURM_BIND=1 (CPU
# binding: TaskPlugin=task/affinity, each node declaring this machine's real CPUs instead of 4, for benchmarks
# under `srun --cpu-bind=cores`; the tests run without it, since they place more tasks on a node than it has CPUs).
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge libpmix2)
PORT=6817  # slurmctld's; node1 to node4 listen on the next four, all inside STATE_DIR/netns
ADDR=10.250.0.1
TIMEOUT=${HPCDIST_SLURM_TIMEOUT:-60}
TASK_PLUGIN=task/none
CPUS=4  # per node: more than this machine has, so that tests can place 4 tasks on a node
if [[ ${HPCDIST_SLURM_BIND:-0} == 1 ]]; then
    TASK_PLUGIN=task/affinity
    CPUS=$(nproc)
fi
NODES=(node1 node2 node3 node4)
# per node: a share of this machine's memory, so that the nodes together never promise more than it has
MEMORY=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 / ${#NODES[@]}))

die() { echo "slurm_cluster: error: $*" >&2; exit 1; }
say() { echo "slurm_cluster: $*" >&2; }

usage() {
    sed -n '2,7s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

# ---------------------------------------------------------------- install

missing_packages() {
    local cmd
    for cmd in slurmctld slurmd sbatch scontrol sinfo munged; do
        command -v "$cmd" >/dev/null 2>&1 || { echo missing; return; }
    done
    dpkg-query -W -f='${Status}\n' libpmix2 2>/dev/null | grep -q 'ok installed' || echo missing
}

install_packages() {
    local log=$1
    [ -z "$(missing_packages)" ] && return 0
    [ "$(id -u)" = 0 ] || die "Slurm is not installed and installing it needs root: apt-get install ${PACKAGES[*]}"
    command -v apt-get >/dev/null || die "Slurm is not installed and there is no apt-get to install ${PACKAGES[*]}"
    local created_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then  # keep apt from starting munge/slurm services
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT  # also when apt-get is interrupted
    fi
    say "installing ${PACKAGES[*]} (apt-get update + install, ~20 s; log: $log)"
    local ok=1
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
        >"$log" 2>&1 || ok=""
    if [ -n "$created_policy" ]; then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
    [ -n "$ok" ] || die "apt-get install ${PACKAGES[*]} failed; the end of $log:
$(tail -n 20 "$log")"
}

link_pmix() {
    # Slurm's mpi/pmix plugin dlopens the unversioned libpmix.so, which only the -dev package ships.
    local lib
    lib=$(dpkg -L libpmix2 2>/dev/null | grep -m1 '/pmix2/lib/libpmix\.so\.2$' || true)
    [ -n "$lib" ] || die "libpmix2 is installed but its pmix2/lib/libpmix.so.2 was not found (dpkg -L libpmix2)"
    if [ ! -e "${lib%.2}" ]; then
        [ "$(id -u)" = 0 ] || die "${lib%.2} is missing and creating it needs root: ln -s libpmix.so.2 ${lib%.2}"
        ln -sfn libpmix.so.2 "${lib%.2}"
    fi
}

# ---------------------------------------------------------------- config

write_config() {
    local s=$1 n
    mkdir -p "$s"/{etc,munge,ctld,log,run,dev}
    for n in "${NODES[@]}"; do mkdir -p "$s/spool/$n" "$s/tmp/$n"; done
    chmod 700 "$s/munge"
    # fake GPUs: two device files per node (symlinks to /dev/null), so jobs can request --gpus
    ln -sfn /dev/null "$s/dev/gpu0"
    ln -sfn /dev/null "$s/dev/gpu1"
    {
        grep -v -w "${NODES[@]/#/-e}" /etc/hosts || true
        echo "$ADDR ${NODES[*]}"
        echo "::ffff:$ADDR ${NODES[*]}"
    } >"$s/etc/hosts"
    cat >"$s/etc/slurm.conf" <<EOF
# Written by tests/cluster/slurm_cluster.sh: a private ${#NODES[@]}-node test cluster.
ClusterName=hpcdist-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$s/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/ctld
SlurmdSpoolDir=$s/spool/%n
TmpFS=$s/tmp/%n
SlurmctldPidFile=$s/run/slurmctld.pid
SlurmdPidFile=$s/run/slurmd-%n.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MpiDefault=pmix
MinJobAge=300
KillWait=5
InactiveLimit=0
GresTypes=gpu
EOF
    for n in "${!NODES[@]}"; do
        echo "NodeName=${NODES[$n]} NodeHostname=${NODES[$n]} NodeAddr=$ADDR Port=$((PORT + n + 1))" \
            "CPUs=$CPUS RealMemory=$MEMORY Gres=gpu:2 State=UNKNOWN"
    done >>"$s/etc/slurm.conf"
    echo "PartitionName=debug Nodes=node[1-${#NODES[@]}] Default=YES MaxTime=INFINITE State=UP" >>"$s/etc/slurm.conf"
    cat >"$s/etc/gres.conf" <<EOF
NodeName=node[1-${#NODES[@]}] Name=gpu File=$s/dev/gpu[0-1]
EOF
    cat >"$s/etc/mpi.conf" <<EOF
PMIxEnv=PMIX_MCA_psec=native
EOF
    if [ ! -s "$s/munge/munge.key" ]; then
        head -c 1024 /dev/urandom >"$s/munge/munge.key"
        chmod 400 "$s/munge/munge.key"
    fi
}

# ---------------------------------------------------------------- processes

# The pid in a pid file, only while that process is alive and is the daemon named (no recycled pids).
live_pid() {
    local file=$1 name=$2 pid
    [ -s "$file" ] || return 1
    pid=$(tr -dc 0-9 <"$file")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$name" || return 1
    grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && return 1  # a zombie is gone, PID 1 reaps late
    echo "$pid"
}

# in_net STATE_DIR COMMAND...: run COMMAND inside the cluster's network namespace, as a client.
in_net() {
    local s=$1
    shift
    SLURM_CONF="$s/etc/slurm.conf" nsenter --net="$s/netns" -- "$@"
}

net_up() {
    local s=$1
    findmnt -n "$s/netns" >/dev/null 2>&1 && return 0
    : >"$s/netns"
    unshare --net="$s/netns" true || die "could not create a network namespace at $s/netns (unshare --net)"
    # shellcheck disable=SC2016  # $1 is the inner shell's argument
    nsenter --net="$s/netns" sh -euc '
        ip link set lo up
        ip link add hpc0 type veth peer name hpc1
        ip addr add "$1/24" dev hpc0
        ip link set hpc1 up
        ip link set hpc0 up
        if [ -w /proc/sys/net/ipv6/conf/all/disable_ipv6 ]; then
            echo 1 >/proc/sys/net/ipv6/conf/hpc0/disable_ipv6
            echo 1 >/proc/sys/net/ipv6/conf/hpc1/disable_ipv6
        fi' sh "$ADDR" || die "could not set up lo and hpc0 ($ADDR) in $s/netns"
}

start_munged() {
    local s=$1
    live_pid "$s/munge/munged.pid" munged >/dev/null && return 0
    rm -f "$s/munge/munge.socket" "$s/munge/munge.socket.lock"
    # root-owned private munged; --force accepts running as root and /tmp's permissions
    munged --force --key-file="$s/munge/munge.key" --socket="$s/munge/munge.socket" \
        --pid-file="$s/munge/munged.pid" --log-file="$s/log/munged.log" --seed-file="$s/munge/munged.seed" \
        </dev/null >>"$s/log/munged.start" 2>&1 ||
        die "munged did not start: $(tail -n 5 "$s/log/munged.start" "$s/log/munged.log" 2>/dev/null)"
    wait_for "munged's socket $s/munge/munge.socket" test -S "$s/munge/munge.socket"
}

start_slurmctld() {
    local s=$1
    live_pid "$s/run/slurmctld.pid" slurmctld >/dev/null && return 0
    # -c: start clean, without node drain state or jobs from an earlier run
    nsenter --net="$s/netns" slurmctld -c -f "$s/etc/slurm.conf" </dev/null >>"$s/log/slurmctld.start" 2>&1 ||
        die "slurmctld did not start: $(tail -n 5 "$s/log/slurmctld.start" "$s/log/slurmctld.log" 2>/dev/null)"
}

start_slurmd() {
    local s=$1 node=$2
    live_pid "$s/run/slurmd-$node.pid" slurmd >/dev/null && return 0
    # Own hostname (with `-N` differing from the hostname, srun --mpi=pmix kills local ranks >= 2) and
    # a private /etc/hosts in which the node names resolve; both stay inside this slurmd's namespaces.
    # shellcheck disable=SC2016  # $1 and $2 are the inner shell's arguments
    nsenter --net="$s/netns" unshare --uts --mount --propagation private sh -c \
        'mount --bind "$2/etc/hosts" /etc/hosts && hostname "$1" && exec slurmd -f "$2/etc/slurm.conf" -N "$1"' \
        sh "$node" "$s" </dev/null >>"$s/log/slurmd-$node.start" 2>&1 ||
        die "slurmd $node did not start: $(tail -n 5 "$s/log/slurmd-$node.start" "$s/log/slurmd-$node.log" 2>/dev/null)"
}

# wait_for WHAT COMMAND...: retry COMMAND for up to $TIMEOUT seconds; on timeout name WHAT.
wait_for() {
    local what=$1 deadline=$((SECONDS + TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "waited ${TIMEOUT} s for $what"
        sleep 0.2
    done
}

ctld_up() {
    in_net "$1" scontrol ping | grep -q UP
}

nodes_idle() {
    local s=$1 states
    states=$(in_net "$s" sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$states" = "$(printf '%s idle ' "${NODES[@]}")" ]
}

# ---------------------------------------------------------------- commands

cmd_up() {
    local s=$1 t0=$SECONDS n deadline
    mkdir -p "$s/log"
    install_packages "$s/log/apt.log"
    link_pmix
    if findmnt -n "$s/netns" >/dev/null 2>&1 && nodes_idle "$s"; then
        say "already up in $s"
        return 0
    fi
    write_config "$s"
    net_up "$s"
    start_munged "$s"
    start_slurmctld "$s"
    wait_for "slurmctld to answer \`scontrol ping\` (log: $s/log/slurmctld.log)" ctld_up "$s"
    for n in "${NODES[@]}"; do start_slurmd "$s" "$n"; done
    deadline=$((SECONDS + TIMEOUT))
    until nodes_idle "$s"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            die "waited ${TIMEOUT} s for ${NODES[*]} to be idle; sinfo says:" \
                "$(in_net "$s" sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';') logs: $s/log/"
        fi
        sleep 0.2
    done
    say "up in $((SECONDS - t0)) s: ${NODES[*]} idle; clients: nsenter --net=$s/netns with SLURM_CONF=$s/etc/slurm.conf"
}

# stop_pids GRACE PIDFILE...: give these daemons GRACE s to end, then TERM them, 10 s later KILL them.
stop_pids() {
    local grace=$1 file name pid sig deadline
    shift
    for sig in "" TERM KILL; do
        if [ -z "$sig" ]; then deadline=$((SECONDS + grace)); else deadline=$((SECONDS + 10)); fi
        while :; do
            local alive=()
            for file in "$@"; do
                name=$(basename "$file" .pid)
                if pid=$(live_pid "$file" "${name%%-*}"); then alive+=("$pid"); fi
            done
            [ "${#alive[@]}" -gt 0 ] || return 0
            if [ -n "$sig" ]; then kill -s "$sig" "${alive[@]}" 2>/dev/null || true; fi
            [ "$SECONDS" -lt "$deadline" ] || break
            sleep 0.2
        done
    done
    [ -z "$sig" ] || say "warning: still running after SIGKILL: ${alive[*]}"
}

cmd_down() {
    local s=$1
    if [ ! -d "$s" ]; then
        say "nothing to stop: $s does not exist"
        return 0
    fi
    [ -f "$s/etc/slurm.conf" ] || die "$s is not a slurm_cluster state dir (no etc/slurm.conf); not removing it"
    if live_pid "$s/run/slurmctld.pid" slurmctld >/dev/null; then
        timeout 10 nsenter --net="$s/netns" env SLURM_CONF="$s/etc/slurm.conf" scontrol shutdown >/dev/null 2>&1 ||
            true  # stops slurmctld and every slurmd
    fi
    # whatever still runs after scontrol shutdown: wait, then TERM, then KILL, by pid file only;
    # munged last, since the Slurm daemons authenticate through it while they shut down
    stop_pids 10 "$s"/run/slurmd-*.pid "$s/run/slurmctld.pid"
    stop_pids 0 "$s/munge/munged.pid"
    if findmnt -n "$s/netns" >/dev/null 2>&1; then
        umount "$s/netns" || die "could not unmount $s/netns; is a process still inside it? (lsof $s)"
    fi
    rm -rf "$s"
    say "down: $s removed"
}

cmd_status() {
    local s=$1 file name pid rc=0
    [ -d "$s" ] || { echo "not up: $s does not exist"; return 1; }
    for file in "$s/munge/munged.pid" "$s/run/slurmctld.pid" "$s"/run/slurmd-*.pid; do
        name=$(basename "$file" .pid)
        if pid=$(live_pid "$file" "${name%%-*}"); then echo "$name: running, pid $pid"; else echo "$name: stopped"; rc=1; fi
    done
    in_net "$s" sinfo -N -o '%N %t %c %G' 2>&1 || rc=1
    nodes_idle "$s" || rc=1
    return $rc
}

main() {
    [ $# -ge 1 ] || usage
    local cmd=$1 s
    shift
    if [ $# -ge 1 ] && [ "$1" != "--" ]; then
        s=$1
        shift
    else
        s=${HPCDIST_SLURM_STATE:-/tmp/hpcdist-slurm}
    fi
    case $s in /*) ;; *) s="$PWD/$s" ;; esac
    s=${s%/}
    case $cmd in
        up | down | status) [ $# -eq 0 ] || usage ;;
        exec) [ "${1:-}" = "--" ] && [ $# -ge 2 ] || usage; shift ;;
        *) usage ;;
    esac
    case $cmd in
        up) cmd_up "$s" ;;
        down) cmd_down "$s" ;;
        status) cmd_status "$s" ;;
        exec) in_net "$s" "$@" ;;
    esac
}

main "$@"
