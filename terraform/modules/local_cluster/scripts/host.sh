#!/usr/bin/env bash
# Hosts of the local cloud: a Linux bridge per cluster, and per node a network namespace, a veth
# pair, a folder with the node's own /opt and /tmp, and an sshd inside the namespace.
#
# Usage: host.sh SUBCOMMAND, with its inputs in RLINFRA_* environment variables:
#
#   preflight        check root and the commands needed (no inputs)
#   bridge-create    RLINFRA_CLUSTER RLINFRA_BRIDGE RLINFRA_BRIDGE_MAC RLINFRA_GATEWAY_CIDR
#                    RLINFRA_SUBNET_CIDR
#   bridge-destroy   RLINFRA_BRIDGE
#   node-create      RLINFRA_CLUSTER RLINFRA_NODE_NAME RLINFRA_NETNS RLINFRA_VETH RLINFRA_BRIDGE
#                    RLINFRA_NODE_IP RLINFRA_NODE_MAC RLINFRA_PREFIX_LEN RLINFRA_GATEWAY
#                    RLINFRA_NODE_DIR RLINFRA_AUTHORIZED_KEY [RLINFRA_SSHD_WAIT_S, default 20]
#                    [RLINFRA_NODE_DISK_SIZE: tmpfs size of /opt and /tmp, default 4g; empty:
#                    plain folders on disk]
#   node-destroy     RLINFRA_NETNS RLINFRA_VETH RLINFRA_NODE_DIR [RLINFRA_KILL_WAIT_S, default 10]
#   bridge-check     RLINFRA_BRIDGE
#   node-check       RLINFRA_NETNS RLINFRA_VETH RLINFRA_BRIDGE RLINFRA_NODE_DIR
#                    [RLINFRA_NODE_DISK_SIZE, as for node-create]
#
# The checks read only. They exit 0 when what create made is all there, and 3 with one line on
# stdout saying what is missing when it is not (after the machine restarted, or a node's sshd was
# killed): Terraform's state cannot see that, so the driver asks for a replacement.
#
# Every create converges when run again on what exists; every destroy succeeds on what is gone.
# Traffic stays on the bridge: no NAT and no forwarding are set up. The bridge and each eth0 get
# fixed MAC addresses, so a host made again keeps its address and its neighbours' ARP caches stay
# right (a bridge otherwise takes the lowest MAC of its ports, which changes as nodes come and go).
#
# Inside a node's mount namespace the node folder is bound (recursively: opt/ and tmp/ are tmpfs
# mounts) at /run/rlinfra/<netns> before its opt/ and tmp/ are bound over /opt and /tmp, so sshd
# finds its files even when the node folder itself lies under /tmp or /opt on the host.
# sshd_config therefore names /run/rlinfra/<netns> paths.
set -euo pipefail
umask 022

readonly INSTALL_HINT="Debian: apt-get install openssh-server iproute2"
readonly NODE_MARKER="rlinfra-node.json"
readonly VIEW_ROOT="/run/rlinfra"

die() {
  echo "rlinfra local cloud: $*" >&2
  exit 1
}

warn() {
  echo "rlinfra local cloud: warning: $*" >&2
}

need() {
  local name
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || die "${FUNCNAME[1]}: environment variable $name is not set"
  done
}

find_sshd() {
  local sshd
  sshd="$(command -v sshd || true)"
  if [[ -z "$sshd" && -x /usr/sbin/sshd ]]; then
    sshd=/usr/sbin/sshd
  fi
  echo "$sshd"
}

preflight() {
  [[ "$(id -u)" == 0 ]] || die "the local cloud needs root (uid 0); run as root or with sudo"
  local cmd
  for cmd in ip unshare setsid mount ssh-keygen timeout; do
    command -v "$cmd" >/dev/null 2>&1 || die "command '$cmd' not found; install it ($INSTALL_HINT)"
  done
  [[ -n "$(find_sshd)" ]] || die "command 'sshd' not found; install it ($INSTALL_HINT)"
  ip netns list >/dev/null 2>&1 || die "'ip netns' does not work here; install a full iproute2 ($INSTALL_HINT)"
}

