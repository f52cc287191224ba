#!/usr/bin/env bash
# A private PostgreSQL server for tests: started as an unprivileged account in
# a directory of the caller's, on a free TCP port of 127.0.0.1. The one
# implementation behind src/store/pg_test_server.h (C++ tests) and
# tests/integration/pg_server.py (pytest); nothing here assumes a system-wide
# PostgreSQL or touches one.
#
#   pg_server.sh start DIR    initdb DIR/data if there is no cluster, start it on
#                             a free port, print its URL
#   pg_server.sh restart DIR  start it again on the port it had (DIR/port), print
#                             its URL
#   pg_server.sh stop DIR     fast shutdown; no error if it is not running
#   pg_server.sh kill DIR     SIGKILL the postmaster and every child (a crash)
#   pg_server.sh url DIR      print its URL
#
# The URL is postgresql://gpupool@127.0.0.1:PORT/postgres (trust auth, user
# gpupool, the only line start/restart/url print on stdout). DIR/log is the
# server's log; on failure the script says why on stderr, with its tail, and
# exits non-zero.
#
# The binaries: $GPUPOOL_PG_BINDIR if set, else the newest
# /usr/lib/postgresql/*/bin (Debian's layout), else `pg_config --bindir`,
# else PATH. As root (initdb refuses root) the server runs as `postgres` if
# that account exists, else `nobody`; DIR is chowned to it, and every
# directory above DIR must let it through. Otherwise it runs as the caller.
#
# Settings for speed, not durability: fsync=off and full_page_writes=off (a
# killed server loses nothing, since the kernel still has what it wrote; a
# crash of the machine would), no JIT, dynamic shared memory in files under
# DIR/data (not /dev/shm, which is small in containers and where a killed
# server's segments would stay forever).
#
# GPUPOOL_PG_OWNER_PID (optional): the process that owns this server. A
# watcher (in its own session) stops the server once that process is gone,
# so that a test binary that crashed or was killed by a timeout leaves no
# postgres behind; with GPUPOOL_PG_OWNER_REMOVES_DIR=1 it also removes DIR.
# The watcher ends when DIR is removed or the server is stopped.
set -euo pipefail
export LC_ALL=C LANG=C
unset PGDATA PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGPASSWORD PGPASSFILE PGSERVICE \
  PGSERVICEFILE PGOPTIONS PGSSLMODE PGCONNECT_TIMEOUT PGAPPNAME PGTZ PGCLIENTENCODING

readonly SELF="${BASH_SOURCE[0]}"
readonly USER_NAME=gpupool
readonly START_TIMEOUT_S=60
readonly PORT_TRIES=30    # random ports to try
readonly RESTART_TRIES=10 # tries of the same port, 0.2 s apart

die() {
  echo "pg_server.sh: $*" >&2
  exit 1
}

usage() {
  echo "usage: pg_server.sh start|restart|stop|kill|url DIR" >&2
  exit 2
}

# The last lines of a file (the server's log) for an error message, indented.
tail_of() { # FILE [FROM_BYTE]
  local file=$1 from=${2:-0}
  [[ -r $file ]] || return 0
  echo "--- last lines of $file:"
  tail -c +"$((from + 1))" "$file" | tail -n 30 | sed 's/^/    /'
}

find_bindir() {
  local d
  if [[ -n ${GPUPOOL_PG_BINDIR:-} ]]; then
    [[ -x $GPUPOOL_PG_BINDIR/initdb && -x $GPUPOOL_PG_BINDIR/pg_ctl ]] ||
      die "GPUPOOL_PG_BINDIR=$GPUPOOL_PG_BINDIR has no initdb and pg_ctl"
    echo "$GPUPOOL_PG_BINDIR"
    return
  fi
  # Newest version first: sort -V orders .../9.6/... before .../15/...
  while read -r d; do
    d=${d%/initdb}
    if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
      echo "$d"
      return
    fi
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V -r)
  if d=$(pg_config --bindir 2>/dev/null) && [[ -x $d/initdb && -x $d/pg_ctl ]]; then
    echo "$d"
    return
  fi
  if d=$(command -v initdb) && [[ -x ${d%/initdb}/pg_ctl ]]; then
    echo "${d%/initdb}"
    return
  fi
  die "no PostgreSQL server binaries: looked for /usr/lib/postgresql/*/bin/initdb," \
    "pg_config --bindir and initdb on PATH (install postgresql, or set GPUPOOL_PG_BINDIR)"
}

