#!/usr/bin/env bash
# A real single-node Slurm on this machine, for Canopy's attribution tests.
#
#   scripts/local-slurm.sh start    install if needed, configure, start, wait for idle
#   scripts/local-slurm.sh stop     cancel jobs, stop the daemons this script started
#   scripts/local-slurm.sh status   print the node state (exit 1 when not up)
#
# Must run as root (Debian or Ubuntu; systemd is not needed, daemons are
# started by hand). Idempotent: `start` on a running, unchanged cluster only
# checks that the node is idle. Settings (environment):
#   CANOPY_SLURM_DIR    state, spool, logs, pid files   (default /var/tmp/canopy-slurm)
#   CANOPY_SLURM_USER   unprivileged user that submits test jobs (default canopytest)
#   CANOPY_SLURM_MODE   cgroup | linuxproc              (default cgroup)
#   CANOPY_SLURM_FORCE  1: overwrite a slurm.conf this script did not write
#
# Facts this relies on (Debian 12, Slurm 22.05): the packages start no daemon
# without systemd; the Debian build names the cgroup root `slurm_<NodeName>`;
# on a cgroup v1 or hybrid host `CgroupPlugin=autodetect` picks cgroup/v1,
# on a pure v2 host without systemd Slurm needs `IgnoreSystemd=yes`.
# The node is always `localhost` (slurmd -N localhost), partition `debug`.
set -euo pipefail

DIR=${CANOPY_SLURM_DIR:-/var/tmp/canopy-slurm}
TEST_USER=${CANOPY_SLURM_USER:-canopytest}
MODE=${CANOPY_SLURM_MODE:-cgroup}
CONF_DIR=/etc/slurm
MARK="# managed-by: canopy scripts/local-slurm.sh"
PACKAGES=(munge slurmctld slurmd slurm-client)

say() { echo "local-slurm: $*" >&2; }
die() {
  say "ERROR: $*"
  for f in "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log"; do
    [ -f "$f" ] && { say "--- tail $f"; tail -n 15 "$f" >&2; }
  done
  exit 1
}

[ "$(id -u)" = 0 ] || { say "must run as root"; exit 1; }

# Is process $1 still running? A zombie waiting for init to reap it counts
# as gone; a daemon whose main thread exited first (shown as Z) but whose
# other threads still run does not.
live() { # pid
  local t
  for t in /proc/"$1"/task/*/stat; do
    [ -r "$t" ] && [ "$(awk '{print $3}' "$t" 2>/dev/null)" != Z ] && return 0
  done
  return 1
}

# Running processes named $1 (zombies left out).
running() { # comm
  local p
  for p in $(pgrep -x "$1" 2>/dev/null || true); do
    live "$p" && echo "$p"
  done
  return 0
}

# A running process with this pid file and this command name?
alive() { # pidfile comm
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && live "$pid" || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

install_packages() {
  local missing=0
  for b in munged slurmctld slurmd sbatch scontrol; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing=1
  done
  [ "$missing" = 0 ] && return 0
  say "installing ${PACKAGES[*]}"
  mkdir -p "$DIR/log"
  # Keep package scripts from starting daemons (we start them ourselves).
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"$DIR/log/apt.log" 2>&1; then
    apt-get update -q >>"$DIR/log/apt.log" 2>&1 || true
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >>"$DIR/log/apt.log" 2>&1 ||
      { [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d; tail -n 20 "$DIR/log/apt.log" >&2; die "apt-get install failed"; }
  fi
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

ensure_user() {
  if ! id -u "$TEST_USER" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$TEST_USER"
    say "created user $TEST_USER"
  fi
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --force --keyfile=/etc/munge/munge.key
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return 0
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 9>&- ||
    die "munged did not start (see /var/log/munge/munged.log)"
  touch "$DIR/run/munged.ours"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munge does not answer"
}

# Writes $1 only when its content differs; returns 0 when it changed.
put_conf() { # path content
  local path=$1 content=$2
  if [ -f "$path" ] && [ "$(cat "$path")" = "$content" ]; then
    return 1
  fi
  if [ -f "$path" ] && ! head -n 1 "$path" | grep -q '^# managed-by:' && [ "${CANOPY_SLURM_FORCE:-0}" != 1 ]; then
    die "$path was not written by a test script; set CANOPY_SLURM_FORCE=1 to overwrite it"
  fi
  printf '%s\n' "$content" >"$path"
  return 0
}

write_configs() {
  local hw cgroup_fs plugins
  hw=$(slurmd -C 2>/dev/null | head -n 1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *UpTime=.*//')
  [ -n "$hw" ] || hw="CPUs=$(nproc) RealMemory=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)"
  case $MODE in
    cgroup)
      plugins="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup" ;;
    linuxproc)
      plugins="ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/linux" ;;
    *) die "CANOPY_SLURM_MODE must be cgroup or linuxproc, not $MODE" ;;
  esac
  cgroup_fs=$(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo none)
  local cgconf="$MARK
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainDevices=no"
  if [ "$cgroup_fs" = cgroup2fs ]; then
    cgconf="$cgconf
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
CgroupAutomount=yes"
  else
    cgconf="$cgconf
