#!/usr/bin/env bash
# A Grid Engine cell on this one machine, for tests: sge_qmaster on n1, sge_execd on n1 and n2.
#
#   gridengine_cluster.sh up     [STATE_DIR]   install what is missing, write the cell, start it, wait for both queues
#   gridengine_cluster.sh down   [STATE_DIR]   stop every daemon and process of this state dir's hosts, remove the dir
#   gridengine_cluster.sh status [STATE_DIR]   the daemons and `qstat -f`; exit 0 only when both queues are up
#   gridengine_cluster.sh exec   STATE_DIR [--on HOST] -- COMMAND...   run a client (qsub, qstat…) on n1 (or HOST)
#
# STATE_DIR defaults to $HPCDIST_GRIDENGINE_STATE, else /tmp/hpcdist-gridengine. Everything the cell writes lives
# there: SGE_ROOT (root/, the cell `hpcdist` in root/hpcdist/common: bootstrap, act_qmaster, accounting), the
# qmaster's Berkeley DB and spool, each execd's spool, and the two hosts.
#
# The hosts: n1 (10.251.0.1) and n2 (10.251.0.2), each a network, UTS and mount namespace of its own kept in
# STATE_DIR/ns (n1.net, n1.uts, n1.mnt…), joined by a veth pair. Inside a host `hostname` is its name and
# STATE_DIR/etc/hosts is bind-mounted over /etc/hosts, so each name resolves forwards and backwards to one address,
# as Grid Engine insists (sge_qmaster and sge_execd compare the name a host gives with the name its address resolves
# to). /etc/hosts itself is never edited, and the hosts can reach each other and nothing else.
# Whatever runs "on" a host enters its three namespaces (`nsenter --net --uts --mount`, what `exec` does) with
# SGE_ROOT and SGE_CELL set; the ports are /etc/services' sge_qmaster (6444) and sge_execd (6445).
#
# The cell: one queue all.q with 2 slots on each host, and the parallel environment `mpi` (allocation_rule
# $round_robin, so a 2-slot job gets one slot on each host; control_slaves TRUE, for Open MPI's `qrsh -inherit`
# start of its daemon on the other host; job_is_first_task FALSE). The daemons and jobs run as root (min_uid 0);
# the scheduler runs every second and the accounting file (qacct) is written as soon as a job ends.
#
# Outside STATE_DIR `up` only ever installs the Debian packages below when a command is missing, with debconf told
# not to configure a cell of its own (shared/gridengineconfig false) and a temporary /usr/sbin/policy-rc.d, removed
# again, so that apt starts no daemon.
#
# Knob: HPCDIST_GRIDENGINE_TIMEOUT (seconds `up` waits for each step, default 60).
set -euo pipefail

PACKAGES=(gridengine-master gridengine-exec gridengine-client)
HOSTS=(n1 n2)
MASTER=n1
SUBNET=10.251.0
CELL=hpcdist
SLOTS=2  # per host
TIMEOUT=${HPCDIST_GRIDENGINE_TIMEOUT:-60}

die() { echo "gridengine_cluster: error: $*" >&2; exit 1; }
say() { echo "gridengine_cluster: $*" >&2; }