# The account the server runs as, and as_user to run a command as it.
if ((EUID == 0)); then
  if id -u postgres >/dev/null 2>&1; then
    RUN_USER=postgres
  else
    RUN_USER=nobody
  fi
  as_user() { setpriv --reuid="$RUN_USER" --regid="$(id -g "$RUN_USER")" --init-groups -- "$@"; }
else
  RUN_USER=$(id -un)
  as_user() { "$@"; }
fi

# Whether PID is a live process (a zombie is not: it holds nothing any more).
# (builtins only: children_of reads every process's stat.)
alive() { # PID
  local stat
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

zombie() { # PID
  local stat
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ ${stat%% *} == Z ]]
}

# The process ids whose parent is PID.
children_of() { # PID
  local f stat state ppid
  for f in /proc/[0-9]*/stat; do
    read -r stat 2>/dev/null <"$f" || continue
    read -r state ppid _ <<<"${stat##*) }"
    if [[ $ppid == "$1" && $state != Z ]]; then
      echo "${stat%% *}"
    fi
  done
}

# A killed postmaster that nobody reaps (in a container whose init does not
# reap orphans) stays a zombie, and a zombie still "exists" for the next
# postmaster's check of the lock files it left: its pid file and the socket's.
forget_zombie() {
  local f owner
  for f in "$DATA/postmaster.pid" "$DIR"/.s.PGSQL.*.lock; do
    [[ -f $f ]] || continue
    read -r owner <"$f" || continue
    if zombie "$owner"; then
      rm -f "$f"
      if [[ $f == *.lock ]]; then rm -f "${f%.lock}"; fi
    fi
  done
}

# The postmaster's pid from DIR/data/postmaster.pid, or nothing.
postmaster_pid() {
  local pid=""
  [[ -f $DATA/postmaster.pid ]] && read -r pid <"$DATA/postmaster.pid" 2>/dev/null
  echo "$pid"
}

url_of() { echo "postgresql://$USER_NAME@127.0.0.1:$1/postgres"; }

saved_port() {
  local port=""
  [[ -f $DIR/port ]] && read -r port <"$DIR/port"
  [[ $port =~ ^[0-9]+$ ]] || die "$DIR/port: no saved port (was the server ever started here?)"
  echo "$port"
}

random_port() {
  if [[ -n ${SRANDOM:-} ]]; then
    echo $((SRANDOM % 40000 + 20000))
  else
    echo $((((RANDOM << 15) | RANDOM) % 40000 + 20000))
  fi
}

# Makes DIR, gives it to the account, and checks the account can use it.
prepare_dir() {
  mkdir -p "$DIR" || die "cannot create $DIR"
  if ((EUID == 0)); then
    chown "$RUN_USER:" "$DIR" || die "cannot chown $DIR to $RUN_USER"
    if ! as_user test -x "$DIR" -a -w "$DIR"; then
      local d="" part
      local -a parts
      IFS=/ read -r -a parts <<<"${DIR#/}"
      for part in "${parts[@]}"; do
        d+=/$part
        if ! as_user test -x "$d"; then
          die "the server runs as $RUN_USER (initdb refuses root), and $RUN_USER cannot" \
            "reach $DIR: $d is not searchable by it ($(stat -c '%A %U:%G' "$d")); use a" \
            "directory under /tmp, or make $d searchable (chmod o+x)"
        fi
      done
      die "$RUN_USER cannot write to $DIR"
    fi
  fi
}