CgroupPlugin=autodetect"
  fi
  local conf="$MARK (mode=$MODE)
ClusterName=canopy
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
MailProg=/bin/true
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$plugins
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=localhost NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP"
  mkdir -p "$CONF_DIR"
  local changed=1
  put_conf "$CONF_DIR/slurm.conf" "$conf" && changed=0
  put_conf "$CONF_DIR/cgroup.conf" "$cgconf" && changed=0
  return $changed
}

node_state() {
  timeout 10 sinfo -h -n localhost -o %t 2>/dev/null | head -n 1 || true
}

wait_idle() {
  local st=""
  for _ in $(seq 150); do
    st=$(node_state)
    case $st in
      idle | mix | alloc | comp*) return 0 ;;
      down* | drain* | drng*) timeout 10 scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.2
  done
  die "node localhost is not idle after 30 s (state: ${st:-none})"
}

stop_daemons() {
  if alive "$DIR/run/slurmctld.pid" slurmctld; then
    timeout 10 scancel --full --quiet --user="$TEST_USER" >/dev/null 2>&1 || true
  fi
  local pids=()
  for d in slurmctld slurmd; do
    if alive "$DIR/run/$d.pid" "$d"; then
      pids+=("$(cat "$DIR/run/$d.pid")")
    fi
  done
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local left=0
    for p in "${pids[@]}"; do
      live "$p" && left=1
    done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  # Job processes of this cluster: slurmstepd of node localhost.
  # (start refuses to run beside a slurmd it did not start, so every
  # slurmstepd here belongs to this cluster.)
  for p in $(running slurmstepd); do
    kill -KILL "$p" 2>/dev/null || true
  done
  # Empty Slurm cgroups left behind (rmdir only removes empty ones).
  find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d -name 'slurm_localhost' 2>/dev/null |
    while read -r root; do
      find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
  rm -f "$DIR/run/slurmctld.pid" "$DIR/run/slurmd.pid"
}

start() {
  local t0=$SECONDS
  mkdir -p "$DIR"/{state,spool,log,run}
  exec 9>"$DIR/run/lock"
  flock -w 120 9 || die "another local-slurm.sh holds $DIR/run/lock"
  install_packages
  ensure_user
  start_munge
  local changed=0
  write_configs && changed=1
  if [ "$changed" = 1 ] && { alive "$DIR/run/slurmctld.pid" slurmctld || alive "$DIR/run/slurmd.pid" slurmd; }; then
    say "configuration changed: restarting"
    stop_daemons
  fi
  for d in slurmctld slurmd; do
    if ! alive "$DIR/run/$d.pid" "$d" && [ -n "$(running "$d")" ]; then
      die "a $d this script did not start is running (pid $(running "$d" | tr '\n' ' ')); stop it first"
    fi
  done
  if ! alive "$DIR/run/slurmctld.pid" slurmctld; then
    # -c: cold start; job ids restart at 1.
    setsid /usr/sbin/slurmctld -c </dev/null >/dev/null 2>&1 9>&- || die "slurmctld did not start"
  fi
  if ! alive "$DIR/run/slurmd.pid" slurmd; then
    setsid /usr/sbin/slurmd -N localhost </dev/null >/dev/null 2>&1 9>&- || die "slurmd did not start"
  fi
  wait_idle
  if [ "$changed" = 1 ]; then
    # One real job step as the test user proves munge, cgroups and spawning.
    timeout 60 runuser -u "$TEST_USER" -- srun --quiet -N1 -n1 -t 1 --chdir=/tmp /bin/true </dev/null ||
      die "smoke test (srun /bin/true as $TEST_USER) failed in mode $MODE"
  fi
  say "up in $((SECONDS - t0)) s: node localhost $(node_state), mode $MODE, user $TEST_USER"
}

stop() {
  mkdir -p "$DIR/run"
  exec 9>"$DIR/run/lock"
  flock -w 120 9 || die "another local-slurm.sh holds $DIR/run/lock"
  stop_daemons
  if [ -f "$DIR/run/munged.ours" ]; then
    pkill_pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
    [ -n "$pkill_pid" ] && kill -TERM "$pkill_pid" 2>/dev/null || true
    rm -f "$DIR/run/munged.ours"
  fi
  say "stopped"
}

status() {
  local st
  alive "$DIR/run/slurmctld.pid" slurmctld || { echo "slurmctld: not running"; return 1; }
  alive "$DIR/run/slurmd.pid" slurmd || { echo "slurmd: not running"; return 1; }
  st=$(node_state)
  echo "node localhost: ${st:-unknown}"
  [ -n "$st" ]
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