usage() {
    sed -n '2,7s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

address() {  # address HOST -> 10.251.0.K, K = position in HOSTS + 1
    local i
    for i in "${!HOSTS[@]}"; do
        [ "${HOSTS[$i]}" = "$1" ] && { echo "$SUBNET.$((i + 1))"; return; }
    done
    die "unknown host $1 (the hosts are ${HOSTS[*]})"
}

# ---------------------------------------------------------------- install

missing_packages() {
    local cmd
    for cmd in /usr/sbin/sge_qmaster /usr/sbin/sge_execd /usr/lib/gridengine/spoolinit qsub qconf qstat qacct; do
        command -v "$cmd" >/dev/null 2>&1 || { echo missing; return; }
    done
}

install_packages() {
    local log=$1
    [ -z "$(missing_packages)" ] && return 0
    [ "$(id -u)" = 0 ] || die "Grid Engine is not installed and installing it needs root: apt-get install ${PACKAGES[*]}"
    command -v apt-get >/dev/null || die "Grid Engine is not installed and there is no apt-get to install ${PACKAGES[*]}"
    # the packages would otherwise make a machine-wide cell in /var/lib/gridengine; this one lives in STATE_DIR
    echo 'gridengine-common shared/gridengineconfig boolean false' | debconf-set-selections ||
        die "debconf-set-selections failed; is debconf installed?"
    local created_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then  # keep apt from starting sge_qmaster, sge_execd and exim
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT  # also when apt-get is interrupted
    fi
    say "installing ${PACKAGES[*]} (apt-get update + install, ~20 s; log: $log)"
    local ok=1
    # -o DPkg::Lock::Timeout: wait up to 2 minutes for another apt or dpkg to finish, instead of failing at once
    { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends \
            "${PACKAGES[@]}"; } >"$log" 2>&1 || ok=""
    if [ -n "$created_policy" ]; then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
    [ -n "$ok" ] || die "apt-get install ${PACKAGES[*]} failed; the end of $log:
$(tail -n 20 "$log")"
    [ -z "$(missing_packages)" ] || die "apt-get installed ${PACKAGES[*]} but a Grid Engine command is still missing"
}

# ---------------------------------------------------------------- hosts

# on STATE_DIR HOST COMMAND...: run COMMAND on HOST (its network, UTS and mount namespaces) with the cell's variables.
on() {
    local s=$1 host=$2
    shift 2
    SGE_ROOT="$s/root" SGE_CELL=$CELL nsenter --net="$s/ns/$host.net" --uts="$s/ns/$host.uts" \
        --mount="$s/ns/$host.mnt" --wd="$PWD" -- "$@"
}

hosts_up() {
    local s=$1 host
    for host in "${HOSTS[@]}"; do
        findmnt -n "$s/ns/$host.mnt" >/dev/null 2>&1 || return 1
    done
}

net_up() {
    local s=$1 host
    hosts_up "$s" && return 0
    mkdir -p "$s/ns" "$s/etc"
    {
        echo "# Written by tests/gridengine/gridengine_cluster.sh: the hosts of the cell in $s"
        echo "127.0.0.1 localhost"
        for host in "${HOSTS[@]}"; do echo "$(address "$host") $host"; done
        for host in "${HOSTS[@]}"; do echo "::ffff:$(address "$host") $host"; done
    } >"$s/etc/hosts"
    # a mount namespace is kept by bind-mounting it onto a file, which must lie on a private mount (unshare(1))
    if ! findmnt -n "$s/ns" >/dev/null 2>&1; then
        if ! mount --bind "$s/ns" "$s/ns" || ! mount --make-private "$s/ns"; then
            die "could not make $s/ns a private mount (mount --bind, --make-private)"
        fi
    fi
    for host in "${HOSTS[@]}"; do
        touch "$s/ns/$host.net" "$s/ns/$host.uts" "$s/ns/$host.mnt"
        # shellcheck disable=SC2016  # $1 and $2 are the inner shell's arguments
        unshare --net="$s/ns/$host.net" --uts="$s/ns/$host.uts" --mount="$s/ns/$host.mnt" --propagation private \
            sh -euc 'hostname "$1" && mount --bind "$2" /etc/hosts && ip link set lo up' sh "$host" "$s/etc/hosts" ||
            die "could not create host $host (unshare --net --uts --mount into $s/ns)"
    done
    ip link add eth0 netns "$s/ns/n1.net" type veth peer name eth0 netns "$s/ns/n2.net" ||
        die "could not link n1 and n2 (ip link add … type veth)"
    for host in "${HOSTS[@]}"; do
        # shellcheck disable=SC2016  # $1 is the inner shell's argument
        nsenter --net="$s/ns/$host.net" sh -euc 'ip addr add "$1/24" dev eth0 && ip link set eth0 up' \
            sh "$(address "$host")" || die "could not give $host its address $(address "$host") on eth0"
    done
}

# The pids of every process inside one of this state dir's hosts (by their network namespace).
pids_inside() {
    local s=$1 host inode pid
    for host in "${HOSTS[@]}"; do
        findmnt -n "$s/ns/$host.net" >/dev/null 2>&1 || continue
        inode=$(stat -L -c %i "$s/ns/$host.net")
        for pid in /proc/[0-9]*; do
            [ "$(readlink "$pid/ns/net" 2>/dev/null)" = "net:[$inode]" ] && echo "${pid#/proc/}"
        done
    done
    return 0
}

net_down() {
    local s=$1 host file pids
    pids=$(pids_inside "$s")
    # shellcheck disable=SC2086  # one pid per word
    if [ -n "$pids" ]; then
        say "killing what still runs on the hosts: $(for pid in $pids; do
            echo "$pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"; done | paste -sd, -)"
        kill -9 $pids 2>/dev/null || true
    fi
    for host in "${HOSTS[@]}"; do
        for file in "$s/ns/$host".{mnt,uts,net}; do
            if findmnt -n "$file" >/dev/null 2>&1; then umount "$file" || die "could not unmount $file"; fi
        done
    done
    if findmnt -n "$s/ns" >/dev/null 2>&1; then umount "$s/ns" || die "could not unmount $s/ns"; fi
}