link_exists() {
  ip link show dev "$1" >/dev/null 2>&1
}

# Delete a link if it exists; one that vanishes meanwhile (a veth whose peer went) is fine too.
delete_link() {
  if link_exists "$1"; then
    ip link delete dev "$1" 2>/dev/null || ! link_exists "$1" || die "could not delete link '$1'"
  fi
}

netns_exists() {
  [[ -e "/run/netns/$1" ]]
}

# Alive and not a zombie.
pid_alive() {
  local state
  [[ -r "/proc/$1/status" ]] || return 1
  state="$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z ]]
}

# The sshd recorded in a node folder ($1), if it still runs that node's config ($2 = view path).
node_sshd_pid() {
  local dir="$1" view="$2" pid
  [[ -r "$dir/sshd.pid" ]] || return 1
  pid="$(tr -dc '0-9' <"$dir/sshd.pid")"
  [[ -n "$pid" ]] && pid_alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- " $view " || return 1
  echo "$pid"
}

# The recorded sshd of a node folder ($1), running its config ($2 = view path) in its network
# namespace ($3): a node whose sshd serves it.
node_sshd_serving() {
  local pid
  pid="$(node_sshd_pid "$1" "$2")" && [[ "$(ip netns identify "$pid" 2>/dev/null)" == "$3" ]] &&
    echo "$pid"
}

# Run a command in the node's namespaces with the node folder bound at its view path.
in_node() {
  local ns="$1" dir="$2" view="$3"
  shift 3
  ip netns exec "$ns" unshare --mount --propagation private \
    sh -c 'mount --rbind "$1" "$2" && shift 2 && exec "$@"' sh "$dir" "$view" "$@"
}

# Mount points at or below a folder, deepest first.
mounts_under() {
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r
}

