#!/usr/bin/env bash
# Make podman usable on this machine for `make image` and `make e2e`; idempotent, changes only what is
# needed. As root with apt-get: installs podman (and runc, debootstrap when needed) when absent. Writes
# /etc/containers/containers.conf.d/50-rocksidecar.conf only when this host needs it:
#  - runtime "runc" when cgroups are in hybrid mode (v1 controllers plus a v2 "unified" mount): crun
#    refuses to start containers there ("cgroups in hybrid mode not supported");
#  - default_ulimits at the host's hard limits when those are below what podman asks for by default
#    (1048576 open files and processes): otherwise every container fails with "setrlimit ... not permitted".
# Then it checks that a container starts, when an image to try is given.
# Usage: tools/podman_setup.sh [--with-debootstrap] [--check IMAGE]
set -euo pipefail

DROPIN_DIR=${ROCKSIDECAR_CONTAINERS_CONF_D:-/etc/containers/containers.conf.d}  # overridden by tests
DROPIN="$DROPIN_DIR/50-rocksidecar.conf"
PODMAN_DEFAULT_RLIMIT=1048576
want_debootstrap=false check_image=""
while [ $# -gt 0 ]; do
  case "$1" in
    --with-debootstrap) want_debootstrap=true ;;
    --check) check_image="$2"; shift ;;
    *) echo "usage: tools/podman_setup.sh [--with-debootstrap] [--check IMAGE]" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "podman_setup: $*"; }
die() { echo "podman_setup: $*" >&2; exit 1; }

apt_install() { # apt_install PACKAGE...: refresh the package lists only when the first try fails
  [ "$(id -u)" = 0 ] || die "$* missing and not root: install them (apt-get install $*) and run again"
  command -v apt-get >/dev/null || die "$* missing and no apt-get: install them and run again"
  say "apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; }
}

hybrid_cgroups() {
  [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ] && [ -d /sys/fs/cgroup/unified ] &&
    [ "$(stat -fc %T /sys/fs/cgroup/unified)" = cgroup2fs ]
}

limit_below_default() { # limit_below_default VALUE: a hard limit podman's default would exceed
  [ "$1" != unlimited ] && [ "$1" -lt "$PODMAN_DEFAULT_RLIMIT" ]
}

missing=()
command -v podman >/dev/null || missing+=(podman)
if hybrid_cgroups && ! command -v runc >/dev/null; then missing+=(runc); fi
if $want_debootstrap && ! command -v debootstrap >/dev/null; then missing+=(debootstrap); fi
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# Rootless podman reads only the user's own configuration; the drop-in is for root's podman.
[ "$(id -u)" = 0 ] || { say "not root: containers.conf left as it is"; exit 0; }

engine=() containers=()
hybrid_cgroups && engine+=('runtime = "runc"')
nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
# runc failed to set a process limit above kernel.pid_max on these machines (found by bisection).
pid_max=$(cat /proc/sys/kernel/pid_max)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
ulimits=()
limit_below_default "$nofile" && ulimits+=("\"nofile=$nofile:$nofile\"")
limit_below_default "$nproc" && ulimits+=("\"nproc=$nproc:$nproc\"")
if [ ${#ulimits[@]} -gt 0 ]; then
  containers+=("default_ulimits = [$(IFS=,; echo "${ulimits[*]}" | sed 's/,/, /g')]")
fi

wanted=""
if [ ${#containers[@]} -gt 0 ]; then wanted+=$'[containers]\n'"$(printf '%s\n' "${containers[@]}")"$'\n'; fi
if [ ${#engine[@]} -gt 0 ]; then wanted+=$'[engine]\n'"$(printf '%s\n' "${engine[@]}")"$'\n'; fi

if [ -z "$wanted" ]; then
  if [ -f "$DROPIN" ]; then rm -f "$DROPIN" && say "removed $DROPIN (no longer needed)"; fi
  say "podman needs no configuration here"
else
  header="# Written by rocksidecar's tools/podman_setup.sh for this host's cgroups and rlimits."
  content="$header"$'\n'"$wanted"
  if [ -f "$DROPIN" ] && [ "$(cat "$DROPIN")"$'\n' = "$content" ]; then
    say "$DROPIN is up to date"
  else
    mkdir -p "$DROPIN_DIR"
    printf '%s' "$content" >"$DROPIN"
    say "wrote $DROPIN:"
    sed 's/^/  /' "$DROPIN"
  fi
fi
podman info >/dev/null || die "podman info fails; see its error above"
if [ -n "$check_image" ]; then
  podman run --rm "$check_image" true || die "a container of $check_image does not start; see the error above"
  say "containers start"
fi