# ---------------------------------------------------------------- the cell

write_cell() {
    local s=$1 root=$1/root dir
    local common=$root/$CELL/common
    mkdir -p "$common" "$s/spool/qmaster" "$s/spool/db" "$s/spool/execd" "$s/log"
    # SGE_ROOT as Debian lays out /var/lib/gridengine: its bin/ARCH (where Open MPI looks for qrsh), util, utilbin, lib
    for dir in bin util utilbin lib; do ln -sfn "/var/lib/gridengine/$dir" "$root/$dir"; done
    # bootstrap(5); Debian's /usr/share/gridengine/default-bootstrap with this dir's paths and root as admin_user
    cat >"$common/bootstrap" <<EOF
# Written by tests/gridengine/gridengine_cluster.sh
admin_user              root
default_domain          none
ignore_fqdn             true
spooling_method         berkeleydb
spooling_lib            libspoolb
spooling_params         $s/spool/db
binary_path             /usr/sbin
qmaster_spool_dir       $s/spool/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
EOF
    echo "$MASTER" >"$common/act_qmaster"
    # sge_conf(5): Debian's /usr/share/gridengine/default-configuration, changed where a test cell needs it: root may
    # run jobs (min_uid 0), no mail, load reports every 5 s, accounting written at once
    cat >"$s/etc/configuration" <<EOF
conf_version           0
execd_spool_dir        $s/spool/execd
mailer                 /bin/true
xterm                  /usr/bin/xterm
load_sensor            none
prolog                 none
epilog                 none
shell_start_mode       unix_behavior
login_shells           bash,sh,ksh,csh,tcsh
min_uid                0
min_gid                0
user_lists             none
xuser_lists            none
projects               none
xprojects              none
enforce_project        false
enforce_user           auto
load_report_time       00:00:05
max_unheard            00:05:00
reschedule_unknown     00:00:00
loglevel               log_info
administrator_mail     none
set_token_cmd          none
pag_cmd                none
token_extend_time      none
shepherd_cmd           none
qmaster_params         none
execd_params           none
reporting_params       accounting=true reporting=false flush_time=00:00:15 joblog=false sharelog=00:00:00 accounting_flush_time=00:00:00
finished_jobs          100
gid_range              65400-65500
qlogin_command         builtin
qlogin_daemon          builtin
rlogin_command         builtin
rlogin_daemon          builtin
rsh_command            builtin
rsh_daemon             builtin
max_aj_instances       2000
max_aj_tasks           75000
max_u_jobs             0
max_jobs               0
auto_user_oticket      0
auto_user_fshare       0
auto_user_default_project none
auto_user_delete_time  86400
delegated_file_staging false
reprioritize           0
jsv_url                none
jsv_allowed_mod        ac,h,i,e,o,j,M,N,p,w
EOF
    # what Debian's /usr/share/gridengine/scripts/init_cluster does, with this configuration and root as manager
    local resources=/usr/share/gridengine/util/resources
    {
        on "$s" "$MASTER" /usr/lib/gridengine/spoolinit berkeleydb libspoolb "$s/spool/db" init &&
            on "$s" "$MASTER" /usr/lib/gridengine/spooldefaults configuration "$s/etc/configuration" &&
            on "$s" "$MASTER" /usr/lib/gridengine/spooldefaults complexes "$resources/centry" &&
            on "$s" "$MASTER" /usr/lib/gridengine/spooldefaults usersets "$resources/usersets" &&
            on "$s" "$MASTER" /usr/lib/gridengine/spooldefaults managers root
    } >>"$s/log/init.log" 2>&1 || die "could not initialise the cell's spool in $s/spool/db; the end of $s/log/init.log:
$(tail -n 20 "$s/log/init.log")"
    touch "$s/spool/db/.initialised"
}