cluster_config() {
  local sockdir=$DIR
  # The socket path DIR/.s.PGSQL.PORT must fit sockaddr_un (107 bytes); in a
  # deeper directory the server listens on TCP only.
  if ((${#DIR} + 16 > 107)); then
    sockdir=""
  fi
  cat <<CONF

# --- tests/postgres/pg_server.sh: a private server for tests ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '${sockdir//\'/\'\'}'
max_connections = 200
shared_buffers = 32MB
fsync = off
full_page_writes = off
dynamic_shared_memory_type = mmap
huge_pages = off
jit = off
timezone = 'UTC'
log_timezone = 'UTC'
lc_messages = 'C'
CONF
}

init_cluster() {
  [[ -f $DATA/PG_VERSION ]] && return 0
  local bindir=$1
  if ! as_user "$bindir/initdb" -D "$DATA" --auth=trust -U "$USER_NAME" -E UTF8 --locale=C \
    --no-sync --no-instructions >"$DIR/initdb.log" 2>&1; then
    echo "pg_server.sh: initdb $DATA (as $RUN_USER) failed" >&2
    tail_of "$DIR/initdb.log" >&2
    exit 1
  fi
  cluster_config >>"$DATA/postgresql.conf"
}

running() {
  local pid
  pid=$(postmaster_pid)
  [[ -n $pid ]] && alive "$pid"
}

# Starts the server on PORT: 0 when it accepts connections, 3 when PORT is
# taken; any other failure ends the script.
start_on_port() { # BINDIR PORT
  local bindir=$1 port=$2 from=0
  [[ -f $DIR/log ]] && from=$(stat -c %s "$DIR/log")
  if as_user "$bindir/pg_ctl" -D "$DATA" -l "$DIR/log" -w -t "$START_TIMEOUT_S" \
    -o "-p $port" start </dev/null >"$DIR/pg_ctl.out" 2>&1; then
    if ! "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -U "$USER_NAME" -d postgres -t 30; then
      echo "pg_server.sh: the server in $DATA started but does not accept connections on" \
        "127.0.0.1:$port" >&2
      tail_of "$DIR/log" "$from" >&2
      exit 1
    fi
    return 0
  fi
  if tail -c +"$((from + 1))" "$DIR/log" 2>/dev/null | grep -q 'Address already in use'; then
    return 3
  fi
  {
    echo "pg_server.sh: cannot start the server in $DATA (as $RUN_USER, port $port):"
    sed 's/^/    /' "$DIR/pg_ctl.out"
    tail_of "$DIR/log" "$from"
  } >&2
  exit 1
}

# The watcher of GPUPOOL_PG_OWNER_PID (see the top), started once per DIR.
start_watcher() {
  local owner=${GPUPOOL_PG_OWNER_PID:-} pid=""
  [[ -n $owner ]] || return 0
  [[ $owner =~ ^[0-9]+$ ]] || die "GPUPOOL_PG_OWNER_PID=$owner is not a process id"
  [[ -f $DIR/watcher.pid ]] && read -r pid <"$DIR/watcher.pid"
  if [[ -n $pid ]] && alive "$pid" && grep -qa _watch "/proc/$pid/cmdline" 2>/dev/null; then
    return 0
  fi
  setsid bash "$SELF" _watch "$DIR" "$owner" "${GPUPOOL_PG_OWNER_REMOVES_DIR:-0}" \
    </dev/null >/dev/null 2>&1 &
}

watch() { # OWNER REMOVE
  local owner=$1 remove=$2
  echo $$ >"$DIR/watcher.pid"
  while alive "$owner" && [[ -d $DATA ]] && [[ $(cat "$DIR/watcher.pid" 2>/dev/null) == "$$" ]]; do
    sleep 1
  done
  if ! alive "$owner" && [[ -d $DIR ]]; then
    stop_server || true
    if [[ $remove == 1 ]]; then rm -rf "$DIR"; fi
  fi
}

do_start() { # [PORT]: that port (restart), or a random free one
  local bindir port rc tries=0 fixed=${1:-} max_tries=$PORT_TRIES
  [[ -n $fixed ]] && max_tries=$RESTART_TRIES
  bindir=$(find_bindir)
  prepare_dir
  init_cluster "$bindir"
  if running; then
    port=$(saved_port)
  else
    forget_zombie
    while :; do
      tries=$((tries + 1))
      if [[ -n $fixed ]]; then port=$fixed; else port=$(random_port); fi
      rc=0
      start_on_port "$bindir" "$port" || rc=$?
      ((rc == 0)) && break
      if ((tries >= max_tries)); then
        if [[ -n $fixed ]]; then
          die "cannot start the server in $DATA again: port $port stays in use" \
            "(by another program); see $DIR/log"
        fi
        die "cannot start the server in $DATA: $tries random ports were all in use"
      fi
      # The same port again (restart): wait for whoever holds it to let go.
      [[ -n $fixed ]] && sleep 0.2
    done
    echo "$port" >"$DIR/port"
  fi
  start_watcher
  url_of "$port"
}

# What a killed server left behind that nothing would clean up, since it is
# not started again: its System V shared memory segment (a small one: the
# rest is anonymous or in DIR/data) and its pid file. A server that is started
# again cleans up after itself.
clean_stale() {
  local shm
  # Line 7 of postmaster.pid: "KEY SHMID". Only a segment nobody is attached to.
  shm=$(sed -n 7p "$DATA/postmaster.pid" 2>/dev/null | awk '{print $2}')
  if [[ $shm =~ ^[0-9]+$ ]] && ipcs -m -i "$shm" 2>/dev/null | grep -q 'nattch=0'; then
    ipcrm -m "$shm" 2>/dev/null || true
  fi
  rm -f "$DATA/postmaster.pid"
}

stop_server() {
  local pid bindir
  pid=$(postmaster_pid)
  [[ -n $pid ]] || return 0
  if ! alive "$pid"; then
    clean_stale
    return 0
  fi
  bindir=$(find_bindir) || return 1
  if ! as_user "$bindir/pg_ctl" -D "$DATA" -m fast -w -t "$START_TIMEOUT_S" stop \
    </dev/null >"$DIR/pg_ctl.out" 2>&1; then
    if running; then
      {
        echo "pg_server.sh: cannot stop the server in $DATA:"
        sed 's/^/    /' "$DIR/pg_ctl.out"
        tail_of "$DIR/log"
      } >&2
      return 1
    fi
  fi
}

do_stop() {
  [[ -d $DIR ]] || return 0
  stop_server || exit 1
  rm -f "$DIR/watcher.pid" # ends the watcher
}

do_kill() {
  local pid kids p i
  pid=$(postmaster_pid)
  [[ -n $pid ]] && alive "$pid" || return 0
  # Stopped, the postmaster forks no new child while its children are listed.
  kill -STOP "$pid" 2>/dev/null || true
  kids=$(children_of "$pid")
  kill -KILL "$pid" 2>/dev/null || true
  for p in $kids; do kill -KILL "$p" 2>/dev/null || true; done
  for ((i = 0; i < 200; i++)); do
    local left=""
    for p in $pid $kids; do alive "$p" && left+=" $p"; done
    [[ -z $left ]] && break
    sleep 0.05
  done
  [[ -z $left ]] || die "killed the server in $DATA, but these processes are still there:$left"
}

(($# >= 2)) || usage
cmd=$1
[[ -n $2 ]] || usage
DIR=$(realpath -m -- "$2")
cd / # the account may not be allowed in the caller's directory
DATA=$DIR/data

case $cmd in
  start) do_start ;;
  restart)
    port=$(saved_port) # (exits if there is none)
    do_start "$port"
    ;;
  stop) do_stop ;;
  kill) do_kill ;;
  url)
    port=$(saved_port)
    url_of "$port"
    ;;
  _watch) watch "$3" "$4" ;;
  *) usage ;;
esac
