#!/usr/bin/env bash
# A cluster of N hosts on one machine, for running longseq under OpenMPI across real (emulated)
# host boundaries (issue 14, docs/cluster.md).
#
#   scripts/cluster.sh up N [--rate 1gbit] [--delay 100us] [--slots S]
#   scripts/cluster.sh run -- mpirun -np 4 build/cli/longseq attention ...
#   scripts/cluster.sh down
#   scripts/cluster.sh status
#
# Each host is a network namespace with its own UTS namespace (hostname <name>h<i>), loopback up
# and one veth `eth0` with address 10.213.<k>.<i>/24, whose other end sits in a bridge inside a
# "switch" namespace that this script also makes: nothing is added to or changed in the root
# namespace's network, and traffic stays inside the namespaces made here. `tc` shapes every
# host's eth0 egress (so each direction of every inter-host link): tbf for --rate, netem for
# --delay (netem must exist in the kernel; without it --delay is refused with a clear message).
# Traffic between ranks of one host goes over that host's loopback and is not shaped.
#
# `run` executes the command inside host 1 with OpenMPI configured to use the cluster: a
# hostfile of every host with S slots, an rsh agent that enters a host's namespaces (nsenter)
# instead of ssh, TCP only between processes (btl tcp,self; pml ob1: no shared memory, also not
# between ranks of one host) on the cluster subnet. mpirun fills host 1 first, then host 2, ...
#
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2, util-linux (nsenter, unshare).
# LONGSEQ_CLUSTER=<name> (default lsq) names the cluster, so several can coexist; its state is
# under /run/longseq-cluster-<name>. `up` removes what it made if any step fails; `down` removes
# everything (and ends processes still running inside the hosts).
set -euo pipefail