# sched_conf(5): the scheduler every second, a finished job's slots free at once
write_scheduler() {
    cat >"$1/etc/scheduler" <<'EOF'
algorithm                         default
schedule_interval                 0:0:1
maxujobs                          0
queue_sort_method                 load
job_load_adjustments              NONE
load_adjustment_decay_time        0:0:0
load_formula                      slots
schedd_job_info                   true
flush_submit_sec                  1
flush_finish_sec                  1
params                            none
reprioritize_interval             0:0:0
halftime                          168
usage_weight_list                 cpu=1.000000,mem=0.000000,io=0.000000
compensation_factor               5.000000
weight_user                       0.250000
weight_project                    0.250000
weight_department                 0.250000
weight_job                        0.250000
weight_tickets_functional         0
weight_tickets_share              0
share_override_tickets            TRUE
share_functional_shares           TRUE
max_functional_jobs_to_schedule   200
report_pjob_tickets               TRUE
max_pending_tasks_per_job         50
halflife_decay_list               none
policy_hierarchy                  OFS
weight_ticket                     0.010000
weight_waiting_time               0.000000
weight_deadline                   3600000.000000
weight_urgency                    0.100000
weight_priority                   1.000000
max_reservation                   0
default_duration                  INFINITY
EOF
}

# sge_pe(5): a parallel environment for MPI with Grid Engine's tight integration (control_slaves)
write_pe() {
    cat >"$1/etc/pe.mpi" <<'EOF'
pe_name            mpi
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $round_robin
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
}