# TERM, wait up to $2 seconds, then KILL and wait again.
kill_pids() {
  local wait_s="$1" pid left deadline
  shift
  [[ $# -gt 0 ]] || return 0
  kill -TERM "$@" 2>/dev/null || true
  deadline=$((SECONDS + wait_s))
  while :; do
    left=()
    for pid in "$@"; do
      if pid_alive "$pid"; then left+=("$pid"); fi
    done
    [[ ${#left[@]} -gt 0 ]] || return 0
    if ((SECONDS >= deadline)); then break; fi
    sleep 0.1
  done
  kill -KILL "${left[@]}" 2>/dev/null || true
  deadline=$((SECONDS + 5))
  for pid in "${left[@]}"; do
    while pid_alive "$pid"; do
      ((SECONDS < deadline)) || die "process $pid survived SIGKILL"
      sleep 0.1
    done
  done
}

bridge_create() {
  need RLINFRA_CLUSTER RLINFRA_BRIDGE RLINFRA_BRIDGE_MAC RLINFRA_GATEWAY_CIDR RLINFRA_SUBNET_CIDR
  preflight
  local br="$RLINFRA_BRIDGE" routed_dev
  ((${#br} <= 15)) || die "bridge name '$br' is longer than 15 characters"

  routed_dev="$(ip -o -4 route show exact "$RLINFRA_SUBNET_CIDR" table main | awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}' | head -n 1)"
  if [[ -n "$routed_dev" && "$routed_dev" != "$br" ]]; then
    die "subnet $RLINFRA_SUBNET_CIDR is already routed through '$routed_dev'; pick another subnet_cidr"
  fi

  if ! link_exists "$br"; then
    ip link add name "$br" type bridge forward_delay 0
  fi
  ip link set dev "$br" address "$RLINFRA_BRIDGE_MAC"
  ip link set dev "$br" alias "rlinfra:$RLINFRA_CLUSTER"
  ip addr replace "$RLINFRA_GATEWAY_CIDR" dev "$br"
  ip link set dev "$br" up
}

bridge_destroy() {
  need RLINFRA_BRIDGE
  delete_link "$RLINFRA_BRIDGE"
}

write_if_changed() {
  local path="$1" mode="$2" content="$3"
  if [[ -f "$path" ]] && [[ "$(cat "$path")" == "$content" ]]; then
    chmod "$mode" "$path"
    return 1
  fi
  printf '%s\n' "$content" >"$path.new"
  chmod "$mode" "$path.new"
  mv -f "$path.new" "$path"
}

node_create() {
  need RLINFRA_CLUSTER RLINFRA_NODE_NAME RLINFRA_NETNS RLINFRA_VETH RLINFRA_BRIDGE RLINFRA_NODE_IP \
    RLINFRA_NODE_MAC RLINFRA_PREFIX_LEN RLINFRA_GATEWAY RLINFRA_NODE_DIR RLINFRA_AUTHORIZED_KEY
  preflight
  local name="$RLINFRA_NODE_NAME" ns="$RLINFRA_NETNS" veth="$RLINFRA_VETH" dir="$RLINFRA_NODE_DIR"
  local ip_addr="$RLINFRA_NODE_IP" sshd pid config config_changed=0 wait_s="${RLINFRA_SSHD_WAIT_S:-20}" home
  local disk_size="${RLINFRA_NODE_DISK_SIZE-4g}"
  local view="$VIEW_ROOT/$ns"
  sshd="$(find_sshd)"
  [[ "$dir" == /?* ]] || die "node $name: node folder '$dir' is not an absolute path"
  ((${#veth} <= 15)) || die "node $name: link name '$veth' is longer than 15 characters"
  link_exists "$RLINFRA_BRIDGE" || die "node $name: bridge '$RLINFRA_BRIDGE' does not exist"

  # The node folder: its /opt, /tmp and sshd files. /opt and /tmp are each a tmpfs, mounted in
  # the machine's mount namespace (so the node folder shows them, and destroy unmounts them), as
  # a host's own disk: what a node writes there (a venv of links into the uv cache, Ray's
  # session files) never goes through the machine's filesystem, whose freed blocks (with online
  # discard) can slow every later create there for seconds, and goes at once with the node.
  mkdir -p "$dir/opt" "$dir/tmp"
  [[ -z "$disk_size" || "$disk_size" =~ ^[1-9][0-9]*[kmg]$ ]] || die "node $name: disk size '$disk_size' is not like 4g"
  local place mode
  for place in opt tmp; do
    [[ -n "$disk_size" ]] && ! mountpoint -q "$dir/$place" || continue
    mode=0755
    [[ "$place" == opt ]] || mode=1777
    mount -t tmpfs -o "size=$disk_size,mode=$mode" "rlinfra-$place" "$dir/$place" ||
      die "node $name: could not mount a tmpfs at $dir/$place"
    # A running sshd would still show the folder that is now covered.
    config_changed=1
  done
  chmod 1777 "$dir/tmp"
  write_if_changed "$dir/$NODE_MARKER" 0644 \
    "{\"managed_by\": \"rlinfra\", \"cluster\": \"$RLINFRA_CLUSTER\", \"node\": \"$name\", \"netns\": \"$ns\", \"ip\": \"$ip_addr\"}" || true

  # The network: namespace, veth pair (eth0 inside, host side on the bridge), address, routes.
  netns_exists "$ns" || ip netns add "$ns"
  # The machine's nameservers are not reachable from a host: answer lookups locally at once
  # (`ip netns exec` binds this file over /etc/resolv.conf), or every reverse lookup, e.g. in a
  # collective's rendezvous, waits for a timeout.
  mkdir -p "/etc/netns/$ns"
  write_if_changed "/etc/netns/$ns/resolv.conf" 0644 "nameserver 127.0.0.1" || true
  if ! { link_exists "$veth" && ip -n "$ns" link show dev eth0 >/dev/null 2>&1; }; then
    if link_exists "$veth"; then ip link delete dev "$veth"; fi
    if ip -n "$ns" link show dev eth0 >/dev/null 2>&1; then ip -n "$ns" link delete dev eth0; fi
    ip link add name "$veth" type veth peer name eth0 netns "$ns"
  fi
  ip link set dev "$veth" master "$RLINFRA_BRIDGE"
  ip link set dev "$veth" alias "rlinfra:$name"
  ip link set dev "$veth" up
  ip -n "$ns" link set dev lo up
  ip -n "$ns" link set dev eth0 address "$RLINFRA_NODE_MAC"
  ip -n "$ns" addr replace "$ip_addr/$RLINFRA_PREFIX_LEN" dev eth0
  ip -n "$ns" link set dev eth0 up
  ip -n "$ns" route replace default via "$RLINFRA_GATEWAY" dev eth0

  # sshd: host key, authorized key, config.
  if [[ ! -f "$dir/ssh_host_ed25519_key" ]]; then
    rm -f "$dir/ssh_host_ed25519_key.pub"
    ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$dir/ssh_host_ed25519_key"
  fi
  write_if_changed "$dir/authorized_keys" 0600 "$RLINFRA_AUTHORIZED_KEY" || true
  config="# Written by rlinfra (host.sh node-create) for node $name; edits here are overwritten.
Port 22
ListenAddress $ip_addr
HostKey $view/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AuthorizedKeysFile $view/authorized_keys
PidFile none
PrintMotd no
X11Forwarding no
Subsystem sftp internal-sftp"
  write_if_changed "$dir/sshd_config" 0644 "$config" && config_changed=1
  # The host's own ~/.bashrc for the login user. sshd runs every command through the user's
  # shell, and Debian's bash reads ~/.bashrc when sshd starts it, even for one command; this
  # machine's file (pyenv, toolchains) is not the host's, and on a developer machine it can cost
  # more than the Ansible task itself. A cloud image's is silent for non-interactive shells.
  write_if_changed "$dir/bashrc" 0644 "# ~/.bashrc of rlinfra local host $name (written by host.sh node-create).
# Non-interactive shells (Ansible tasks, rlinfra exec) read nothing here.
case \$- in *i*) ;; *) return ;; esac
PS1='\u@$name:\w\\$ '" && config_changed=1
  home="$(getent passwd root | cut -d: -f6)"
  mkdir -p /run/sshd /opt "$view"
  in_node "$ns" "$dir" "$view" "$sshd" -t -f "$view/sshd_config" || die "node $name: sshd rejects $dir/sshd_config"

  # sshd inside the namespace, with the node's /opt and /tmp bound over the host's.
  if pid="$(node_sshd_serving "$dir" "$view" "$ns")"; then
    if ((config_changed)); then
      kill_pids 10 "$pid"
      pid=""
    fi
  else
    pid=""
  fi
  if [[ -z "$pid" ]]; then
    : >"$dir/sshd.log"
    # Own PID namespace too: a node sees (and `ray stop` kills) only its own processes. sshd is
    # its PID 1 and reaps orphans; the recorded pid is the unshare parent, which takes the node
    # down with it (--kill-child).
    setsid ip netns exec "$ns" unshare --mount --propagation private --pid --fork --mount-proc \
      --kill-child \
      sh -c 'mount --rbind "$1" "$2" && mount --bind "$2/opt" /opt && mount --bind "$2/tmp" /tmp &&
        { [ ! -f "$4/.bashrc" ] || mount --bind "$2/bashrc" "$4/.bashrc"; } &&
        exec "$3" -D -f "$2/sshd_config" -E "$2/sshd.log"' \
      sh "$dir" "$view" "$sshd" "$home" </dev/null >/dev/null 2>&1 &
    pid=$!
    echo "$pid" >"$dir/sshd.pid"
  fi

  # Bounded wait until port 22 answers, probed from the host side of the bridge.
  local deadline=$((SECONDS + wait_s))
  until timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/22"' sh "$ip_addr" 2>/dev/null; do
    if ! pid_alive "$pid"; then
      die "node $name: sshd (pid $pid) exited before port 22 opened; see $dir/sshd.log: $(tail -n 3 "$dir/sshd.log" 2>/dev/null | tr '\n' ' ')"
    fi
    if ((SECONDS >= deadline)); then
      die "node $name: port 22 on $ip_addr did not open within ${wait_s}s; see $dir/sshd.log"
    fi
    sleep 0.2
  done
}

bridge_check() {
  need RLINFRA_BRIDGE
  link_exists "$RLINFRA_BRIDGE" || gone "no such link"
}

node_check() {
  need RLINFRA_NETNS RLINFRA_VETH RLINFRA_BRIDGE RLINFRA_NODE_DIR
  local ns="$RLINFRA_NETNS" veth="$RLINFRA_VETH" dir="$RLINFRA_NODE_DIR" place
  local view="$VIEW_ROOT/$RLINFRA_NETNS"
  netns_exists "$ns" || gone "network namespace $ns is gone"
  link_exists "$veth" || gone "link $veth is gone"
  ip -o link show dev "$veth" | grep -qF " master $RLINFRA_BRIDGE " ||
    gone "link $veth is not on bridge $RLINFRA_BRIDGE"
  if [[ -n "${RLINFRA_NODE_DISK_SIZE-4g}" ]]; then
    for place in opt tmp; do
      mountpoint -q "$dir/$place" || gone "its /$place ($dir/$place) is not mounted"
    done
  fi
  node_sshd_serving "$dir" "$view" "$ns" >/dev/null ||
    gone "its sshd (pid file $dir/sshd.pid) is not running"
}

gone() {
  echo "$*"
  exit 3
}

node_destroy() {
  need RLINFRA_NETNS RLINFRA_VETH RLINFRA_NODE_DIR
  local ns="$RLINFRA_NETNS" veth="$RLINFRA_VETH" dir="$RLINFRA_NODE_DIR"
  local wait_s="${RLINFRA_KILL_WAIT_S:-10}" pids=() pid view="$VIEW_ROOT/$RLINFRA_NETNS"
  [[ "$dir" == /?* ]] || die "node folder '$dir' is not an absolute path"

  # Every process in the namespace, and the recorded sshd in case the namespace name is gone.
  if netns_exists "$ns"; then
    while read -r pid; do
      [[ -n "$pid" ]] && pids+=("$pid")
    done < <(ip netns pids "$ns" 2>/dev/null || true)
  fi
  if pid="$(node_sshd_pid "$dir" "$view")"; then pids+=("$pid"); fi
  if [[ ${#pids[@]} -gt 0 ]]; then
    kill_pids "$wait_s" $(printf '%s\n' "${pids[@]}" | sort -un)
  fi

  # Deleting the host side of the veth pair takes eth0 with it at once; a namespace's own links
  # would otherwise go later, when the kernel frees the namespace.
  delete_link "$veth"
  if netns_exists "$ns"; then ip netns delete "$ns"; fi
  rm -rf "/etc/netns/$ns"

  # The bind mounts lived in the node's own mount namespace; nothing may remain in the host's.
  local mounts mnt place
  for place in "$view" "$dir"; do
    mounts="$(mounts_under "$place")"
    if [[ -n "$mounts" ]]; then
      while read -r mnt; do umount -l -- "$mnt" || true; done <<<"$mounts"
      [[ -z "$(mounts_under "$place")" ]] || die "mounts under $place remain after destroy (see /proc/mounts)"
    fi
  done
  if [[ -d "$view" ]]; then rmdir -- "$view"; fi

  if [[ -d "$dir" ]]; then
    if [[ -f "$dir/$NODE_MARKER" ]]; then
      rm -rf -- "$dir"
    elif ! rmdir -- "$dir" 2>/dev/null; then
      warn "left $dir in place: it has files but no $NODE_MARKER, so rlinfra did not make it"
    fi
  fi
}

case "${1:-}" in
  preflight) preflight ;;
  bridge-create) bridge_create ;;
  bridge-destroy) bridge_destroy ;;
  node-create) node_create ;;
  node-destroy) node_destroy ;;
  bridge-check) bridge_check ;;
  node-check) node_check ;;
  *)
    echo "usage: $0 {preflight|bridge-create|bridge-destroy|node-create|node-destroy|bridge-check|node-check} (inputs in RLINFRA_* variables)" >&2
    exit 2
    ;;
esac