NAME=${LONGSEQ_CLUSTER:-lsq}
[[ $NAME =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "[cluster] LONGSEQ_CLUSTER='$NAME': 1-8 lowercase letters/digits" >&2; exit 2; }
STATE=/run/longseq-cluster-$NAME
SWITCH=${NAME}sw
# A subnet per cluster name (so two clusters never share addresses), private and unrouted.
SUBNET_K=$(( $(printf '%s' "$NAME" | cksum | cut -d' ' -f1) % 200 + 20 ))
SUBNET=10.213.$SUBNET_K

die() {
  echo "[cluster] $*" >&2
  exit 1
}

host_name() { echo "${NAME}h$1"; }

usage() {
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

# Can this machine make namespaces? Prints the reason when not.
check_capable() {
  command -v ip >/dev/null || { echo "iproute2 (ip) is not installed"; return 1; }
  command -v nsenter >/dev/null && command -v unshare >/dev/null || { echo "util-linux nsenter/unshare missing"; return 1; }
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)"; return 1; }
  local probe=${NAME}probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "ip netns add refused (no CAP_NET_ADMIN/CAP_SYS_ADMIN here?)"
    return 1
  fi
  if ! ip -n "$probe" link add veth0 type veth peer name veth1 2>/dev/null; then
    ip netns del "$probe"
    echo "veth pairs refused inside a network namespace"
    return 1
  fi
  ip netns del "$probe"
  return 0
}

cmd_down() {
  local n=0
  if [ -f "$STATE/hosts" ]; then n=$(cat "$STATE/hosts"); fi
  # Processes still inside the hosts (a run that was interrupted) are ours: end them by id.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NAME}(h[0-9]+|sw)$" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
  done
  sleep 0.2
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NAME}(h[0-9]+|sw)$" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true  # deleting a namespace deletes its veth ends and bridge
  done
  if [ -d "$STATE/uts" ]; then
    for f in "$STATE"/uts/*; do
      [ -e "$f" ] || continue
      umount "$f" 2>/dev/null || true
    done
  fi
  if mountpoint -q "$STATE/uts" 2>/dev/null; then umount "$STATE/uts" || true; fi
  rm -rf "$STATE"
  [ "$n" = 0 ] || echo "[cluster] $NAME: removed $n host(s) and the switch"
}

cmd_up() {
  local n=${1:-}
  shift || true
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 32 ] || die "up N: N must be 1..32, got '$n'"
  local rate="" delay="" slots=2
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=${2:?--rate needs a value, e.g. 1gbit}; shift 2 ;;
      --delay) delay=${2:?--delay needs a value, e.g. 100us}; shift 2 ;;
      --slots) slots=${2:?--slots needs a value}; shift 2 ;;
      *) die "up: unknown flag '$1' (--rate R, --delay D, --slots S)" ;;
    esac
  done
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots '$slots' must be a positive integer"
  [ -z "$rate" ] || [[ $rate =~ ^[0-9.]+([kmgt]?bit|[kmgt]?bps)$ ]] || die "--rate '$rate': expected e.g. 1gbit, 500mbit"
  [ -z "$delay" ] || [[ $delay =~ ^[0-9.]+(us|ms|s)$ ]] || die "--delay '$delay': expected e.g. 100us, 1ms"
  local why
  why=$(check_capable) || die "cannot make namespaces on this machine: $why"
  [ ! -e "$STATE" ] || die "cluster '$NAME' is already up ($STATE exists): run 'down' first"

  # Any failure from here on (a failing command under set -e, or die) removes what was made.
  trap 'echo "[cluster] up failed: removing what was made" >&2; cmd_down >/dev/null 2>&1' EXIT
  mkdir -p "$STATE/uts"
  # Persistent UTS namespaces are bind mounts of /proc/<pid>/ns/uts onto files: their directory
  # must be a private mount, as ip netns does for /run/netns.
  mount --bind "$STATE/uts" "$STATE/uts"
  mount --make-private "$STATE/uts"
  echo "$n" >"$STATE/hosts"

  ip netns add "$SWITCH"
  ip -n "$SWITCH" link set lo up
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  : >"$STATE/hostfile"
  for ((i = 1; i <= n; ++i)); do
    local h
    h=$(host_name "$i")
    ip netns add "$h"
    ip -n "$h" link set lo up
    # The veth is made inside the host and its peer moved straight into the switch namespace.
    ip -n "$h" link add eth0 type veth peer name "p$i" netns "$SWITCH"
    ip -n "$SWITCH" link set "p$i" master br0
    ip -n "$SWITCH" link set "p$i" up
    ip -n "$h" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    touch "$STATE/uts/$h"
    unshare --uts="$STATE/uts/$h" hostname "$h"
    if [ -n "$delay" ]; then
      if ! tc -n "$h" qdisc add dev eth0 root handle 1: netem delay "$delay" ${rate:+rate "$rate"} 2>"$STATE/tc.err"; then
        die "--delay $delay needs the kernel's netem qdisc (sch_netem), which this kernel does not offer ($(cat "$STATE/tc.err")); run without --delay, or load sch_netem"
      fi
    elif [ -n "$rate" ]; then
      # burst: at least rate/HZ bytes; 512 KiB covers 10 Gbit/s at HZ 250. latency bounds the queue.
      tc -n "$h" qdisc add dev eth0 root handle 1: tbf rate "$rate" burst 512kb latency 50ms
    fi
    echo "$h slots=$slots" >>"$STATE/hostfile"
    echo "$SUBNET.$i $h" >>"$STATE/hosts.txt"
  done

  # The rsh agent OpenMPI calls as `agent HOST COMMAND...` (like ssh): enter HOST's namespaces and
  # run COMMAND through a shell there.
  cat >"$STATE/agent" <<EOF
#!/usr/bin/env bash
host=\$1
shift
[ -e /run/netns/\$host ] && [ -e "$STATE/uts/\$host" ] || { echo "[cluster agent] no host '\$host' in cluster $NAME" >&2; exit 255; }
exec nsenter --net=/run/netns/\$host --uts="$STATE/uts/\$host" -- /bin/sh -c "\$*"
EOF
  chmod +x "$STATE/agent"
  cat >"$STATE/env" <<EOF
export OMPI_MCA_plm_rsh_agent=$STATE/agent
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_orte_default_hostfile=$STATE/hostfile
export OMPI_MCA_btl=tcp,self
export OMPI_MCA_pml=ob1
export OMPI_MCA_btl_tcp_if_include=$SUBNET.0/24
export OMPI_MCA_oob_tcp_if_include=$SUBNET.0/24
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LONGSEQ_CLUSTER_HOSTS=$n
EOF
  echo "rate=${rate:-unshaped} delay=${delay:-none} slots=$slots" >"$STATE/shape"
  trap - EXIT
  echo "[cluster] $NAME: $n host(s) $(host_name 1)..$(host_name "$n") on $SUBNET.0/24, $slots slot(s) each, link ${rate:-unshaped}${delay:+, delay $delay}"
}

cmd_run() {
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || die "run -- COMMAND..."
  [ -f "$STATE/env" ] || die "cluster '$NAME' is not up (scripts/cluster.sh up N)"
  local h
  h=$(host_name 1)
  # shellcheck disable=SC1091
  . "$STATE/env"
  exec nsenter --net="/run/netns/$h" --uts="$STATE/uts/$h" -- "$@"
}

cmd_status() {
  [ -f "$STATE/hosts" ] || { echo "[cluster] $NAME: down"; return 0; }
  echo "[cluster] $NAME: $(cat "$STATE/hosts") host(s), $(cat "$STATE/shape")"
  cat "$STATE/hosts.txt"
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  run) shift; cmd_run "$@" ;;
  status) cmd_status ;;
  check) why=$(check_capable) && echo "ok" || { echo "$why"; exit 1; } ;;
  *) usage ;;
esac