# queue_conf(5): all.q, SLOTS slots on each host, no load threshold (a busy machine must not put it in alarm state),
# and each host's jobs' TMPDIR in a directory of its own (the hosts share /tmp, and job ids start at 1 in every cell)
write_queue() {
    local s=$1 host tmpdirs=/tmp
    for host in "${HOSTS[@]}"; do
        mkdir -p "$s/tmp/$host"
        tmpdirs+=",[$host=$s/tmp/$host]"
    done
    cat >"$s/etc/queue.all.q" <<EOF
qname                 all.q
hostlist              ${HOSTS[*]}
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               mpi
rerun                 FALSE
slots                 $SLOTS
tmpdir                $tmpdirs
shell                 /bin/sh
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:10
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
EOF
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

qmaster_pidfile() { echo "$1/spool/qmaster/qmaster.pid"; }
execd_pidfile() { echo "$1/spool/execd/$2/execd.pid"; }

# wait_for WHAT COMMAND...: retry COMMAND for up to $TIMEOUT seconds; on timeout name WHAT.
wait_for() {
    local what=$1 deadline=$((SECONDS + TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "waited ${TIMEOUT} s for $what"
        sleep 0.2
    done
}

start_qmaster() {
    local s=$1
    live_pid "$(qmaster_pidfile "$s")" sge_qmaster >/dev/null && return 0
    # sge_qmaster daemonises once it listens
    on "$s" "$MASTER" /usr/sbin/sge_qmaster </dev/null >>"$s/log/qmaster.start" 2>&1 ||
        die "sge_qmaster did not start on $MASTER: $(tail -n 5 "$s/log/qmaster.start" "$s/spool/qmaster/messages" 2>/dev/null)"
    wait_for "sge_qmaster on $MASTER to answer \`qconf -sh\` (its log: $s/spool/qmaster/messages)" \
        on "$s" "$MASTER" qconf -sh
}

start_execd() {
    local s=$1 host=$2
    live_pid "$(execd_pidfile "$s" "$host")" sge_execd >/dev/null && return 0
    on "$s" "$host" /usr/sbin/sge_execd </dev/null >>"$s/log/execd-$host.start" 2>&1 ||
        die "sge_execd did not start on $host: $(tail -n 5 "$s/log/execd-$host.start" \
            "$s/spool/execd/$host/messages" 2>/dev/null)"
}

# qconf COMMAND on the master, its output logged; dies naming what it was doing.
configure() {
    local s=$1 what=$2
    shift 2
    on "$s" "$MASTER" qconf "$@" >>"$s/log/qconf.log" 2>&1 ||
        die "qconf $* ($what) failed: $(tail -n 3 "$s/log/qconf.log")"
}

# Both queue instances are there and in no state (not unknown, alarm, disabled or in error).
queues_ready() {
    local s=$1 states
    states=$(on "$s" "$MASTER" qstat -f -q all.q 2>/dev/null |
        awk '$1 ~ /^all\.q@/ {print $1, ($6 == "" ? "ok" : $6)}' | sort | tr '\n' ' ')
    [ "$states" = "$(printf 'all.q@%s ok ' "${HOSTS[@]}")" ]
}

cmd_up() {
    local s=$1 t0=$SECONDS host deadline
    mkdir -p "$s/log"
    install_packages "$s/log/apt.log"
    if hosts_up "$s" && queues_ready "$s"; then
        say "already up in $s"
        return 0
    fi
    local t1=$SECONDS
    net_up "$s"
    [ -e "$s/spool/db/.initialised" ] || write_cell "$s"
    start_qmaster "$s"
    write_scheduler "$s"
    write_pe "$s"
    write_queue "$s"
    for host in "${HOSTS[@]}"; do
        on "$s" "$MASTER" qconf -sh 2>/dev/null | grep -qx "$host" || configure "$s" "$host as an admin host" -ah "$host"
        on "$s" "$MASTER" qconf -ss 2>/dev/null | grep -qx "$host" || configure "$s" "$host as a submit host" -as "$host"
    done
    configure "$s" "the scheduler's configuration" -Msconf "$s/etc/scheduler"
    if on "$s" "$MASTER" qconf -sp mpi >/dev/null 2>&1; then
        configure "$s" "the parallel environment mpi" -Mp "$s/etc/pe.mpi"
    else
        configure "$s" "the parallel environment mpi" -Ap "$s/etc/pe.mpi"
    fi
    for host in "${HOSTS[@]}"; do start_execd "$s" "$host"; done
    for host in "${HOSTS[@]}"; do
        wait_for "sge_execd on $host to register with the qmaster (\`qconf -se $host\`; its log: \
$s/spool/execd/$host/messages)" on "$s" "$MASTER" qconf -se "$host"
    done
    if on "$s" "$MASTER" qconf -sq all.q >/dev/null 2>&1; then
        configure "$s" "the queue all.q" -Mq "$s/etc/queue.all.q"
    else
        configure "$s" "the queue all.q" -Aq "$s/etc/queue.all.q"
    fi
    deadline=$((SECONDS + TIMEOUT))
    until queues_ready "$s"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            die "waited ${TIMEOUT} s for all.q to be up on ${HOSTS[*]}; qstat -f says:" \
                "$(on "$s" "$MASTER" qstat -f 2>&1 | tr '\n' ';') logs: $s/spool/qmaster/messages, \
$s/spool/execd/*/messages"
        fi
        sleep 0.2
    done
    say "up in $((SECONDS - t0)) s (the cell itself $((SECONDS - t1)) s): all.q on ${HOSTS[*]} with $SLOTS slots each;" \
        "clients: $0 exec $s -- qsub …"
}

# stop_pids GRACE PIDFILE:NAME...: give these daemons GRACE s to end, then TERM them, 10 s later KILL them.
stop_pids() {
    local grace=$1 entry pid sig deadline alive
    shift
    for sig in "" TERM KILL; do
        if [ -z "$sig" ]; then deadline=$((SECONDS + grace)); else deadline=$((SECONDS + 10)); fi
        while :; do
            alive=()
            for entry in "$@"; do
                if pid=$(live_pid "${entry%:*}" "${entry##*:}"); then alive+=("$pid"); fi
            done
            [ "${#alive[@]}" -gt 0 ] || return 0
            if [ -n "$sig" ]; then kill -s "$sig" "${alive[@]}" 2>/dev/null || true; fi
            [ "$SECONDS" -lt "$deadline" ] || break
            sleep 0.2
        done
    done
    say "warning: still running after SIGKILL: ${alive[*]}"
}

cmd_down() {
    local s=$1 host daemons=()
    if [ ! -d "$s" ]; then
        say "nothing to stop: $s does not exist"
        return 0
    fi
    [ -d "$s/ns" ] || [ -f "$s/root/$CELL/common/bootstrap" ] ||
        die "$s is not a gridengine_cluster state dir (no ns/, no root/$CELL/common/bootstrap); not removing it"
    if hosts_up "$s"; then
        # -ke: every execd ends (its jobs with it); -km: the qmaster ends (it takes ~8 s to join its threads)
        for host in "${HOSTS[@]}"; do daemons+=("$(execd_pidfile "$s" "$host"):sge_execd"); done
        daemons+=("$(qmaster_pidfile "$s"):sge_qmaster")
        if live_pid "$(qmaster_pidfile "$s")" sge_qmaster >/dev/null; then
            on "$s" "$MASTER" timeout 10 qconf -ke all >/dev/null 2>&1 || true
            on "$s" "$MASTER" timeout 10 qconf -km >/dev/null 2>&1 || true
        fi
        stop_pids 15 "${daemons[@]}"
    fi
    net_down "$s"
    rm -rf "$s"
    say "down: $s removed"
}

cmd_status() {
    local s=$1 host pid rc=0
    [ -d "$s" ] || { echo "not up: $s does not exist"; return 1; }
    hosts_up "$s" || { echo "not up: the hosts ${HOSTS[*]} are missing in $s/ns"; return 1; }
    if pid=$(live_pid "$(qmaster_pidfile "$s")" sge_qmaster); then
        echo "sge_qmaster on $MASTER: running, pid $pid"
    else
        echo "sge_qmaster on $MASTER: stopped"; rc=1
    fi
    for host in "${HOSTS[@]}"; do
        if pid=$(live_pid "$(execd_pidfile "$s" "$host")" sge_execd); then
            echo "sge_execd on $host: running, pid $pid"
        else
            echo "sge_execd on $host: stopped"; rc=1
        fi
    done
    on "$s" "$MASTER" qstat -f 2>&1 || rc=1
    queues_ready "$s" || rc=1
    return $rc
}

main() {
    [ $# -ge 1 ] || usage
    local cmd=$1 s host=$MASTER
    shift
    if [ $# -ge 1 ] && [ "$1" != "--" ] && [ "$1" != "--on" ]; then
        s=$1
        shift
    else
        s=${HPCDIST_GRIDENGINE_STATE:-/tmp/hpcdist-gridengine}
    fi
    case $s in /*) ;; *) s="$PWD/$s" ;; esac
    s=${s%/}
    case $cmd in
        up | down | status) [ $# -eq 0 ] || usage ;;
        exec)
            if [ "${1:-}" = "--on" ]; then
                [ $# -ge 2 ] || usage
                host=$2
                address "$host" >/dev/null
                shift 2
            fi
            if [ "${1:-}" != "--" ] || [ $# -lt 2 ]; then usage; fi
            shift
            ;;
        *) usage ;;
    esac
    case $cmd in
        up) cmd_up "$s" ;;
        down) cmd_down "$s" ;;
        status) cmd_status "$s" ;;
        exec) on "$s" "$host" "$@" ;;
    esac
}

main "$@"
